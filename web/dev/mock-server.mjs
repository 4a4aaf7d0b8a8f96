// A stand-in for the drover server, for working on the dashboard without
// building it: serves a bundle at /ui/ and made-up, slowly changing data on
// the API paths the dashboard uses (the contracts of issues 6 and 13). Not
// used by the build or by any test.
//
//   node web/build.mjs /tmp/web-dist
//   node web/dev/mock-server.mjs --dist /tmp/web-dist --port 8080 --nodes 512 --gpus 8
//
// It mimics the server's browser-safe HTTP (issue 13): /api/v1 needs a
// session cookie (drover_session) or "Authorization: Bearer <token>";
// POST /api/v1/session takes {"token"} or a one-time {"code"} (it prints an
// admin token and a login link at start; --token TOKEN fixes the token);
// state-changing calls need Content-Type: application/json (415) and, with
// the cookie, X-CSRF-Token (403); a foreign Origin, Sec-Fetch-Site
// cross-site or same-site, or a Host that is not an IP literal or localhost
// is 403.
//
// With --proxy HOST:PORT it serves the bundle but forwards /api/ to a real
// drover server instead (try a new bundle without rebuilding the binary).
//
// Model deployments and the gateway's usage (issue 18, the Models tab):
// GET /api/v1/deployments (and scale, delete) and GET /api/v1/serving/usage,
// with counters that grow every tick; --deployments 0 starts with none (the
// empty state). A
// second token, printed at start, is a plain user of tenant "research": it
// sees that tenant's deployments and usage only.
import { createServer, request as httpRequest } from 'node:http';
import { randomBytes } from 'node:crypto';
import { readFileSync, existsSync } from 'node:fs';
import { isIP } from 'node:net';
import { extname, join } from 'node:path';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const dist = args.dist || 'dist';
const port = Number(args.port || 8080);
const nodeCount = Number(args.nodes || 6);
const gpusPerNode = Number(args.gpus || 8);
const periodMs = Number(args.period || 2000);
const arrivals = Number(args.arrivals ?? 0.3);  // chance of a new job per tick
const withDeployments = Number(args.deployments ?? 1) !== 0;

let seed = 42;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const nanos = (ms) => String(BigInt(Math.round(ms)) * 1000000n);

const nodes = Array.from({ length: nodeCount }, (_, n) => ({
  name: `gpu-${String(n).padStart(3, '0')}`,
  state: n === 3 ? 'NODE_STATE_NOT_READY' : 'NODE_STATE_READY',
  drained: n === 4,
  gpus: Array.from({ length: gpusPerNode }, (_, i) => ({
    utilizationPct: rand() * 100,
    memoryUsedBytes: '0',
    memoryTotalBytes: String(80 * 2 ** 30),
    temperatureC: 30 + rand() * 40,
    powerW: 100,
    powerLimitW: 700,
    healthy: !(n === 1 && i === 2),
    healthReason: n === 1 && i === 2 ? 'xid 79: GPU has fallen off the bus' : '',
    jobId: '',
    model: 'H100 80GB',
    history: [],
  })),
}));
if (nodes[2] && nodes[2].gpus[5]) nodes[2].gpus[5].temperatureC = -1;

const jobs = [];
let nextJob = 1;
function submit(spec) {
  const id = `j-${String(nextJob++).padStart(6, '0')}`;
  const job = {
    id,
    spec: { name: spec.name || '', tenant: spec.tenant || 'default', priority: spec.priority || 0, gpus: spec.gpus || 1, gpuMilli: 0, replicas: 0, command: spec.command || [] },
    status: { state: 'JOB_STATE_PENDING', message: `waiting for ${spec.gpus || 1} free GPUs`, submitTimeUnixNanos: nanos(Date.now()), startTimeUnixNanos: '0', endTimeUnixNanos: '0', exitCode: 0, signal: 0, preemptions: 0 },
  };
  jobs.push(job);
  return job;
}
for (let i = 0; i < 12; i++) submit({ command: ['sh', '-c', 'sleep 60'], gpus: 1 + (i % 4), tenant: ['research', 'prod', 'default'][i % 3], priority: (i % 3) * 10 });

