// Browser-safe HTTP (issue 13): a page of another origin, and a DNS-rebinding
// page, cannot submit, cancel or drain through a logged-in victim's browser,
// nor read the API; the dashboard itself (same origin, session cookie and
// CSRF token) can.
//
// The attacker pages run in a real chromium against a real `drover up`:
//   - http://attacker.test:<port>/ (another site: chromium maps the name to
//     127.0.0.1 with --host-resolver-rules), and
//   - http://127.0.0.1:<other port>/ (same site, another origin: chromium
//     attaches the victim's SameSite=Strict cookie to its requests, so the
//     server's own checks, Origin, Sec-Fetch-Site, Content-Type and CSRF,
//     must stop them);
//   - http://rebind.test:<drover's port>/ (DNS rebinding: the name resolves
//     to drover itself, so the browser sees a same-origin page).
// The first test checks the same contract from node, request by request.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import {
  Drover, TOKEN_RE, droverBinary, fleetUpdates, openTab, waitFor, waitForFleetUpdates, waitForJobRowState, waitForLogin,
  withDashboard,
} from './harness.mjs';

const HOST_RULES = '--host-resolver-rules=MAP attacker.test 127.0.0.1, MAP rebind.test 127.0.0.1';
const SIM_FLAGS = ['--devices', 'none', '--simulate', '2', '--simulate-gpus', '2'];

// One HTTP request with exactly the headers given (Host included, which
// fetch() would not let us set). Returns {status, headers, text, json}.
function raw(drover, { method = 'GET', path: p, headers = {}, body } = {}) {
  const sep = drover.http.lastIndexOf(':');
  const host = drover.http.slice(0, sep).replace(/^\[|\]$/g, '');
  const port = Number(drover.http.slice(sep + 1));
  const h = { host: drover.http, ...headers };
  if (body !== undefined) h['content-length'] = String(Buffer.byteLength(body));
  else if (method !== 'GET' && method !== 'HEAD') h['content-length'] = '0';
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, method, path: p, headers: h, setHost: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let json = null;
        try {
          json = text ? JSON.parse(text) : null;
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    req.setTimeout(30000, () => req.destroy(new Error(`${method} ${p}: no answer in 30 s`)));
    if (body !== undefined) req.write(body);
    req.end();
  });
}

// `drover args...` in directory `cwd` with `env` and no DROVER_TOKEN from
// this process's environment.
function cliIn(cwd, args, env) {
  const { DROVER_TOKEN: _, DROVER_DATA_DIR: __, ...base } = process.env;
  return new Promise((resolve) => {
    execFile(droverBinary(), args, { cwd, env: { ...base, ...env }, timeout: 60000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, out: stdout, err: stderr });
    });
  });
}

const show = (r) => `HTTP ${r.status} ${r.text.slice(0, 300)}`;

function expectStatus(r, want, what) {
  assert.equal(r.status, want, `${what}: expected HTTP ${want}, got ${show(r)}`);
}

// The drover_session cookie of a Set-Cookie header: {value, attributes}.
function sessionCookie(res) {
  const all = [].concat(res.headers['set-cookie'] ?? []);
  const line = all.find((c) => c.startsWith('drover_session='));
  if (!line) return null;
  const [pair, ...attrs] = line.split(';').map((s) => s.trim());
  return { value: pair.slice('drover_session='.length), attrs: attrs.map((a) => a.toLowerCase()), line };
}

function jobBody(name) {
  return JSON.stringify({ spec: { name, command: ['sh', '-c', 'echo pwned'], gpus: 1 } });
}

