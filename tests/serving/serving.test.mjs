// Issue 18, end to end: a real `drover up` (its scheduler, agent and
// gateway), model deployments of the test engine, and the official `openai`
// client in front. What it shows:
//   - a deployment of 2 replicas serves through the gateway; one replica's
//     process killed under load fails no request that had not started
//     streaming, and the agent restarts it and it serves again;
//   - a streaming request the client cancels frees its slot (the gateway's
//     outstanding count and the engine's own go back to 0);
//   - a tenant over its tokens-per-minute gets 429 with retry-after, and the
//     gateway's usage for it is what the engine reported;
//   - a deployment scaled to zero starts again on the first request;
//   - a deployment whose engine queues requests (one at a time) gets a
//     second replica on its queue time (--target-queue), with few requests
//     outstanding;
//   - a replica answers only the gateway: straight to its address without
//     its secret a request gets 401; the secret is in an admin's (and a
//     gateway's) endpoints, in no job view, and not in a user's endpoints;
//   - a real engine (llama.cpp through node-llama-cpp, tests/engines/llama,
//     on a tiny model the test writes) deployed the same way answers
//     through the gateway, streaming included, with its own token counts,
//     and refuses requests straight to it without the replica's secret;
//   - the test engine deployed from an OCI image (built by the test, served
//     by a registry on loopback) answers through the gateway, both replicas
//     on the digest the deployment recorded.
//
// Environment (tests/serving/CMakeLists.txt): DROVER_BINARY, TEST_ENGINE_BINARY.
// No fixed sleeps: every wait polls a condition with a deadline.

import { execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const DROVER = process.env.DROVER_BINARY;
const ENGINE = process.env.TEST_ENGINE_BINARY;
const PUSH_IMAGE = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../support/push_test_image.sh');
const LLAMA = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../engines/llama');

async function waitFor(pred, { timeout = 60000, interval = 100, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await pred();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

// The pid of the process listening on 127.0.0.1:`port` (or any address),
// from /proc: the socket's inode in /proc/net/tcp{,6}, then the process
// holding it.
function pidListeningOn(port) {
  const inodes = new Set();
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = fs.readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10 || cols[3] !== '0A') continue;  // LISTEN
      if (parseInt(cols[1].split(':')[1], 16) === port) inodes.add(cols[9]);
    }
  }
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let fds = [];
    try {
      fds = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m && inodes.has(m[1])) return Number(pid);
      } catch {
        // gone
      }
    }
  }
  return 0;
}