function freeGpus(count) {
  for (const node of nodes) {
    if (node.state !== 'NODE_STATE_READY' || node.drained) continue;
    const idx = node.gpus.map((g, i) => (g.healthy && !g.jobId ? i : -1)).filter((i) => i >= 0);
    if (idx.length >= count) return { node, idx: idx.slice(0, count) };
  }
  return null;
}

const queueHistory = [];
const latency = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025].map((le) => ({ leSeconds: le, inf: false, count: 0 }));
latency.push({ leSeconds: 0, inf: true, count: 0 });
let decisions = 0;

function tick() {
  const now = Date.now();
  for (const job of jobs) {
    const s = job.status;
    if (s.state === 'JOB_STATE_PENDING') {
      const spot = freeGpus(job.spec.gpus);
      decisions++;
      latency[Math.min(latency.length - 1, Math.floor(rand() * rand() * latency.length))].count++;
      if (spot) {
        s.state = 'JOB_STATE_RUNNING';
        s.message = '';
        s.allocation = { node: spot.node.name, gpuIndices: spot.idx, gpuMilli: 1000 };
        s.startTimeUnixNanos = nanos(now);
        for (const i of spot.idx) spot.node.gpus[i].jobId = job.id;
      }
    } else if (s.state === 'JOB_STATE_RUNNING' && rand() < 0.03) {
      finish(job, rand() < 0.8 ? 'JOB_STATE_SUCCEEDED' : 'JOB_STATE_FAILED');
    } else if (s.state === 'JOB_STATE_CANCELLING') {
      finish(job, 'JOB_STATE_CANCELLED');
    }
  }
  if (rand() < arrivals) submit({ command: ['sh', '-c', 'train'], gpus: 1 + Math.floor(rand() * 8), tenant: ['research', 'prod'][Math.floor(rand() * 2)] });
  for (const node of nodes) {
    for (const g of node.gpus) {
      const target = g.jobId ? 85 : 3;
      g.utilizationPct = Math.max(0, Math.min(100, g.utilizationPct + (target - g.utilizationPct) * 0.3 + (rand() - 0.5) * 10));
      g.memoryUsedBytes = String(Math.round((g.jobId ? 0.7 : 0.01) * 80 * 2 ** 30 * (0.9 + rand() * 0.1)));
      if (g.temperatureC >= 0) g.temperatureC = 30 + g.utilizationPct * 0.5 + rand() * 3;
      g.powerW = 60 + g.utilizationPct * 6;
      g.history.push({ timeUnixNanos: nanos(now), utilizationPct: g.utilizationPct, memoryUsedBytes: g.memoryUsedBytes, temperatureC: g.temperatureC, powerW: g.powerW });
      if (g.history.length > 300) g.history.shift();
    }
  }
  queueHistory.push({ timeUnixNanos: nanos(now), depth: String(count('JOB_STATE_PENDING')), running: String(count('JOB_STATE_RUNNING')) });
  if (queueHistory.length > 720) queueHistory.shift();
}

function finish(job, state) {
  const s = job.status;
  s.state = state;
  s.endTimeUnixNanos = nanos(Date.now());
  s.exitCode = state === 'JOB_STATE_FAILED' ? 1 : 0;
  for (const node of nodes) for (const g of node.gpus) if (g.jobId === job.id) g.jobId = '';
}

const count = (state) => jobs.filter((j) => j.status.state === state).length;