test('the HTTP API needs a token or a session cookie, and refuses cross-origin and foreign hosts',
  { timeout: 120000 }, async () => {
    const drover = new Drover(SIM_FLAGS);
    try {
      await drover.start();
      const D = drover.dataDir;

      // <data-dir>/admin.token and dashboard-url: one line each, mode 0600.
      for (const f of ['admin.token', 'dashboard-url']) {
        const mode = fs.statSync(path.join(D, f)).mode & 0o777;
        assert.equal(mode.toString(8), '600', `${f} has mode ${mode.toString(8)}`);
        assert.equal(fs.readFileSync(path.join(D, f), 'utf8').trim().split('\n').length, 1, `${f} is one line`);
      }
      assert.match(drover.token, TOKEN_RE);
      const link = new URL(drover.dashboardUrl());
      assert.equal(`${link.protocol}//${link.host}${link.pathname}`, `http://${drover.http}/ui/`, 'dashboard-url is this server\'s /ui/');
      const code = new URLSearchParams(link.hash.slice(1)).get('code');
      assert.ok(code, 'dashboard-url has #code=...');

      // Open without authentication: health, readiness, the page's assets.
      expectStatus(await raw(drover, { path: '/healthz' }), 200, 'GET /healthz');
      await waitFor(async () => (await raw(drover, { path: '/readyz' })).status === 200, { what: '/readyz to be 200' });
      const ui = await raw(drover, { path: '/ui/' });
      expectStatus(ui, 200, 'GET /ui/ without a session');

      // Without a token or cookie: 401 with the error body.
      const anon = await raw(drover, { path: '/api/v1/jobs' });
      expectStatus(anon, 401, 'GET /api/v1/jobs without credentials');
      assert.equal(anon.json?.code, 16, `401 body code: ${anon.text}`);
      assert.equal(anon.json?.status, 'UNAUTHENTICATED', `401 body status: ${anon.text}`);
      assert.ok(!anon.text.includes('"jobs"'), 'no data in the 401');
      expectStatus(await raw(drover, { path: '/api/v1/events' }), 401, 'GET /api/v1/events without credentials');
      const wrong = `drv_${'0'.repeat(16)}_${'A'.repeat(43)}`;
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { authorization: `Bearer ${wrong}` } }), 401,
        'a well-formed but unknown token');
      expectStatus(await raw(drover, { path: '/api/v1/session' }), 401, 'GET /api/v1/session without a cookie');

      const bearer = { authorization: `Bearer ${drover.token}` };
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: bearer }), 200, 'GET /api/v1/jobs with the admin token');

      // The one-time code: a session, an HttpOnly SameSite=Strict cookie, a CSRF token; once only.
      const json = { 'content-type': 'application/json' };
      const login = await raw(drover, { method: 'POST', path: '/api/v1/session', headers: json, body: JSON.stringify({ code }) });
      expectStatus(login, 200, 'POST /api/v1/session {code}');
      assert.equal(login.json?.principal?.role, 'admin', `the login link logs in an admin: ${login.text}`);
      assert.ok(login.json?.principal?.name, 'the principal has a name');
      const csrf = login.json?.csrfToken;
      assert.ok(typeof csrf === 'string' && csrf.length >= 16, `a CSRF token: ${login.text}`);
      const cookie = sessionCookie(login);
      assert.ok(cookie, `Set-Cookie drover_session: ${JSON.stringify(login.headers['set-cookie'])}`);
      assert.ok(cookie.attrs.includes('httponly'), `HttpOnly: ${cookie.line}`);
      assert.ok(cookie.attrs.includes('samesite=strict'), `SameSite=Strict: ${cookie.line}`);
      assert.ok(cookie.attrs.includes('path=/'), `Path=/: ${cookie.line}`);
      assert.ok(!login.text.includes(cookie.value), 'the session id is not in the body');
      expectStatus(await raw(drover, { method: 'POST', path: '/api/v1/session', headers: json, body: JSON.stringify({ code }) }),
        401, 'the login code a second time');
      expectStatus(await raw(drover, { method: 'POST', path: '/api/v1/session', headers: json, body: JSON.stringify({ token: wrong }) }),
        401, 'POST /api/v1/session with an unknown token');

      const withCookie = { cookie: `drover_session=${cookie.value}` };
      const who = await raw(drover, { path: '/api/v1/session', headers: withCookie });
      expectStatus(who, 200, 'GET /api/v1/session with the cookie');
      assert.deepEqual(who.json?.principal, login.json.principal);
      assert.equal(who.json?.csrfToken, csrf, 'GET /api/v1/session gives the same CSRF token');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: withCookie }), 200, 'GET /api/v1/jobs with the cookie');

      // A state-changing call that passes every check answers 404 (no such
      // job), so nothing changes whichever way it goes.
      const cancel = '/api/v1/jobs/j-999999/cancel';
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...withCookie, ...json } }), 403,
        'cookie, JSON, no X-CSRF-Token');
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...withCookie, ...json, 'x-csrf-token': `${csrf}x` } }), 403,
        'cookie, JSON, a wrong X-CSRF-Token');
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...withCookie, 'content-type': 'text/plain', 'x-csrf-token': csrf } }), 415,
        'cookie, CSRF, text/plain');
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...withCookie, 'x-csrf-token': csrf } }), 415,
        'cookie, CSRF, no Content-Type');
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...withCookie, ...json, 'x-csrf-token': csrf } }), 404,
        'cookie, CSRF, JSON (passes the checks)');
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...bearer, ...json } }), 404,
        'bearer, JSON, no CSRF header (passes the checks)');
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...bearer, 'content-type': 'text/plain' } }), 415,
        'bearer, text/plain');
      expectStatus(await raw(drover, { method: 'POST', path: '/api/v1/jobs', headers: { ...bearer, 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=b' }), 415,
        'bearer, a form body');

      // Origin and Sec-Fetch-Site: only the server's own origin.
      const self = `http://${drover.http}`;
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { ...bearer, origin: self } }), 200, 'Origin: its own');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { ...bearer, origin: 'http://attacker.test' } }), 403,
        'GET with Origin: http://attacker.test (bearer)');
      expectStatus(await raw(drover, { method: 'POST', path: cancel, headers: { ...withCookie, ...json, 'x-csrf-token': csrf, origin: 'http://attacker.test' } }), 403,
        'POST with Origin: http://attacker.test (cookie and CSRF)');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { ...withCookie, origin: 'null' } }), 403, 'Origin: null');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { ...withCookie, 'sec-fetch-site': 'cross-site' } }), 403,
        'Sec-Fetch-Site: cross-site');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { ...withCookie, 'sec-fetch-site': 'same-origin' } }), 200,
        'Sec-Fetch-Site: same-origin');

      // Host: IP literals and localhost only (DNS rebinding).
      const port = drover.http.slice(drover.http.lastIndexOf(':') + 1);
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { ...bearer, host: `localhost:${port}` } }), 200, 'Host: localhost');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { ...bearer, host: `rebind.test:${port}` } }), 403, 'Host: rebind.test');
      expectStatus(await raw(drover, { path: '/api/v1/session', headers: { ...withCookie, host: `rebind.test:${port}` } }), 403,
        'Host: rebind.test with the cookie');

      // Logout ends the session on the server, not only in the browser.
      expectStatus(await raw(drover, { method: 'DELETE', path: '/api/v1/session', headers: { ...withCookie, ...json } }), 403,
        'DELETE /api/v1/session without X-CSRF-Token');
      const out = await raw(drover, { method: 'DELETE', path: '/api/v1/session', headers: { ...withCookie, ...json, 'x-csrf-token': csrf } });
      assert.ok(out.status >= 200 && out.status < 300, `DELETE /api/v1/session: ${show(out)}`);
      expectStatus(await raw(drover, { path: '/api/v1/session', headers: withCookie }), 401, 'the cookie after logout');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: withCookie }), 401, 'the cookie after logout on /api/v1/jobs');

      // The CLI finds its token in DROVER_TOKEN or <DROVER_DATA_DIR>/admin.token; none, no access.
      const jobsWith = await drover.cli(['jobs']);
      assert.equal(jobsWith.code, 0, `drover jobs with DROVER_TOKEN: ${jobsWith.err}`);
      const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-notoken-'));
      try {
        // HOME and XDG_CONFIG_HOME empty too: no `drover login` token.
        const run = (env) => cliIn(empty, ['jobs'], { DROVER_ADDR: drover.grpc, HOME: empty, XDG_CONFIG_HOME: empty, ...env });
        const viaDir = await run({ DROVER_DATA_DIR: D });
        assert.equal(viaDir.code, 0, `drover jobs with DROVER_DATA_DIR holding admin.token: ${viaDir.err}`);
        const none = await run({ DROVER_DATA_DIR: empty });
        assert.notEqual(none.code, 0, 'drover jobs with no token at all must fail');
      } finally {
        fs.rmSync(empty, { recursive: true, force: true });
      }
    } catch (e) {
      const log = drover.errTail();
      if (log) e.message += `\n--- drover up.err (tail) ---\n${log}`;
      throw e;
    } finally {
      await drover.stop();
    }
  });