class Up {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-serving-'));
  }

  async start() {
    await this.startRegistry();
    const err = fs.openSync(path.join(this.dir, 'up.err'), 'w');
    this.child = spawn(DROVER, ['up', '--data-dir', this.dir, '--grpc-listen', '127.0.0.1:0', '--listen', '127.0.0.1:0',
      '--gateway-listen', '127.0.0.1:0', '--gateway-scrape-engine-metrics', '--devices', 'simulated',
      '--simulate-gpus', '8', '--log-level', 'warn', '--insecure-registry', this.registry],
    { stdio: ['ignore', 'ignore', err] });
    fs.closeSync(err);
    this.exited = null;
    this.child.on('exit', (code, signal) => { this.exited = { code, signal }; });
    const j = await waitFor(() => {
      if (this.exited) throw new Error(`drover up exited ${JSON.stringify(this.exited)}: ${this.stderr()}`);
      const f = path.join(this.dir, 'endpoints.json');
      if (!fs.existsSync(f)) return null;
      const e = JSON.parse(fs.readFileSync(f, 'utf8'));
      return e.gateway ? e : null;
    }, { what: 'endpoints.json with the gateway' });
    this.grpc = j.grpc;
    this.http = j.http;
    this.gateway = j.gateway;
    this.token = fs.readFileSync(path.join(this.dir, 'admin.token'), 'utf8').trim();
    // The gateway is in endpoints.json before the local agent has
    // registered: a deploy made before then is refused (no nodes).
    await waitFor(async () => {
      const r = await this.cli(['nodes', '-o', 'json']);
      if (r.code !== 0) return null;
      const nodes = JSON.parse(r.out).nodes ?? [];
      const gpus = nodes.filter((n) => n.state === 'NODE_STATE_READY').reduce((s, n) => s + (n.gpus?.length ?? 0), 0);
      return gpus >= 8;
    }, { what: 'the local node Ready with its 8 GPUs' });
  }

  // A registry on loopback (Debian's docker-registry) holding an image of
  // the test engine (tests/support/push_test_image.sh), for a deployment
  // from an image.
  async startRegistry() {
    const port = await new Promise((resolve) => {
      const srv = net.createServer().listen(0, '127.0.0.1', () => {
        const p = srv.address().port;
        srv.close(() => resolve(p));
      });
    });
    this.registry = `127.0.0.1:${port}`;
    const conf = path.join(this.dir, 'registry.yml');
    fs.writeFileSync(conf, `version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: ${this.dir}/registry\n` +
      `http:\n  addr: ${this.registry}\n`);
    const log = fs.openSync(path.join(this.dir, 'registry.log'), 'w');
    this.registryChild = spawn('docker-registry', ['serve', conf], { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    await waitFor(async () => (await fetch(`http://${this.registry}/v2/`)).ok, { what: 'the registry' });
    execFileSync(PUSH_IMAGE, [this.registry, 'engine:v1', ENGINE], { stdio: ['ignore', 'ignore', 'inherit'] });
  }

  stderr() {
    try {
      return fs.readFileSync(path.join(this.dir, 'up.err'), 'utf8').slice(-4000);
    } catch {
      return '';
    }
  }

  // `drover ARGS` as the admin (or `token`); resolves {code, out, err}.
  cli(args, token = this.token) {
    return new Promise((resolve) => {
      execFile(DROVER, args, { env: { ...process.env, DROVER_ADDR: this.grpc, DROVER_TOKEN: token } },
        (error, out, err) => resolve({ code: error ? (error.code ?? 1) : 0, out, err }));
    });
  }

  async ok(args, token) {
    const r = await this.cli(args, token);
    assert.equal(r.code, 0, `drover ${args.join(' ')}: ${r.err}${r.out}`);
    return r.out;
  }

  // Names are per tenant: an admin names another tenant's with --tenant.
  async deployment(name, tenant = '') {
    return JSON.parse(await this.ok(['deployment', name, '-o', 'json', ...(tenant ? ['--tenant', tenant] : [])]));
  }

  async stop() {
    if (!this.child || this.exited) return;
    // Replicas run under supervisors that outlive `up`: end them first.
    const list = JSON.parse(await this.ok(['deployments', '-o', 'json']));
    for (const d of list.deployments ?? []) await this.cli(['undeploy', d.spec.name, '--tenant', d.spec.tenant]);
    await waitFor(async () => {
      const jobs = JSON.parse((await this.cli(['jobs', '-o', 'json', '--all'])).out || '{}');
      return (jobs.jobs ?? []).every((j) => ['JOB_STATE_CANCELLED', 'JOB_STATE_FAILED', 'JOB_STATE_SUCCEEDED'].includes(j.status?.state));
    }, { what: 'every replica to end' }).catch(() => {});
    this.child.kill('SIGTERM');
    await waitFor(() => this.exited, { what: 'drover up to exit' }).catch(() => this.child.kill('SIGKILL'));
    this.registryChild?.kill('SIGTERM');
  }
}

// Cumulative gateway metrics: {name{labels}: value}.
async function gatewayMetrics(up) {
  const res = await fetch(`http://${up.gateway}/metrics`, { headers: { authorization: `Bearer ${up.token}` } });
  assert.equal(res.status, 200, 'the gateway\'s metrics, for an admin');
  const text = await res.text();
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    out.set(line.slice(0, sp), Number(line.slice(sp + 1)));
  }
  return out;
}

function sumMetric(metrics, name, labelFilter = () => true) {
  let total = 0;
  for (const [k, v] of metrics) {
    const brace = k.indexOf('{');
    const n = brace < 0 ? k : k.slice(0, brace);
    if (n === name && labelFilter(brace < 0 ? '' : k.slice(brace))) total += v;
  }
  return total;
}

const up = new Up();
let admin;