// ---- model deployments and the gateway's usage ----
const deployments = [];
let nextReplicaJob = 900001;
function replica(node, port, extra = {}) {
  return {
    jobId: `j-${String(nextReplicaJob++).padStart(6, '0')}`, revision: '1', node, endpoint: node ? `10.0.0.${deployments.length + 10}:${port}` : '',
    ready: true, state: 'JOB_STATE_RUNNING', restarts: 0, reason: '', outstanding: '0', ...extra,
  };
}
function deploy(spec, replicas, extra = {}) {
  const d = {
    spec: {
      name: spec.name, tenant: spec.tenant || 'default', model: spec.model || '', servedModelName: spec.servedModelName || '',
      engine: spec.engine || 'custom', command: spec.command || [], env: {}, gpus: spec.gpus ?? 1, gpuMilli: spec.gpuMilli || 0,
      gpuMemoryBytes: '0', gpuModel: spec.gpuModel || '', cpuMillis: '0', memoryBytes: '0', priority: 100,
      replicas: spec.replicas ?? replicas.length, minReplicas: spec.minReplicas || 0, maxReplicas: spec.maxReplicas || 0,
      targetOutstanding: 0, scaleDownIdleSeconds: 0, nodeSelector: {}, owner: 'admin',
    },
    status: {
      desiredReplicas: spec.replicas ?? replicas.length, readyReplicas: replicas.filter((r) => r.ready).length, replicas,
      revision: '1', message: '', createdUnixNanos: nanos(Date.now() - 3600e3), updatedUnixNanos: nanos(Date.now()),
      outstanding: '0', waiting: '0', lastRequestUnixNanos: '0', ...extra,
    },
  };
  deployments.push(d);
  return d;
}
if (withDeployments) {
  deploy({ name: 'llama-8b', tenant: 'prod', model: '/models/llama-3.1-8b-instruct.gguf', engine: 'llama.cpp', gpus: 1 },
    [replica('gpu-000', 31001), replica('gpu-001', 31002, { restarts: 1 })]);
  const embed = deploy({ name: 'bge-embed', tenant: 'research', model: 'BAAI/bge-large-en-v1.5', engine: 'vllm', gpus: 0, gpuMilli: 500, replicas: 3 },
    [replica('gpu-002', 31003), replica('gpu-002', 31004),
      replica('gpu-005', 31005, { ready: false, restarts: 3, reason: 'readiness probe: GET /health: connection refused (3 in a row)' })],
    { message: 'replica j-900005 not ready: readiness probe: GET /health: connection refused' });
  embed.status.replicas[2].revision = '1';
  deploy({ name: 'mixtral', tenant: 'prod', model: 'mistralai/Mixtral-8x7B-Instruct-v0.1', servedModelName: 'mixtral-8x7b', engine: 'vllm', gpus: 4, replicas: 1 },
    [replica('', 0, { ready: false, state: 'JOB_STATE_PENDING', reason: 'waiting for 4 free GPUs on one node (largest free: 2 on gpu-006)' })],
    { message: 'replica j-900006 not ready: pending' });
  deploy({ name: 'qwen-small', tenant: 'research', model: 'Qwen/Qwen2.5-0.5B-Instruct', engine: 'sglang', gpus: 1, replicas: 0, minReplicas: 0, maxReplicas: 4 },
    [], { lastRequestUnixNanos: nanos(Date.now() - 420e3) });
}
const usage = [];  // the gateway's rows: cumulative counters
const usageRow = (tenant, model, key, p50) => {
  const row = { tenant, model, key, requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, latency_p50_ms: p50, latency_p99_ms: p50 * 4, base: p50 };
  usage.push(row);
  return row;
};
if (withDeployments) {
  usageRow('prod', 'llama-8b', '3f2a9c01d4e5b6a7', 180);
  usageRow('prod', 'llama-8b', '7b1c0e9f8a2d3c4b', 210);
  usageRow('prod', 'mixtral-8x7b', '3f2a9c01d4e5b6a7', 900);
  usageRow('research', 'bge-embed', 'c0ffee0123456789', 12);
}
function tickServing() {
  for (const d of deployments) {
    const live = d.status.replicas.filter((r) => r.ready);
    let out = 0;
    for (const r of live) {
      r.outstanding = String(Math.floor(rand() * 6));
      out += Number(r.outstanding);
    }
    d.status.outstanding = String(out);
    if (live.length) d.status.lastRequestUnixNanos = nanos(Date.now());
  }
  for (const row of usage) {
    const served = deployments.some((d) => d.status.readyReplicas > 0 && (d.spec.servedModelName || d.spec.name) === row.model);
    if (!served) continue;
    const n = Math.floor(rand() * (row.base < 50 ? 120 : 20));
    row.requests += n;
    row.errors += rand() < 0.2 ? 1 : 0;
    row.prompt_tokens += n * Math.floor(40 + rand() * 200);
    row.completion_tokens += row.base < 50 ? 0 : n * Math.floor(50 + rand() * 300);
    row.latency_p50_ms = row.base * (0.9 + rand() * 0.2);
    row.latency_p99_ms = row.latency_p50_ms * (3 + rand());
  }
}
const visible = (principal, tenant) => principal.role === 'admin' || principal.tenant === tenant;
function usageFor(principal) {
  return {
    usage: usage.filter((r) => visible(principal, r.tenant)).map(({ base, ...r }) => r)
      .sort((a, b) => a.tenant.localeCompare(b.tenant) || a.model.localeCompare(b.model) || a.key.localeCompare(b.key)),
  };
}