// ---- the browser test ----

// The attacker's page: on load it tries, against `target` (drover's
// origin), to submit a job, cancel `jobId` and drain `node` with fetch and
// with auto-submitted forms, and to read the job list and the event
// stream. window.__attack = {done, results}: what the page could see.
function attackPage({ target, jobId, node, tag }) {
  const esc = (s) => s.replace(/&/g, '&amp;').replace(/'/g, '&#39;');
  // A text/plain form sends "NAME=VALUE\r\n": this NAME and VALUE make that a
  // valid job request, the '=' landing inside a string.
  const formName = `{"spec":{"name":"${tag}-form","command":["sh","-c","echo pwned`;
  const formValue = '"],"gpus":1}}';
  const cfg = JSON.stringify({ target, jobId, node, tag });
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>Free GPUs</title><link rel="icon" href="data:,"></head>
<body>
<h1>Free GPUs for everyone</h1>
<iframe name="f-submit"></iframe><iframe name="f-cancel"></iframe><iframe name="f-drain"></iframe>
<form id="form-submit" method="POST" enctype="text/plain" target="f-submit" action="${esc(`${target}/api/v1/jobs`)}">
  <input type="hidden" name='${esc(formName)}' value='${esc(formValue)}'>
</form>
<form id="form-cancel" method="POST" target="f-cancel" action="${esc(`${target}/api/v1/jobs/${encodeURIComponent(jobId)}/cancel`)}">
  <input type="hidden" name="confirm" value="yes">
</form>
<form id="form-drain" method="POST" enctype="text/plain" target="f-drain" action="${esc(`${target}/api/v1/nodes/${encodeURIComponent(node)}/drain`)}">
  <input type="hidden" name='{"name":"${esc(node)}","x":"' value='"}'>
</form>
<pre id="log"></pre>
<script>
const { target, jobId, node, tag } = ${cfg};
const results = {};
window.__attack = { done: false, results };
const job = (name) => JSON.stringify({ spec: { name, command: ['sh', '-c', 'echo pwned'], gpus: 1 } });
async function attempt(name, fn) {
  try {
    results[name] = await fn();
  } catch (e) {
    results[name] = { error: String(e) };
  }
}
async function seen(r) {
  let text = '';
  try { text = await r.text(); } catch (e) { text = 'unreadable: ' + e; }
  return { type: r.type, status: r.status, text };
}
function formPost(id, frame) {
  return new Promise((resolve) => {
    document.querySelector('iframe[name="' + frame + '"]').addEventListener('load', () => resolve({ loaded: true }), { once: true });
    document.getElementById(id).submit();
  });
}
(async () => {
  // A "simple" request: no preflight; the browser sends it, the page cannot read the answer.
  await attempt('fetchTextPlainSubmit', async () => seen(await fetch(target + '/api/v1/jobs', {
    method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'Content-Type': 'text/plain' }, body: job(tag + '-fetch-text') })));
  // no-cors drops the JSON content type: the body goes as text/plain.
  await attempt('fetchNoCorsJsonSubmit', async () => seen(await fetch(target + '/api/v1/jobs', {
    method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'Content-Type': 'application/json' }, body: job(tag + '-fetch-nocors-json') })));
  // A real JSON request needs a CORS preflight, which the server must not grant.
  await attempt('fetchJsonSubmit', async () => seen(await fetch(target + '/api/v1/jobs', {
    method: 'POST', credentials: 'include', headers: { 'Content-Type': 'application/json' }, body: job(tag + '-fetch-json') })));
  await attempt('fetchCancel', async () => seen(await fetch(target + '/api/v1/jobs/' + encodeURIComponent(jobId) + '/cancel', {
    method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'Content-Type': 'text/plain' }, body: '{}' })));
  await attempt('fetchDrain', async () => seen(await fetch(target + '/api/v1/nodes/' + encodeURIComponent(node) + '/drain', {
    method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'Content-Type': 'text/plain' }, body: '{}' })));
  // Reading: a CORS GET, a no-cors GET, the event stream.
  await attempt('readJobs', async () => seen(await fetch(target + '/api/v1/jobs', { credentials: 'include' })));
  await attempt('readJobsNoCors', async () => seen(await fetch(target + '/api/v1/jobs', { mode: 'no-cors', credentials: 'include' })));
  await attempt('readSession', async () => seen(await fetch(target + '/api/v1/session', { credentials: 'include' })));
  await attempt('readEvents', () => new Promise((resolve) => {
    const es = new EventSource(target + '/api/v1/events', { withCredentials: true });
    let data = '';
    es.addEventListener('fleet', (ev) => { data += ev.data; });
    es.onopen = () => { data += '(open)'; };
    es.onerror = () => { es.close(); resolve({ error: 'EventSource error', data }); };
  }));
  // HTML forms: top-level-style navigations in iframes; nothing to read.
  await attempt('formSubmit', () => formPost('form-submit', 'f-submit'));
  await attempt('formCancel', () => formPost('form-cancel', 'f-cancel'));
  await attempt('formDrain', () => formPost('form-drain', 'f-drain'));
  document.getElementById('log').textContent = JSON.stringify(results, null, 1);
  window.__attack.done = true;
})();
</script>
</body></html>`;
}

// A tiny web server for the attacker's page on 127.0.0.1:0.
async function startAttackerServer(pageFor) {
  const server = http.createServer((req, res) => {
    const u = new URL(req.url, 'http://x');
    if (u.pathname !== '/attack.html') {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found\n');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    res.end(pageFor(req.headers.host));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: server.address().port };
}

// Every request `page` (and its frames) makes to `origin`, as chromium's
// network layer saw it: {method, path, body, status (null when no answer
// reached the page: a CORS failure), failure, cookie, origin, contentType}.
// A no-cors answer counts as answered (its status is known here, though the
// page only sees an opaque response).
function recordRequests(page, origin) {
  const byRequest = new Map();
  const pending = [];
  const entry = (request) => {
    let e = byRequest.get(request);
    if (!e) {
      e = { method: request.method(), path: new URL(request.url()).pathname, body: request.postData() ?? '',
        status: null, failure: '', cookie: false, origin: '', contentType: '' };
      byRequest.set(request, e);
      pending.push(request.allHeaders().then((h) => {
        e.cookie = /(?:^|;\s*)drover_session=/.test(h.cookie ?? '');
        e.origin = h.origin ?? '';
        e.contentType = h['content-type'] ?? '';
      }).catch(() => {}));
    }
    return e;
  };
  const mine = (request) => request.url().startsWith(`${origin}/`);
  page.on('request', (r) => { if (mine(r)) entry(r); });
  page.on('response', (r) => { if (mine(r.request())) entry(r.request()).status = r.status(); });
  page.on('requestfailed', (r) => { if (mine(r)) entry(r).failure = r.failure()?.errorText ?? 'failed'; });
  return { requests: () => [...byRequest.values()], settle: () => Promise.all(pending) };
}

const fmt = (x) => JSON.stringify(x);

// What the attacker page saw and what the server answered it.
function checkAttack(where, results, requests, { cookieExpected }) {
  const r = results;
  // Reads: never readable.
  assert.ok(r.readJobs?.error, `${where}: a CORS GET of /api/v1/jobs must fail in the page, got ${fmt(r.readJobs)}`);
  assert.ok(r.readSession?.error, `${where}: a CORS GET of /api/v1/session must fail in the page, got ${fmt(r.readSession)}`);
  assert.equal(r.readJobsNoCors?.type, 'opaque', `${where}: a no-cors GET is opaque: ${fmt(r.readJobsNoCors)}`);
  assert.equal(r.readJobsNoCors?.text, '', `${where}: and empty to the page`);
  assert.ok(!String(r.readEvents?.data ?? '').includes('nodes'), `${where}: no fleet event read: ${fmt(r.readEvents)}`);
  // The JSON POST never got past its preflight.
  assert.ok(r.fetchJsonSubmit?.error, `${where}: the preflighted JSON POST must fail in the page, got ${fmt(r.fetchJsonSubmit)}`);
  // The simple requests and the forms were sent (so the server had to refuse them).
  for (const k of ['fetchTextPlainSubmit', 'fetchNoCorsJsonSubmit', 'fetchCancel', 'fetchDrain']) {
    assert.equal(r[k]?.type, 'opaque', `${where}: ${k} was sent (an opaque answer): ${fmt(r[k])}`);
  }
  for (const k of ['formSubmit', 'formCancel', 'formDrain']) assert.ok(r[k]?.loaded, `${where}: ${k} was posted: ${fmt(r[k])}`);

  // The server refused every state-changing request that reached it 403
  // (foreign Origin); the others never left the browser (failed preflight).
  const posts = requests.filter((q) => q.method === 'POST');
  const refused = (pred, what) => {
    const q = posts.find(pred);
    assert.ok(q, `${where}: no ${what} was sent: ${fmt(posts)}`);
    assert.equal(q.status, 403, `${where}: ${what} must be refused 403: ${fmt(q)}`);
  };
  refused((q) => q.path === '/api/v1/jobs' && q.body.includes('-fetch-text'), 'text/plain fetch POST /api/v1/jobs');
  refused((q) => q.path === '/api/v1/jobs' && q.body.includes('-fetch-nocors-json'), 'no-cors "JSON" fetch POST /api/v1/jobs');
  refused((q) => q.path === '/api/v1/jobs' && q.body.includes('-form'), 'form POST /api/v1/jobs');
  refused((q) => q.path.endsWith('/cancel') && q.contentType.startsWith('text/plain'), 'fetch POST .../cancel');
  refused((q) => q.path.endsWith('/cancel') && q.contentType.startsWith('application/x-www-form-urlencoded'), 'form POST .../cancel');
  refused((q) => q.path.endsWith('/drain') && q.body === '{}', 'fetch POST .../drain');
  refused((q) => q.path.endsWith('/drain') && q.body !== '{}', 'form POST .../drain');
  for (const q of posts) {
    assert.ok(q.status === null || q.status === 403, `${where}: POST ${q.path} (Origin ${q.origin}, ${q.contentType}, ` +
      `body ${q.body.slice(0, 80)}) must be refused 403 or never sent, got ${q.status}`);
  }
  for (const q of requests.filter((x) => x.method === 'GET' && x.origin)) {
    assert.ok(q.status === null || q.status === 403, `${where}: GET ${q.path} with Origin ${q.origin} must be refused 403, got ${q.status}`);
  }
  // chromium reports the Cookie header of the form posts (navigations), not
  // always that of subresource fetches: hence "some" and "every" below.
  if (cookieExpected) {
    // Same site: the browser did attach the victim's session to the forged requests.
    assert.ok(posts.some((q) => q.cookie), `${where}: the victim's cookie went with the forged POSTs (same site): ${fmt(posts)}`);
  } else {
    assert.ok(posts.every((q) => !q.cookie), `${where}: SameSite=Strict keeps the cookie off cross-site requests: ${fmt(posts)}`);
  }
}