before(async () => {
  assert.ok(DROVER, 'DROVER_BINARY is not set');
  assert.ok(ENGINE, 'TEST_ENGINE_BINARY is not set');
  await up.start();
  admin = new OpenAI({ baseURL: `http://${up.gateway}/v1`, apiKey: up.token, maxRetries: 0, timeout: 60000 });
});

after(async () => {
  await up.stop();
});

async function readyReplicas(name, n, tenant = '') {
  return waitFor(async () => {
    const d = await up.deployment(name, tenant);
    return (d.status?.readyReplicas ?? 0) >= n ? d : null;
  }, { timeout: 90000, what: `${n} ready replicas of ${name}` });
}

// The gateway has routes for `model` once a request gets an answer.
async function servable(client, model) {
  return waitFor(async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'ping' }], max_tokens: 2 });
    return r.choices?.length > 0;
  }, { timeout: 30000, interval: 250, what: `${model} served through the gateway` });
}

test('two replicas: one killed under load fails no request that had not started streaming; it restarts and serves again',
  { timeout: 240000 }, async () => {
    await up.ok(['deploy', 'echo', '--engine', 'custom', '--replicas', '2', '--gpus', '1', '--', ENGINE,
      '--token-delay-us', '20000']);
    const d = await readyReplicas('echo', 2);
    await servable(admin, 'echo');
    const victim = d.status.replicas[0];
    const port = Number(victim.endpoint.split(':').pop());
    const pid = pidListeningOn(port);
    assert.ok(pid > 0, `the process serving ${victim.endpoint}`);

    const results = [];  // {started, error}
    let stop = false;
    const worker = async () => {
      while (!stop) {
        const r = { started: false, error: null };
        try {
          const stream = await admin.chat.completions.create({
            model: 'echo', stream: true, max_tokens: 8, messages: [{ role: 'user', content: 'count to eight' }],
          });
          for await (const chunk of stream) {
            if (chunk.choices?.length) r.started = true;
          }
        } catch (e) {
          r.error = e;
        }
        results.push(r);
      }
    };
    const workers = Array.from({ length: 6 }, worker);
    await waitFor(() => results.length >= 12, { what: 'load to run' });
    process.kill(pid, 'SIGKILL');
    // The agent restarts it (the same replica, the same port) and it turns ready again.
    await waitFor(async () => {
      const now = await up.deployment('echo');
      const r = now.status.replicas.find((x) => x.jobId === victim.jobId);
      return r && r.ready && (r.restarts ?? 0) >= 1 && pidListeningOn(port) > 0 && pidListeningOn(port) !== pid;
    }, { timeout: 90000, what: 'the killed replica restarted and ready' });
    // It serves again: its own count of answered requests grows.
    const served = async () => {
      const text = await (await fetch(`http://${victim.endpoint}/metrics`)).text();
      const m = /requests_total\s+(\d+)/.exec(text);
      return m ? Number(m[1]) : 0;
    };
    await waitFor(async () => (await served()) > 0, { timeout: 60000, what: 'the restarted replica to serve requests' });
    stop = true;
    await Promise.all(workers);
    const unstarted = results.filter((r) => r.error && !r.started);
    assert.deepEqual(unstarted.map((r) => String(r.error)), [], 'requests that failed before streaming began');
    assert.ok(results.filter((r) => !r.error).length > 12, 'requests succeeded');
  });

test('a streaming request cancelled by the client frees its slot', { timeout: 120000 }, async () => {
  const d = await readyReplicas('echo', 2);
  const controller = new AbortController();
  const stream = await admin.chat.completions.create({
    model: 'echo', stream: true, max_tokens: 10000, messages: [{ role: 'user', content: 'a long answer' }],
  }, { signal: controller.signal });
  let chunks = 0;
  const outstanding = async () => sumMetric(await gatewayMetrics(up), 'drover_gateway_outstanding_requests');
  try {
    for await (const chunk of stream) {
      if (chunk.choices?.length) ++chunks;
      if (chunks === 3) {
        assert.equal(await outstanding(), 1, 'the stream counts as outstanding while it runs');
        controller.abort();
      }
    }
  } catch (e) {
    assert.ok(controller.signal.aborted, `only the abort ends it: ${e}`);
  }
  await waitFor(async () => (await outstanding()) === 0, { timeout: 30000, what: 'the gateway\'s outstanding count back to 0' });
  // And the engine was told: its own in-flight count goes back to 0 too.
  for (const r of d.status.replicas) {
    await waitFor(async () => {
      const text = await (await fetch(`http://${r.endpoint}/metrics`)).text();
      const m = /vllm:num_requests_running\{[^}]*\}\s+(\d+)/.exec(text);
      return m && Number(m[1]) === 0;
    }, { timeout: 30000, what: `${r.endpoint} to stop generating` });
  }
});