function fleet() {
  const byState = {};
  for (const j of jobs) {
    const k = j.status.state.replace('JOB_STATE_', '');
    const name = k.charAt(0) + k.slice(1).toLowerCase();
    byState[name] = String(Number(byState[name] || 0) + 1);
  }
  return {
    timeUnixNanos: nanos(Date.now()),
    nodes: nodes.map((n) => ({ name: n.name, state: n.state, drained: n.drained, gpus: n.gpus.map(({ history, ...g }) => g) })),
    jobs: byState,
    queueDepth: String(count('JOB_STATE_PENDING')),
  };
}

function schedulerStats() {
  return {
    decisionsTotal: String(decisions),
    decisionsPerSecond: (count('JOB_STATE_PENDING') * 1000) / periodMs,
    queueDepth: String(count('JOB_STATE_PENDING')),
    queueHistory: queueHistory.filter((_, i) => i % 3 === 0),
    decisionLatency: latency.map((b) => ({ ...b, count: String(b.count) })),
    preemptionsTotal: '0',
  };
}

function tenants() {
  const names = ['default', 'prod', 'research'];
  return {
    tenants: names.map((name, i) => {
      const mine = jobs.filter((j) => j.spec.tenant === name);
      const usage = mine.filter((j) => j.status.state === 'JOB_STATE_RUNNING').reduce((s, j) => s + j.spec.gpus * 1000, 0);
      const guaranteed = [0, 16, 8][i];
      return {
        name, weight: [1, 2, 1][i], guaranteedGpus: guaranteed ? { 'H100 80GB': guaranteed } : {}, borrowLimit: [-1, 8, 4][i],
        usageMilli: String(usage), borrowedMilli: String(Math.max(0, usage - guaranteed * 1000)),
        fairShareMilli: String([4000, 14000, 7000][i]),
        runningJobs: String(mine.filter((j) => j.status.state === 'JOB_STATE_RUNNING').length),
        pendingJobs: String(mine.filter((j) => j.status.state === 'JOB_STATE_PENDING').length),
      };
    }),
  };
}

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8' };
const send = (res, status, body) => {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
};
const notFound = (res, what) => send(res, 404, { code: 5, status: 'NOT_FOUND', message: `${what} not found` });
const streams = new Set();

// ---- authentication (the server's contract, simplified) ----
const adminToken = args.token || `drv_${randomBytes(8).toString('hex')}_${randomBytes(32).toString('base64url')}`;
const userToken = `drv_${randomBytes(8).toString('hex')}_${randomBytes(32).toString('base64url')}`;
const tokens = new Map([[adminToken, { name: 'admin', tenant: 'default', role: 'admin' }],
  [userToken, { name: 'ada', tenant: 'research', role: 'user' }]]);
const codes = new Set();
const sessions = new Map();  // session id -> {principal, csrfToken}
const newCode = () => {
  const code = randomBytes(24).toString('base64url');
  codes.add(code);
  return code;
};
const refuse = (res, status, name, code, message) => send(res, status, { code, status: name, message });

function cookieSession(req) {
  const m = /(?:^|;\s*)drover_session=([^;]+)/.exec(req.headers.cookie || '');
  return m ? sessions.get(m[1]) : undefined;
}

