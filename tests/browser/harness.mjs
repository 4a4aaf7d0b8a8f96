// Browser-test harness: starts the real `drover up` on loopback (port 0), a
// headless Debian chromium driven by playwright-core, and cleans both up.
//
// Authentication (issue 13): `drover up --data-dir D` writes D/admin.token
// (an admin API token) and D/dashboard-url (a one-time login link). The
// harness's own API calls send "Authorization: Bearer <admin token>", its CLI
// calls carry DROVER_TOKEN, and withDashboard logs the page in through the
// login link, as a person would.
//
// Environment (set by tests/browser/CMakeLists.txt through run.sh):
//   DROVER_BINARY  the drover binary under test (required)
//   ARTIFACTS      where screenshots and perf.json go (default: a temp dir)
//   CHROMIUM       the chromium executable (default: /usr/bin/chromium)
//
// No fixed sleeps: everything waits by polling a condition with a timeout.

import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-dev-shm-usage',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

export function droverBinary() {
  const bin = process.env.DROVER_BINARY;
  if (!bin) throw new Error('DROVER_BINARY is not set (the drover binary under test; CMake sets it)');
  return bin;
}

// An admin token as `drover up` writes it: drv_<16 hex>_<43 base64url>.
export const TOKEN_RE = /^drv_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/;

export function chromiumPath() {
  return process.env.CHROMIUM || '/usr/bin/chromium';
}