test('a replica answers only the gateway: its secret is the gateway\'s, not the tenant\'s', { timeout: 120000 }, async () => {
  await up.ok(['deploy', 'guarded', '--engine', 'custom', '--replicas', '1', '--gpus', '1', '--', ENGINE]);
  const d = await readyReplicas('guarded', 1);
  const replica = d.status.replicas[0];
  await servable(admin, 'guarded');
  const chat = (headers = {}) => fetch(`http://${replica.endpoint}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'guarded', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
  });
  // Straight to the replica's address, as any job on the node could: refused,
  // with no key or with a Drover token.
  assert.equal((await chat()).status, 401, 'no key');
  assert.equal((await chat({ authorization: `Bearer ${up.token}` })).status, 401, 'the admin\'s Drover token');
  // The probes' path stays open (the replica is ready).
  assert.equal((await fetch(`http://${replica.endpoint}/health`)).status, 200);
  // The secret: an admin's endpoints have it, and it opens the replica.
  const endpoints = JSON.parse(await up.ok(['models', '-o', 'json'])).endpoints ?? [];
  const mine = endpoints.find((e) => e.replica === replica.jobId);
  assert.ok(mine?.apiKey?.length >= 43, `the admin's endpoints carry the replica's secret: ${JSON.stringify(mine)}`);
  assert.equal((await chat({ authorization: `Bearer ${mine.apiKey}` })).status, 200, 'with the secret');
  // Through the gateway, with a Drover token: 200.
  const r = await admin.chat.completions.create({ model: 'guarded', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
  assert.ok(r.choices[0].message.content.length > 0);
  // No job view shows it: the CLI's (gRPC), the REST API's (the dashboard's).
  const job = await up.ok(['job', replica.jobId, '-o', 'json']);
  assert.ok(!job.includes(mine.apiKey), 'drover job shows the secret');
  for (const p of [`/api/v1/jobs/${replica.jobId}`, '/api/v1/jobs']) {
    const res = await fetch(`http://${up.http}${p}`, { headers: { authorization: `Bearer ${up.token}` } });
    assert.equal(res.status, 200, p);
    assert.ok(!(await res.text()).includes(mine.apiKey), `${p} shows the secret`);
  }
  // A user's token of the tenant sees where the replica is, not its secret.
  const userOut = await up.ok(['tokens', 'create', 'default-user', '--tenant', 'default', '--role', 'user', '-o', 'json']);
  const userToken = JSON.parse(userOut).token;
  const theirs = JSON.parse(await up.ok(['models', '-o', 'json'], userToken)).endpoints ?? [];
  const seen = theirs.find((e) => e.replica === replica.jobId);
  assert.ok(seen, 'the tenant\'s user sees the replica\'s endpoint');
  assert.ok(!seen.apiKey, `but not its secret: ${JSON.stringify(seen)}`);
  await up.ok(['undeploy', 'guarded']);
});

test('a tenant over its tokens per minute gets 429 with retry-after; its usage is what the engine reported',
  { timeout: 180000 }, async () => {
    await up.ok(['tenants', 'create', 'team', '--tokens-per-minute', '100']);
    const tokenOut = await up.ok(['tokens', 'create', 'team-app', '--tenant', 'team', '--role', 'user', '-o', 'json']);
    const teamToken = JSON.parse(tokenOut).token;
    assert.ok(teamToken, 'a token for the tenant');
    await up.ok(['deploy', 'team-echo', '--tenant', 'team', '--engine', 'custom', '--replicas', '1', '--gpus', '1', '--',
      ENGINE]);
    await readyReplicas('team-echo', 1, 'team');
    const team = new OpenAI({ baseURL: `http://${up.gateway}/v1`, apiKey: teamToken, maxRetries: 0 });
    await servable(admin, 'team-echo');
    assert.ok((await team.models.list()).data.some((m) => m.id === 'team-echo'), 'team-echo listed for the tenant');
    // The tenant sees its model, not the default tenant's.
    await assert.rejects(team.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e.status === 404);
    const reported = { prompt: 0, completion: 0 };
    let limited = null;
    for (let i = 0; i < 50 && !limited; ++i) {
      try {
        const r = await team.chat.completions.create({
          model: 'team-echo', max_tokens: 16, messages: [{ role: 'user', content: 'four words of prompt' }],
        });
        reported.prompt += r.usage.prompt_tokens;
        reported.completion += r.usage.completion_tokens;
      } catch (e) {
        if (e.status !== 429) throw e;
        limited = e;
      }
    }
    assert.ok(limited, 'a request over the tenant\'s tokens per minute is refused');
    const retryAfter = Number(limited.headers?.get?.('retry-after') ?? limited.headers?.['retry-after']);
    assert.ok(retryAfter >= 1, `retry-after names seconds (${retryAfter})`);
    assert.ok(reported.prompt + reported.completion >= 100 - 16 - 8, 'refused only once near the limit');
    const m = await gatewayMetrics(up);
    const forTeam = (labels) => labels.includes('tenant="team"');
    assert.equal(sumMetric(m, 'drover_gateway_prompt_tokens_total', forTeam), reported.prompt);
    assert.equal(sumMetric(m, 'drover_gateway_completion_tokens_total', forTeam), reported.completion);
    // The server's usage (the dashboard's), from the gateway's load reports:
    // the same tokens, and the tenant's own token sees only its rows.
    const usage = async (token) => {
      const res = await fetch(`http://${up.http}/api/v1/serving/usage`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200, 'GET /api/v1/serving/usage');
      return (await res.json()).usage ?? [];
    };
    const teamRows = await waitFor(async () => {
      const rows = (await usage(up.token)).filter((r) => r.tenant === 'team');
      const prompt = rows.reduce((a, r) => a + Number(r.prompt_tokens), 0);
      return prompt === reported.prompt ? rows : null;
    }, { timeout: 30000, what: 'the server\'s usage to show the tenant\'s tokens' });
    assert.equal(teamRows.reduce((a, r) => a + Number(r.completion_tokens), 0), reported.completion);
    assert.ok((await usage(teamToken)).every((r) => r.tenant === 'team'), 'a tenant\'s token sees its own rows only');
  });

test('a deployment scaled to zero starts again on the first request', { timeout: 240000 }, async () => {
  await up.ok(['deploy', 'sleepy', '--engine', 'custom', '--gpus', '1', '--replicas', '1', '--min-replicas', '0',
    '--max-replicas', '1', '--scale-down-idle', '3s', '--', ENGINE]);
  await readyReplicas('sleepy', 1);
  await servable(admin, 'sleepy');
  // Idle: it goes to zero replicas.
  await waitFor(async () => {
    const d = await up.deployment('sleepy');
    return (d.status.desiredReplicas ?? 0) === 0 && (d.status.replicas ?? []).length === 0;
  }, { timeout: 90000, what: 'sleepy scaled to zero' });
  // A request waits while a replica starts, then gets its answer.
  const r = await admin.chat.completions.create({ model: 'sleepy', max_tokens: 4, messages: [{ role: 'user', content: 'wake up' }] });
  assert.ok(r.choices[0].message.content.length > 0);
  const d = await up.deployment('sleepy');
  assert.equal(d.status.desiredReplicas, 1);
});

test('a deployment whose engine queues scales up on the queue time', { timeout: 240000 }, async () => {
  // One request at a time in the engine; 6 in flight are far below
  // target-outstanding 100, but each waits ~0.5 s and more in its queue.
  await up.ok(['deploy', 'queued', '--engine', 'custom', '--gpus', '1', '--min-replicas', '1', '--max-replicas', '2',
    '--target-outstanding', '100', '--target-queue', '100ms', '--', ENGINE, '--max-running', '1',
    '--token-delay-us', '20000']);
  await readyReplicas('queued', 1);
  await servable(admin, 'queued');
  assert.equal((await up.deployment('queued')).status.desiredReplicas, 1);
  const streams = [];
  for (let i = 0; i < 6; i++) {
    streams.push((async () => {
      const s = await admin.chat.completions.create({ model: 'queued', stream: true, max_tokens: 25,
        messages: [{ role: 'user', content: `queue ${i}` }] });
      let n = 0;
      for await (const chunk of s) n += chunk.choices?.length ?? 0;
      return n;
    })());
  }
  const d = await waitFor(async () => {
    const x = await up.deployment('queued');
    return x.status.desiredReplicas === 2 ? x : null;
  }, { timeout: 60000, what: 'a second replica for the queue time' });
  assert.ok(Number(d.status.outstanding ?? 0) < 100, 'scaled by queue time, not by outstanding requests');
  for (const n of await Promise.all(streams)) assert.ok(n > 0, 'every queued stream got its tokens');
  await readyReplicas('queued', 2);
  await up.ok(['undeploy', 'queued']);
});

test('a real llama.cpp engine deployed by drover answers through the gateway', { timeout: 240000 }, async () => {
  // Beside the data directory, not in it: jobs do not see the server's data.
  const gguf = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'drover-model-')), 'tiny.gguf');
  execFileSync(process.execPath, [path.join(LLAMA, 'make_gguf.mjs'), gguf]);
  await up.ok(['deploy', 'tiny-llama', '--engine', 'custom', '--gpus', '1', '--', process.execPath,
    path.join(LLAMA, 'server.mjs'), '--model-file', gguf]);
  const d = await readyReplicas('tiny-llama', 1);
  await servable(admin, 'tiny-llama');
  // The replica's secret reached the engine (server.mjs reads it as
  // llama-server reads LLAMA_API_KEY): straight to it, only its public
  // paths answer; the gateway's calls, and its /metrics scrapes, carry it.
  const direct = `http://${d.status.replicas[0].endpoint}`;
  assert.equal((await fetch(`${direct}/health`)).status, 200);
  assert.equal((await fetch(`${direct}/metrics`)).status, 401);
  assert.equal((await fetch(`${direct}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny-llama', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }) })).status, 401);
  const r = await admin.chat.completions.create({
    model: 'tiny-llama', max_tokens: 8, seed: 7, messages: [{ role: 'user', content: 'Say something.' }],
  });
  // The tiny model's every token is one printable character and it never stops early (tests/engines/llama).
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.choices[0].message.content.length, 8);
  assert.ok(r.usage.prompt_tokens > 0);
  const stream = await admin.chat.completions.create({
    model: 'tiny-llama', max_tokens: 6, stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Stream it.' }],
  });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    text += chunk.choices?.[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text.length, 6);
  assert.equal(usage?.completion_tokens, 6);
});

test('a deployment from an image answers the official client through the gateway, every replica on one digest',
  { timeout: 240000 }, async () => {
    await up.ok(['deploy', 'boxed', '--engine', 'custom', '--replicas', '2', '--gpus', '1', '--image',
      `${up.registry}/engine:v1`, '--', `/bin/${path.basename(ENGINE)}`]);
    const d = await readyReplicas('boxed', 2);
    await servable(admin, 'boxed');
    const r = await admin.chat.completions.create({ model: 'boxed', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.usage.completion_tokens, 4);
    assert.match(d.status.imageDigest ?? '', /^sha256:[0-9a-f]{64}$/, JSON.stringify(d.status));
    const jobs = JSON.parse(await up.ok(['jobs', '-o', 'json', '--all']));
    const replicas = (jobs.jobs ?? []).filter((j) => j.spec?.deployment === 'boxed');
    assert.equal(replicas.length, 2);
    for (const j of replicas) assert.equal(j.status.imageDigest, d.status.imageDigest, JSON.stringify(j.status));
    await up.ok(['undeploy', 'boxed']);
  });