test('a cross-origin page and a DNS-rebinding page cannot submit, cancel, drain or read through a logged-in browser',
  { timeout: 240000 }, async () => {
    await withDashboard('security-cross-origin', SIM_FLAGS, async ({ drover, page }) => {
      const context = page.context();
      const droverOrigin = `http://${drover.http}`;
      const port = drover.http.slice(drover.http.lastIndexOf(':') + 1);

      // The victim is logged in: an HttpOnly, SameSite=Strict session cookie.
      const cookies = (await context.cookies(droverOrigin)).filter((c) => c.name === 'drover_session');
      assert.equal(cookies.length, 1, 'the dashboard holds a drover_session cookie');
      assert.equal(cookies[0].httpOnly, true, 'HttpOnly');
      assert.equal(cookies[0].sameSite, 'Strict', 'SameSite=Strict');
      assert.equal(await page.evaluate(() => document.cookie.includes('drover_session')), false, 'page script cannot see the cookie');
      assert.equal(await page.textContent('[data-testid=session-role]'), 'admin');

      // Something to cancel and a node to drain.
      const long = (await drover.api('/api/v1/jobs', {
        method: 'POST', body: { spec: { name: 'victim-long', command: ['sleep', '600'], gpus: 1 } },
      })).job;
      assert.ok(long?.id, 'the admin token submits a job');
      await drover.waitJobState(long.id, 'JOB_STATE_RUNNING');
      const node = (await drover.nodes()).find((n) => (n.gpus ?? []).length > 0 && !n.drained)?.name;
      assert.ok(node, 'an undrained node with GPUs');
      const jobsBefore = (await drover.jobs()).length;

      // The attacker, from another site and from the same site on another port.
      const attacker = await startAttackerServer(() => attackPage({ target: droverOrigin, jobId: long.id, node, tag: 'csrf' }));
      try {
        for (const [where, url, cookieExpected] of [
          ['attacker.test (cross-site)', `http://attacker.test:${attacker.port}/attack.html`, false],
          ['127.0.0.1 on another port (same-site)', `http://127.0.0.1:${attacker.port}/attack.html`, true],
        ]) {
          const evil = await context.newPage();
          const rec = recordRequests(evil, droverOrigin);
          const res = await evil.goto(url, { waitUntil: 'load', timeout: 30000 });
          assert.ok(res?.ok(), `the attacker page loads from ${url}`);
          await evil.waitForFunction(() => window.__attack?.done === true, null, { timeout: 60000, polling: 100 });
          const results = await evil.evaluate(() => window.__attack.results);
          await rec.settle();
          const requests = rec.requests();
          console.log(`${where}: the page saw ${fmt(results)}\n  the network saw ${fmt(requests.map((q) =>
            `${q.method} ${q.path} ${q.contentType} -> ${q.status ?? q.failure}${q.cookie ? ' (cookie sent)' : ''}`))}`);
          checkAttack(where, results, requests, { cookieExpected });
          await evil.close();
        }
      } finally {
        attacker.server.close();
        attacker.server.closeAllConnections();
      }

      // DNS rebinding: rebind.test resolves to drover itself, so the page is
      // same-origin with the API as far as the browser knows; the Host header
      // gives it away.
      const rebind = await context.newPage();
      const rebindUi = await rebind.goto(`http://rebind.test:${port}/ui/`, { waitUntil: 'load', timeout: 30000 });
      const rebound = await rebind.evaluate(async (body) => {
        const out = {};
        const r1 = await fetch('/api/v1/jobs', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
        out.post = { status: r1.status, text: await r1.text() };
        const r2 = await fetch('/api/v1/jobs');
        out.get = { status: r2.status, text: await r2.text() };
        const r3 = await fetch('/api/v1/nodes');
        out.nodes = { status: r3.status, text: await r3.text() };
        return out;
      }, jobBody('rebind-post'));
      console.log(`rebind.test: /ui/ HTTP ${rebindUi?.status()}, page saw ${fmt(rebound)}`);
      assert.equal(rebound.post.status, 403, `rebind.test: POST /api/v1/jobs must be 403: ${fmt(rebound.post)}`);
      assert.equal(rebound.get.status, 403, `rebind.test: GET /api/v1/jobs must be 403: ${fmt(rebound.get)}`);
      assert.equal(rebound.nodes.status, 403, `rebind.test: GET /api/v1/nodes must be 403: ${fmt(rebound.nodes)}`);
      assert.ok(!rebound.get.text.includes(long.id), 'rebind.test: the job list was not readable');
      await rebind.close();

      // Nothing happened: no new job, the long job runs, the node is not drained.
      const jobsAfter = await drover.jobs();
      assert.equal(jobsAfter.length, jobsBefore, `no job was added: ${fmt(jobsAfter.map((j) => j.spec?.name))}`);
      assert.ok(!jobsAfter.some((j) => /^(csrf|rebind)-/.test(j.spec?.name ?? '')), 'no attacker job exists');
      assert.equal((await drover.job(long.id)).status.state, 'JOB_STATE_RUNNING', 'the long job still runs');
      assert.equal((await drover.nodes()).find((n) => n.name === node)?.drained, false, `${node} is not drained`);
      // The CLI (gRPC, DROVER_TOKEN) agrees.
      const cliJob = await drover.cli(['job', long.id, '-o', 'json']);
      assert.equal(cliJob.code, 0, `drover job: ${cliJob.err}`);
      assert.equal(JSON.parse(cliJob.out).status?.state, 'JOB_STATE_RUNNING', `drover job ${long.id}: ${cliJob.out}`);
      const cliJobs = await drover.cli(['jobs', '-o', 'json']);
      assert.equal(cliJobs.code, 0, `drover jobs: ${cliJobs.err}`);
      const listed = JSON.parse(cliJobs.out);
      assert.equal((listed.jobs ?? listed).length, jobsBefore, 'drover jobs lists no new job');

      // The dashboard itself (same origin, cookie) is refused without the
      // CSRF token or with a non-JSON body, and allowed with both: the
      // attacker's request body is a valid job.
      const same = await page.evaluate(async ({ body, nodeName }) => {
        const session = await (await fetch('/api/v1/session')).json();
        const post = async (p, headers, b) => {
          const r = await fetch(p, { method: 'POST', headers, body: b });
          return { status: r.status, text: await r.text() };
        };
        const json = { 'Content-Type': 'application/json' };
        const drain = `/api/v1/nodes/${encodeURIComponent(nodeName)}/drain`;
        return {
          noCsrf: await post('/api/v1/jobs', json, body),
          wrongCsrf: await post('/api/v1/jobs', { ...json, 'X-CSRF-Token': `${session.csrfToken}x` }, body),
          textPlain: await post('/api/v1/jobs', { 'Content-Type': 'text/plain', 'X-CSRF-Token': session.csrfToken }, body),
          drainNoCsrf: await post(drain, json, '{}'),
          good: await post('/api/v1/jobs', { ...json, 'X-CSRF-Token': session.csrfToken }, body),
        };
      }, { body: jobBody('csrf-control'), nodeName: node });
      console.log(`same origin: ${fmt(same)}`);
      assert.equal(same.noCsrf.status, 403, `same-origin POST without X-CSRF-Token: ${fmt(same.noCsrf)}`);
      assert.equal(same.wrongCsrf.status, 403, `same-origin POST with a wrong X-CSRF-Token: ${fmt(same.wrongCsrf)}`);
      assert.equal(same.textPlain.status, 415, `same-origin text/plain POST with cookie and CSRF: ${fmt(same.textPlain)}`);
      assert.equal(same.drainNoCsrf.status, 403, `same-origin drain without X-CSRF-Token: ${fmt(same.drainNoCsrf)}`);
      assert.equal(same.good.status, 201, `same-origin POST with cookie, CSRF and JSON: ${fmt(same.good)}`);
      assert.equal((await drover.jobs()).length, jobsBefore + 1, 'exactly the one job of the allowed POST was added');
      assert.equal((await drover.nodes()).find((n) => n.name === node)?.drained, false, `${node} is still not drained`);

      // And its Cancel button (CSRF token from the session) cancels the long job.
      await openTab(page, 'jobs');
      await page.selectOption('[data-testid=filter-state]', 'all');
      const cancelButton = `[data-testid=job-row][data-job="${long.id}"] [data-testid=job-cancel]`;
      await page.waitForSelector(cancelButton, { state: 'visible', timeout: 30000 });
      await page.click(cancelButton);
      await waitForJobRowState(page, long.id, 'Cancelled', 60000);
      assert.equal((await drover.job(long.id)).status.state, 'JOB_STATE_CANCELLED', 'the dashboard cancelled the job');
      assert.ok(await page.isHidden('#jobs-error'), 'the Jobs view shows no error');
      // Its submit form too.
      await page.fill('[data-testid=submit-command]', 'sleep 600');
      await page.click('[data-testid=submit-button]');
      await page.waitForFunction(() => document.querySelector('[data-testid=submit-result]')?.textContent.startsWith('submitted '),
        null, { timeout: 30000, polling: 100 }).catch(async (e) => {
        throw new Error(`the submit form says '${await page.textContent('[data-testid=submit-result]')}': ${e.message}`);
      });
      const formJob = await page.getAttribute('[data-testid=submit-result]', 'data-job-id');
      assert.deepEqual((await drover.job(formJob)).spec.command, ['sh', '-c', 'sleep 600'], 'the form submitted the job');

      // Log out: the cookie is dead on the server too.
      const sid = (await context.cookies(droverOrigin)).find((c) => c.name === 'drover_session').value;
      await page.click('[data-testid=logout]');
      await page.waitForSelector('[data-testid=login-panel]', { state: 'visible', timeout: 15000 });
      assert.equal(await page.evaluate(async () => (await fetch('/api/v1/jobs')).status), 401, 'the page is logged out');
      expectStatus(await raw(drover, { path: '/api/v1/jobs', headers: { cookie: `drover_session=${sid}` } }), 401,
        'the old session cookie after logout');

      // The login panel: a wrong token is refused, the admin token logs in
      // and the live stream comes back without a reload.
      const updates = await fleetUpdates(page);
      await page.fill('[data-testid=login-token]', `drv_${'0'.repeat(16)}_${'A'.repeat(43)}`);
      await page.click('[data-testid=login-button]');
      await page.waitForSelector('[data-testid=login-error]', { state: 'visible', timeout: 15000 });
      assert.ok(await page.isVisible('[data-testid=login-panel]'), 'a wrong token does not log in');
      await page.fill('[data-testid=login-token]', drover.token);
      await page.click('[data-testid=login-button]');
      assert.equal((await waitForLogin(page)).role, 'admin', 'the admin token logs in as admin');
      await waitForFleetUpdates(page, updates + 1);
    }, { readyNodes: 3, readyGpus: 4, browserArgs: [HOST_RULES] });
  });