export function artifactsDir() {
  const dir = process.env.ARTIFACTS || path.join(os.tmpdir(), 'drover-browser-artifacts');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

export function artifactPath(name) {
  return path.join(artifactsDir(), name);
}

// Polls `pred` (sync or async) every `interval` ms until it returns a truthy
// value, which is returned; throws naming `what` after `timeout` ms. The
// last error `pred` threw (if any) is part of the message.
export async function waitFor(pred, { timeout = 30000, interval = 100, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let lastError;
  for (;;) {
    try {
      const v = await pred();
      if (v) return v;
      lastError = undefined;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() >= deadline) {
      const why = lastError ? `: ${lastError.message}` : '';
      throw new Error(`timed out after ${timeout} ms waiting for ${what}${why}`);
    }
    await new Promise((r) => setTimeout(r, interval));
  }
}

export const ENDED_STATES = new Set(['JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED']);

function tail(file, bytes = 4000) {
  try {
    const text = fs.readFileSync(file, 'utf8');
    return text.length > bytes ? text.slice(-bytes) : text;
  } catch {
    return '';
  }
}

// Processes still alive when this process exits are SIGKILLed so that a
// crashed test run does not leave servers behind.
const live = new Set();
process.on('exit', () => {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
});

// One `drover up` in a child process with its own data directory.
export class Drover {
  constructor(flags = []) {
    this.flags = flags;
    this.dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-browser-'));
    this.child = null;
    this.exited = null; // {code, signal} once it exits
    this.grpc = '';
    this.http = '';
    this.gateway = '';
    this.token = '';  // the admin token of <data-dir>/admin.token
  }

  // Starts it and waits until it serves (<data-dir>/endpoints.json).
  async start({ timeout = 60000 } = {}) {
    const args = ['up', '--data-dir', this.dataDir, '--grpc-listen', '127.0.0.1:0', '--listen', '127.0.0.1:0',
      '--log-level', 'warn', ...this.flags];
    const out = fs.openSync(path.join(this.dataDir, 'up.out'), 'w');
    const err = fs.openSync(path.join(this.dataDir, 'up.err'), 'w');
    this.child = spawn(droverBinary(), args, { stdio: ['ignore', out, err] });
    fs.closeSync(out);
    fs.closeSync(err);
    live.add(this.child);
    this.exitPromise = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        this.exited = { code, signal };
        live.delete(this.child);
        resolve(this.exited);
      });
      this.child.on('error', (e) => {
        this.exited = { code: -1, signal: null, error: e };
        live.delete(this.child);
        resolve(this.exited);
      });
    });
    const endpoints = path.join(this.dataDir, 'endpoints.json');
    await waitFor(() => {
      if (this.exited) {
        throw new Error(`drover up exited (${JSON.stringify(this.exited)}): ${tail(path.join(this.dataDir, 'up.err'))}`);
      }
      if (!fs.existsSync(endpoints)) return false;
      const j = JSON.parse(fs.readFileSync(endpoints, 'utf8'));
      this.grpc = j.grpc;
      this.http = j.http;
      this.gateway = j.gateway || '';  // the OpenAI gateway's host:port, where up runs one (issue 18)
      return Boolean(this.grpc && this.http);
    }, { timeout, what: `${endpoints} of drover up ${this.flags.join(' ')}` }).catch((e) => {
      throw new Error(`${e.message}\n--- up.err ---\n${tail(path.join(this.dataDir, 'up.err'))}`);
    });
    // The admin token and the login link (written before or with endpoints.json).
    const tokenFile = path.join(this.dataDir, 'admin.token');
    await waitFor(() => {
      if (this.exited) throw new Error(`drover up exited (${JSON.stringify(this.exited)})`);
      if (!fs.existsSync(tokenFile) || !fs.existsSync(this.dashboardUrlFile())) return false;
      this.token = fs.readFileSync(tokenFile, 'utf8').trim();
      return this.token !== '' && this.dashboardUrl() !== '';
    }, { timeout: 10000, what: `${tokenFile} and ${this.dashboardUrlFile()}` }).catch((e) => {
      throw new Error(`${e.message}\n--- up.err ---\n${tail(path.join(this.dataDir, 'up.err'))}`);
    });
    if (!TOKEN_RE.test(this.token)) {
      throw new Error(`${tokenFile} does not hold a token drv_<16 hex>_<43 base64url> (${this.token.length} characters)`);
    }
    return this;
  }

  // The gateway's host:port once <data-dir>/endpoints.json names it (the
  // server writes the file, then up adds its gateway); throws after
  // `timeout` ms.
  async waitGateway({ timeout = 15000 } = {}) {
    const file = path.join(this.dataDir, 'endpoints.json');
    this.gateway = await waitFor(() => JSON.parse(fs.readFileSync(file, 'utf8')).gateway || false,
      { timeout, what: `a gateway address in ${file}` });
    return this.gateway;
  }

  dashboardUrlFile() {
    return path.join(this.dataDir, 'dashboard-url');
  }

  // The login link of <data-dir>/dashboard-url ('' until written): its
  // one-time code works once.
  dashboardUrl() {
    try {
      return fs.readFileSync(this.dashboardUrlFile(), 'utf8').trim();
    } catch {
      return '';
    }
  }

  url(p) {
    return `http://${this.http}${p}`;
  }

  uiUrl() {
    return this.url('/ui/');
  }

  // GET or POST an /api/v1 path as the admin (bearer token); a POST always
  // sends Content-Type: application/json, as the server requires. Returns the
  // parsed JSON; throws on an HTTP error.
  async api(p, { method = 'GET', body } = {}) {
    const headers = { authorization: `Bearer ${this.token}` };
    if (method !== 'GET' && method !== 'HEAD') headers['content-type'] = 'application/json';
    const res = await fetch(this.url(p), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30000),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${p}: HTTP ${res.status}: ${text}`);
    return text === '' ? {} : JSON.parse(text);
  }

  // Like api() but never throws on an HTTP status: {status, text, json}
  // (json null when the body is not JSON). For probing whether a route
  // exists (404) and for calls whose refusal is the point.
  async request(p, { method = 'GET', body, token = this.token } = {}) {
    const headers = { authorization: `Bearer ${token}` };
    if (method !== 'GET' && method !== 'HEAD') headers['content-type'] = 'application/json';
    const res = await fetch(this.url(p), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30000),
    });
    const text = await res.text();
    let json = null;
    try {
      json = text === '' ? {} : JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: res.status, text, json };
  }

  // Deletes every model deployment (issue 18), so that no replica is
  // restarted while cancelAllJobs waits for the jobs to end. Nothing to do
  // on a server without deployments (404).
  async deleteAllDeployments() {
    const r = await this.request('/api/v1/deployments');
    if (r.status === 404) return;
    if (r.status !== 200) throw new Error(`GET /api/v1/deployments: HTTP ${r.status}: ${r.text}`);
    for (const d of r.json?.deployments ?? []) {
      const name = d.spec?.name;
      if (!name) continue;
      // Names are per tenant: the admin names each one's tenant.
      const tenant = d.spec?.tenant ? `?tenant=${encodeURIComponent(d.spec.tenant)}` : '';
      const del = await this.request(`/api/v1/deployments/${encodeURIComponent(name)}${tenant}`, { method: 'DELETE' });
      if (del.status !== 200 && del.status !== 404) {
        throw new Error(`DELETE /api/v1/deployments/${name}: HTTP ${del.status}: ${del.text}`);
      }
    }
  }

  async nodes() {
    return (await this.api('/api/v1/nodes')).nodes ?? [];
  }

  async jobs() {
    return (await this.api('/api/v1/jobs')).jobs ?? [];
  }

  async job(id) {
    return this.api(`/api/v1/jobs/${encodeURIComponent(id)}`);
  }

  // Runs `drover args...` with DROVER_ADDR = this server's gRPC address and
  // DROVER_TOKEN = the admin token.
  cli(args, { timeout = 60000 } = {}) {
    const env = { ...process.env, DROVER_ADDR: this.grpc, DROVER_TOKEN: this.token };
    return new Promise((resolve) => {
      execFile(droverBinary(), args, { env, timeout },
        (error, stdout, stderr) => {
          const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
          resolve({ code, out: stdout, err: stderr });
        });
    });
  }

  // `drover submit FLAGS -- COMMAND...`; returns the new job id.
  async submit(flags, command) {
    const r = await this.cli(['submit', ...flags, '--', ...command]);
    if (r.code !== 0) throw new Error(`drover submit ${flags.join(' ')} failed (exit ${r.code}): ${r.err}`);
    const id = r.out.trim();
    if (!id) throw new Error('drover submit printed no job id');
    return id;
  }

  // Waits until job `id` is in one of `states` (API names, e.g.
  // JOB_STATE_RUNNING); returns the job.
  async waitJobState(id, states, { timeout = 60000 } = {}) {
    const want = new Set(Array.isArray(states) ? states : [states]);
    let last = '';
    let message = '';
    return waitFor(async () => {
      const job = await this.job(id);
      last = job.status?.state ?? '';
      message = [job.status?.message, job.status?.failure].filter(Boolean).join('; ');
      return want.has(last) ? job : false;
    }, { timeout, what: `job ${id} to be ${[...want].join(' or ')}` }).catch((e) => {
      throw new Error(`${e.message} (last state: ${last || 'unknown'}${message ? `: ${message}` : ''})`);
    });
  }

  // Waits until `count` nodes are Ready and together report `gpus` GPUs.
  async waitReadyNodes(count, gpus, { timeout = 60000 } = {}) {
    let seen = '';
    return waitFor(async () => {
      const nodes = await this.nodes();
      const ready = nodes.filter((n) => n.state === 'NODE_STATE_READY');
      const total = nodes.reduce((s, n) => s + (n.gpus?.length ?? 0), 0);
      seen = `${ready.length}/${nodes.length} ready, ${total} GPUs`;
      return ready.length >= count && (gpus === undefined || total >= gpus) ? nodes : false;
    }, { timeout, interval: 250, what: `${count} ready nodes with ${gpus ?? 'any'} GPUs` }).catch((e) => {
      throw new Error(`${e.message} (saw ${seen})`);
    });
  }

  // Cancels every job that has not ended (with the CLI) and waits until all
  // have: jobs run under supervisors that outlive `drover up`, so leaving
  // them running leaks processes (see tests/support/drover_process.cc).
  async cancelAllJobs({ timeout = 60000 } = {}) {
    const open = (await this.jobs()).filter((j) => !ENDED_STATES.has(j.status?.state));
    for (const j of open) await this.cli(['cancel', j.id]);
    if (open.length === 0) return;
    await waitFor(async () => (await this.jobs()).every((j) => ENDED_STATES.has(j.status?.state)),
      { timeout, interval: 200, what: 'every job to end after cancel' });
  }

  // Cancels leftover jobs, then SIGTERM (SIGKILL after `grace` ms); removes
  // the data directory unless DROVER_KEEP_DATA is set.
  async stop({ grace = 10000 } = {}) {
    let cancelError;
    if (this.child && !this.exited && this.http) {
      try {
        await this.deleteAllDeployments();
        await this.cancelAllJobs();
      } catch (e) {
        cancelError = e;
      }
    }
    if (this.child && !this.exited) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), grace);
      await this.exitPromise;
      clearTimeout(timer);
    }
    if (!process.env.DROVER_KEEP_DATA) fs.rmSync(this.dataDir, { recursive: true, force: true });
    if (cancelError) throw cancelError;
  }

  errTail() {
    return tail(path.join(this.dataDir, 'up.err'));
  }
}

// Launches headless chromium (with `args` added to CHROMIUM_ARGS); the page
// records uncaught page errors in `page.errors` so that a test can assert
// the dashboard threw none.
export async function openBrowser({ width = 1400, height = 900, args = [] } = {}) {
  const exe = chromiumPath();
  if (!fs.existsSync(exe)) {
    throw new Error(`chromium not found at ${exe}: install the Debian package chromium (scripts/install-deps.sh) ` +
      'or set CHROMIUM; DROVER_SKIP_BROWSER=1 skips the browser tests');
  }
  const browser = await chromium.launch({ executablePath: exe, headless: true, args: [...CHROMIUM_ARGS, ...args] });
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(String(e?.stack || e)));
  page.on('dialog', (d) => d.accept()); // a confirm() before cancelling, if the UI asks
  return { browser, page };
}

// Waits until the dashboard shows a logged-in principal; returns its
// {name, tenant, role} as the top bar shows them.
export async function waitForLogin(page, timeout = 30000) {
  await page.waitForSelector('[data-testid=session-user]', { state: 'visible', timeout }).catch(async (e) => {
    const panel = await page.textContent('[data-testid=login-error]').catch(() => '');
    throw new Error(`the dashboard did not log in (login panel says '${(panel || '').trim()}'): ${e.message}`);
  });
  const text = async (id) => (await page.textContent(`[data-testid=${id}]`)).trim();
  return { name: await text('session-name'), tenant: await text('session-tenant'), role: await text('session-role') };
}

// Opens the login link of <data-dir>/dashboard-url (its one-time code is
// spent) and waits until the page has logged in and dropped the code from
// the address. Returns the navigation's response.
export async function loginWithLink(page, drover, { timeout = 30000 } = {}) {
  const link = drover.dashboardUrl();
  const u = new URL(link);
  if (u.host !== drover.http || u.pathname !== '/ui/' || !new URLSearchParams(u.hash.slice(1)).get('code')) {
    throw new Error(`dashboard-url '${u.origin}${u.pathname}#...' is not http://${drover.http}/ui/#code=...`);
  }
  const res = await page.goto(link, { waitUntil: 'load', timeout });
  if (!res || !res.ok()) throw new Error(`GET ${u.origin}${u.pathname}: HTTP ${res ? res.status() : 'no response'}`);
  await waitForLogin(page, timeout);
  if (page.url().includes('code=')) throw new Error('the login code is still in the address after login');
  return res;
}