// Host, Origin and Sec-Fetch-Site: true when the request may go on.
function browserSafe(req, res) {
  const host = String(req.headers.host || '');
  const name = host.startsWith('[') ? host.slice(1, host.indexOf(']')) : host.replace(/:\d+$/, '');
  if (!(isIP(name) || name === 'localhost')) {
    refuse(res, 403, 'PERMISSION_DENIED', 7, `host '${host}' is not served: use an IP address or localhost`);
    return false;
  }
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== `http://${host}`) {
    refuse(res, 403, 'PERMISSION_DENIED', 7, `cross-origin request from '${origin}' refused`);
    return false;
  }
  const site = req.headers['sec-fetch-site'];
  if (site === 'cross-site' || site === 'same-site') {
    refuse(res, 403, 'PERMISSION_DENIED', 7, `${site} request refused`);
    return false;
  }
  return true;
}

// The caller of an /api/v1 request, or undefined after answering 401/403/415.
function authenticate(req, res) {
  const changing = !['GET', 'HEAD', 'OPTIONS'].includes(req.method);
  if (changing && !/^application\/json\s*(;|$)/i.test(req.headers['content-type'] || '')) {
    refuse(res, 415, 'INVALID_ARGUMENT', 3, 'state-changing requests must be Content-Type: application/json');
    return undefined;
  }
  const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization || '');
  if (bearer) {
    const principal = tokens.get(bearer[1]);
    if (!principal) refuse(res, 401, 'UNAUTHENTICATED', 16, 'the bearer token is not valid');
    return principal;
  }
  const session = cookieSession(req);
  if (!session) {
    refuse(res, 401, 'UNAUTHENTICATED', 16, 'log in: no valid session cookie or bearer token');
    return undefined;
  }
  if (changing && req.headers['x-csrf-token'] !== session.csrfToken) {
    refuse(res, 403, 'PERMISSION_DENIED', 7, 'missing or wrong X-CSRF-Token');
    return undefined;
  }
  return session.principal;
}

function readJson(req, done) {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    try {
      done(body ? JSON.parse(body) : {});
    } catch {
      done(undefined);
    }
  });
}

// /api/v1/session: GET (who am I), POST {token} or {code} (log in), DELETE.
function handleSession(req, res) {
  const sessionBody = (s) => ({ principal: s.principal, csrfToken: s.csrfToken });
  if (req.method === 'GET') {
    const s = cookieSession(req);
    return s ? send(res, 200, sessionBody(s)) : refuse(res, 401, 'UNAUTHENTICATED', 16, 'no valid session');
  }
  if (req.method === 'DELETE') {
    const s = cookieSession(req);
    if (!s) return refuse(res, 401, 'UNAUTHENTICATED', 16, 'no valid session');
    if (!/^application\/json/i.test(req.headers['content-type'] || '')) return refuse(res, 415, 'INVALID_ARGUMENT', 3, 'needs application/json');
    if (req.headers['x-csrf-token'] !== s.csrfToken) return refuse(res, 403, 'PERMISSION_DENIED', 7, 'missing or wrong X-CSRF-Token');
    for (const [id, v] of sessions) if (v === s) sessions.delete(id);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Set-Cookie': 'drover_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0' });
    return res.end('{}');
  }
  if (req.method !== 'POST') return refuse(res, 405, 'UNIMPLEMENTED', 12, `method ${req.method} is not allowed`);
  if (!/^application\/json/i.test(req.headers['content-type'] || '')) return refuse(res, 415, 'INVALID_ARGUMENT', 3, 'needs application/json');
  readJson(req, (body) => {
    let principal;
    if (body && typeof body.code === 'string' && codes.delete(body.code)) principal = tokens.get(adminToken);
    else if (body && typeof body.token === 'string') principal = tokens.get(body.token);
    if (!principal) return refuse(res, 401, 'UNAUTHENTICATED', 16, 'the token or login code is not valid');
    const id = randomBytes(32).toString('base64url');
    const s = { principal, csrfToken: randomBytes(32).toString('base64url') };
    sessions.set(id, s);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Set-Cookie': `drover_session=${id}; Path=/; HttpOnly; SameSite=Strict` });
    return res.end(JSON.stringify(sessionBody(s)));
  });
  return undefined;
}

createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  if (!args.proxy && !browserSafe(req, res)) return undefined;
  if (p === '/healthz' || p === '/readyz') {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    return res.end('ok\n');
  }
  if (p === '/ui') {
    res.writeHead(301, { Location: '/ui/' });
    return res.end();
  }
  if (p.startsWith('/ui/')) {
    const file = join(dist, p === '/ui/' ? 'index.html' : p.slice(4));
    if (!existsSync(file) || p.includes('..')) return notFound(res, `asset '${p}'`);
    res.writeHead(200, { 'Content-Type': TYPES[extname(file)] || 'application/octet-stream' });
    return res.end(readFileSync(file));
  }
  if (args.proxy && p.startsWith('/api/')) {
    // The real server does its own checks (Host, Origin, cookie, CSRF).
    const [host, targetPort] = args.proxy.split(':');
    const upstream = httpRequest({ host, port: Number(targetPort), method: req.method, path: req.url, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    });
    upstream.on('error', (err) => send(res, 502, { code: 14, status: 'UNAVAILABLE', message: `proxy: ${err.message}` }));
    req.pipe(upstream);
    res.on('close', () => upstream.destroy());
    return undefined;
  }
  if (p === '/api/v1/session') return handleSession(req, res);
  const principal = p.startsWith('/api/') ? authenticate(req, res) : undefined;
  if (p.startsWith('/api/') && !principal) return undefined;
  if (p === '/api/v1/deployments' && req.method === 'GET') {
    return send(res, 200, { deployments: deployments.filter((d) => visible(principal, d.spec.tenant)) });
  }
  if (p === '/api/v1/deployments' && req.method === 'POST') {
    readJson(req, (body) => {
      const spec = body && body.spec;
      if (!spec || !/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(spec.name || '')) {
        return send(res, 400, { code: 3, status: 'INVALID_ARGUMENT', message: 'spec.name must be a DNS label' });
      }
      if (deployments.some((d) => d.spec.name === spec.name)) {
        return send(res, 409, { code: 6, status: 'ALREADY_EXISTS', message: `deployment '${spec.name}' exists` });
      }
      const n = spec.replicas ?? 1;
      const d = deploy({ ...spec, tenant: spec.tenant || principal.tenant, replicas: n },
        Array.from({ length: n }, (_, i) => replica(nodes[i % nodes.length].name, 32000 + i, { ready: false, state: 'JOB_STATE_BOUND' })));
      send(res, 201, d);
    });
    return undefined;
  }
  // Scale (POST .../scale {"replicas": N}) and undeploy (DELETE), checked as the server does.
  let m = p.match(/^\/api\/v1\/deployments\/([^/]+)(\/scale)?$/);
  if (m && (m[2] ? req.method === 'POST' : req.method === 'DELETE')) {
    const name = decodeURIComponent(m[1]);
    const d = deployments.find((x) => x.spec.name === name && visible(principal, x.spec.tenant));
    if (principal.role === 'viewer') return refuse(res, 403, 'PERMISSION_DENIED', 7, 'role viewer may not change deployments');
    if (!d) return notFound(res, `deployment '${name}'`);
    if (!m[2]) {
      deployments.splice(deployments.indexOf(d), 1);
      return send(res, 200, d);
    }
    readJson(req, (body) => {
      const n = body && body.replicas;
      if (!Number.isInteger(n) || n < 0 || n > 256) return refuse(res, 400, 'INVALID_ARGUMENT', 3, `replicas ${n} is outside 0..256`);
      const auto = d.spec.maxReplicas > 0;
      const desired = auto ? Math.min(Math.max(n, d.spec.minReplicas), d.spec.maxReplicas) : n;
      d.spec.replicas = n;
      d.status.desiredReplicas = desired;
      const rs = d.status.replicas;
      while (rs.length < desired) rs.push(replica(nodes[rs.length % nodes.length].name, 32000 + rs.length, { ready: false, state: 'JOB_STATE_BOUND' }));
      rs.splice(desired);
      d.status.readyReplicas = rs.filter((r) => r.ready).length;
      send(res, 200, d);
    });
    return undefined;
  }
  if (p === '/api/v1/serving/usage') return send(res, 200, usageFor(principal));
  if (p === '/api/v1/fleet') return send(res, 200, fleet());
  if (p === '/api/v1/scheduler') return send(res, 200, schedulerStats());
  if (p === '/api/v1/tenants') return send(res, 200, tenants());
  if (p === '/api/v1/jobs' && req.method === 'GET') return send(res, 200, { jobs });
  if (p === '/api/v1/jobs' && req.method === 'POST') {
    readJson(req, (body) => {
      if (body === undefined) {
        return send(res, 400, { code: 3, status: 'INVALID_ARGUMENT', message: 'request body is not valid JSON' });
      }
      const spec = body.spec;
      if (!spec || !(spec.gpus >= 1 && spec.gpus <= 64)) {
        return send(res, 400, { code: 3, status: 'INVALID_ARGUMENT', message: `spec.gpus must be 1..64, got ${spec && spec.gpus}` });
      }
      send(res, 201, { job: submit(spec) });
    });
    return undefined;
  }
  m = p.match(/^\/api\/v1\/jobs\/([^/]+)$/);
  if (m && req.method === 'GET') {
    const job = jobs.find((j) => j.id === m[1]);
    return job ? send(res, 200, job) : notFound(res, `job '${m[1]}'`);
  }
  m = p.match(/^\/api\/v1\/jobs\/([^/]+)\/cancel$/);
  if (m && req.method === 'POST') {
    const job = jobs.find((j) => j.id === m[1]);
    if (!job) return notFound(res, `job '${m[1]}'`);
    if (['JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED'].includes(job.status.state)) {
      return send(res, 400, { code: 9, status: 'FAILED_PRECONDITION', message: `job '${job.id}' already ended` });
    }
    if (job.status.state === 'JOB_STATE_PENDING') finish(job, 'JOB_STATE_CANCELLED');
    else job.status.state = 'JOB_STATE_CANCELLING';
    return send(res, 200, job);
  }
  m = p.match(/^\/api\/v1\/nodes\/([^/]+)\/(drain|undrain)$/);
  if (m && req.method === 'POST') {
    const node = nodes.find((n) => n.name === decodeURIComponent(m[1]));
    if (!node) return notFound(res, `node '${m[1]}'`);
    node.drained = m[2] === 'drain';
    return send(res, 200, { name: node.name, state: node.state, drained: node.drained });
  }
  if (p === '/api/v1/nodes') {
    return send(res, 200, { nodes: nodes.map((n) => ({ name: n.name, state: n.state, drained: n.drained, gpus: n.gpus.map(({ history, ...g }) => g) })) });
  }
  m = p.match(/^\/api\/v1\/nodes\/([^/]+)\/gpus\/(\d+)\/history$/);
  if (m) {
    const node = nodes.find((n) => n.name === decodeURIComponent(m[1]));
    const gpu = node && node.gpus[Number(m[2])];
    if (!gpu) return notFound(res, `gpu ${m[2]} of node '${m[1]}'`);
    return send(res, 200, { points: gpu.history });
  }
  if (p === '/api/v1/events') {
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
    const push = () => {
      res.write(`event: fleet\ndata: ${JSON.stringify(fleet())}\n\n`);
      res.write(`event: scheduler\ndata: ${JSON.stringify(schedulerStats())}\n\n`);
    };
    push();
    streams.add(push);
    req.on('close', () => streams.delete(push));
    return undefined;
  }
  return notFound(res, `path '${p}'`);
}).listen(port, '127.0.0.1', () => console.log(args.proxy
  ? `dashboard on http://127.0.0.1:${port}/ui/, API from ${args.proxy}`
  : `mock drover on http://127.0.0.1:${port}/ui/ (${nodeCount} nodes x ${gpusPerNode} GPUs)\n` +
    `admin token: ${adminToken}\nuser token (tenant research): ${userToken}\nlogin link (once): http://127.0.0.1:${port}/ui/#code=${newCode()}`));

setInterval(() => {
  tick();
  tickServing();
  // New deployments' replicas become ready a tick after they start.
  for (const d of deployments) {
    for (const r of d.status.replicas) {
      if (r.state === 'JOB_STATE_BOUND') r.state = 'JOB_STATE_RUNNING';
      else if (r.state === 'JOB_STATE_RUNNING' && !r.ready && !r.reason) r.ready = true;
    }
    d.status.readyReplicas = d.status.replicas.filter((r) => r.ready).length;
  }
  for (const push of streams) push();
}, periodMs);
tick();
