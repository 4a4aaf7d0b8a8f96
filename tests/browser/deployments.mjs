// Deployments for the browser tests of the Models tab (models.test.mjs,
// models_actions.test.mjs): created through the REST API
// (POST /api/v1/deployments) with the custom engine, where a replica is any
// process that serves on $DROVER_PORT: the test engine of
// apps/drover-test-engine (DROVER_TEST_ENGINE, or built next to the drover
// binary), else `python3 -m http.server`. A server without the deployments
// API (GET /api/v1/deployments: 404) skips those tests, saying so.
import fs from 'node:fs';
import path from 'node:path';
import { droverBinary, waitFor } from './harness.mjs';

// Why the tests cannot run against this server (null: they can).
export async function deploymentsMissing(drover) {
  const r = await drover.request('/api/v1/deployments');
  if (r.status === 404) {
    return `this drover has no deployments API yet (GET /api/v1/deployments: 404 ${r.text.trim().slice(0, 160)})`;
  }
  if (r.status !== 200) throw new Error(`GET /api/v1/deployments: HTTP ${r.status}: ${r.text}`);
  return null;
}

// drover-test-engine: DROVER_TEST_ENGINE, or built next to the drover
// binary under test (build/apps/drover-test-engine/); '' when neither.
export function testEngine() {
  const named = process.env.DROVER_TEST_ENGINE;
  if (named) {
    if (!fs.existsSync(named)) throw new Error(`DROVER_TEST_ENGINE '${named}' does not exist`);
    return named;
  }
  const built = path.resolve(path.dirname(droverBinary()), '..', 'drover-test-engine', 'drover-test-engine');
  return fs.existsSync(built) ? built : '';
}

// How a replica serving `model` runs: the test engine when there is one,
// else python's HTTP server (which has no /health, the default readiness
// path: it is probed at /), on the port the agent gives.
function engine(model) {
  const bin = testEngine();
  if (bin) return { command: ['sh', '-c', `exec "${bin}" --port "$DROVER_PORT" --model "${model}"`] };
  return {
    command: ['sh', '-c', 'exec python3 -m http.server "$DROVER_PORT" --bind 127.0.0.1'],
    readiness: { httpPath: '/' },
  };
}

export async function createDeployment(drover, spec) {
  const r = await drover.request('/api/v1/deployments', {
    method: 'POST',
    body: { spec: { engine: 'custom', model: 'drover-test-engine', ...engine(spec.name), replicas: 1, gpus: 1, ...spec } },
  });
  if (r.status !== 200 && r.status !== 201) {
    throw new Error(`POST /api/v1/deployments ${spec.name}: HTTP ${r.status}: ${r.text}`);
  }
  return r.json;
}

export async function deployment(drover, name) {
  return drover.api(`/api/v1/deployments/${encodeURIComponent(name)}`);
}

// Waits until the API says deployment `name` has `n` ready replicas.
export async function waitReadyReplicas(drover, name, n, timeout = 90000) {
  let last = null;
  return waitFor(async () => {
    last = await deployment(drover, name);
    const replicas = last.status?.replicas ?? [];
    return Number(last.status?.readyReplicas ?? 0) >= n && replicas.filter((r) => r.ready).length >= n ? last : false;
  }, { timeout, interval: 250, what: `deployment ${name} to have ${n} ready replicas` }).catch((e) => {
    throw new Error(`${e.message} (last: ${JSON.stringify(last?.status ?? null)})`);
  });
}

export const rowSel = (name) => `[data-testid=deployment-row][data-deployment="${name}"]`;
export const replicaSel = (name) => `[data-testid=replica-row][data-deployment="${name}"]`;

export async function polls(page) {
  return page.$eval('[data-testid=view-models]', (el) => Number(el.getAttribute('data-polls') || 0));
}

// Waits until the tab has polled at least `n` more times than now.
export async function waitPolls(page, n, timeout = 30000) {
  const want = (await polls(page)) + n;
  await page.waitForFunction((w) => Number(document.querySelector('[data-testid=view-models]').getAttribute('data-polls') || 0) >= w,
    want, { timeout, polling: 100 });
}

// The trimmed text of the element `selector` ('' when there is none).
export async function cellText(page, selector) {
  return page.$eval(selector, (el) => el.textContent.trim()).catch(() => '');
}