// Runs `body({drover, page, browser})` against a fresh `drover up FLAGS`
// with the dashboard open and logged in (through the login link); always
// saves <ARTIFACTS>/<name>.png, then closes the browser, cancels leftover
// jobs and stops drover.
// Waits for `readyNodes` Ready nodes with `readyGpus` GPUs before opening the
// page; `timings`, if given, gets upMs, readyMs and pageLoadMs (the login
// included); `browserArgs` go to chromium.
export async function withDashboard(name, flags, body,
  { readyNodes, readyGpus, upTimeout = 60000, timings, browserArgs = [] } = {}) {
  const drover = new Drover(flags);
  const t = timings ?? {};
  let browser;
  let page;
  try {
    let t0 = Date.now();
    await drover.start({ timeout: upTimeout });
    t.upMs = Date.now() - t0;
    t0 = Date.now();
    if (readyNodes !== undefined) await drover.waitReadyNodes(readyNodes, readyGpus, { timeout: upTimeout });
    t.readyMs = Date.now() - t0;
    ({ browser, page } = await openBrowser({ args: browserArgs }));
    t0 = Date.now();
    await loginWithLink(page, drover);
    t.pageLoadMs = Date.now() - t0;
    await body({ drover, page, browser });
    if (page.errors.length > 0) throw new Error(`the dashboard threw:\n${page.errors.join('\n')}`);
  } catch (e) {
    const log = drover.errTail();
    if (log) e.message += `\n--- drover up.err (tail) ---\n${log}`;
    throw e;
  } finally {
    if (page) {
      await page.screenshot({ path: artifactPath(`${name}.png`), fullPage: true, timeout: 30000 })
        .catch((e) => console.error(`screenshot ${name}: ${e.message}`));
    }
    if (browser) await browser.close().catch(() => {});
    await drover.stop();
  }
}

// Logs the open dashboard out (if logged in) and in again with `token`
// pasted into the login panel; returns the principal the top bar shows.
export async function loginWithToken(page, token, timeout = 30000) {
  if (await page.isVisible('[data-testid=session-user]')) {
    await page.click('[data-testid=logout]');
    await page.waitForSelector('[data-testid=login-panel]', { state: 'visible', timeout });
  }
  await page.fill('[data-testid=login-token]', token);
  await page.click('[data-testid=login-button]');
  return waitForLogin(page, timeout);
}

// Selects a dashboard tab and waits for its view to be visible.
export async function openTab(page, name) {
  await page.click(`[data-testid=tab-${name}]`);
  await page.waitForSelector(`[data-testid=view-${name}]`, { state: 'visible', timeout: 15000 });
}

// The count of fleet events the page has received ([data-testid=last-update]
// data-updates), 0 before the first.
export async function fleetUpdates(page) {
  return page.$eval('[data-testid=last-update]', (el) => Number(el.getAttribute('data-updates') || 0))
    .catch(() => 0);
}

// Waits until the page has received at least `n` fleet events in all.
export async function waitForFleetUpdates(page, n, timeout = 30000) {
  await page.waitForFunction((want) => {
    const el = document.querySelector('[data-testid=last-update]');
    return el !== null && Number(el.getAttribute('data-updates') || 0) >= want;
  }, n, { timeout, polling: 100 });
}

// The text of the element `selector` inside the job row of `id` ('' if absent).
export async function jobRowText(page, id, selector) {
  return page.$eval(`[data-testid=job-row][data-job="${id}"] ${selector}`, (el) => el.textContent.trim())
    .catch(() => '');
}

// Waits until job `id`'s row shows state `state` (e.g. 'Succeeded').
export async function waitForJobRowState(page, id, state, timeout = 60000) {
  await page.waitForFunction(([jobId, want]) => {
    const el = document.querySelector(`[data-testid=job-row][data-job="${jobId}"] [data-testid=job-state]`);
    return el !== null && el.textContent.trim() === want;
  }, [id, state], { timeout, polling: 100 }).catch(async (e) => {
    const seen = await jobRowText(page, id, '[data-testid=job-state]');
    throw new Error(`job ${id}'s row did not show ${state} (shows '${seen}'): ${e.message}`);
  });
}
