// The Models tab (issue 18): model deployments with their replicas and
// where they run, the gateway's usage, the empty state, and what a
// non-admin sees.
//
// Deployments are created through the REST API (POST /api/v1/deployments)
// with the custom engine: a replica is any process that serves on
// $DROVER_PORT. Here that is `python3 -m http.server` (the readiness probe
// of a custom engine is TCP by default), or the test engine of
// apps/drover-test-engine when DROVER_TEST_ENGINE names it.
//
// A server without the deployments API (GET /api/v1/deployments: 404) skips
// these tests, saying so; any other failure fails them.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { loginWithToken, openTab, waitFor, withDashboard } from './harness.mjs';

const EMPTY_HINT = 'drover deploy NAME --model M --replicas N --gpus G';

// Why the tests cannot run against this server (null: they can).
async function deploymentsMissing(drover) {
  const r = await drover.request('/api/v1/deployments');
  if (r.status === 404) {
    return `this drover has no deployments API yet (GET /api/v1/deployments: 404 ${r.text.trim().slice(0, 160)})`;
  }
  if (r.status !== 200) throw new Error(`GET /api/v1/deployments: HTTP ${r.status}: ${r.text}`);
  return null;
}

// The command of a replica: the test engine when one is named, else
// python's HTTP server on the port the agent gives.
function engineCommand() {
  const engine = process.env.DROVER_TEST_ENGINE;
  if (engine && fs.existsSync(engine)) return ['sh', '-c', `exec "${engine}" --port "$DROVER_PORT"`];
  return ['sh', '-c', 'exec python3 -m http.server "$DROVER_PORT" --bind 127.0.0.1'];
}

async function createDeployment(drover, spec) {
  const r = await drover.request('/api/v1/deployments', {
    method: 'POST',
    body: { spec: { engine: 'custom', command: engineCommand(), replicas: 1, gpus: 1, ...spec } },
  });
  if (r.status !== 200 && r.status !== 201) {
    throw new Error(`POST /api/v1/deployments ${spec.name}: HTTP ${r.status}: ${r.text}`);
  }
  return r.json;
}

async function deployment(drover, name) {
  return drover.api(`/api/v1/deployments/${encodeURIComponent(name)}`);
}

// Waits until the API says deployment `name` has `n` ready replicas.
async function waitReadyReplicas(drover, name, n, timeout = 90000) {
  let last = null;
  return waitFor(async () => {
    last = await deployment(drover, name);
    const replicas = last.status?.replicas ?? [];
    return Number(last.status?.readyReplicas ?? 0) >= n && replicas.filter((r) => r.ready).length >= n ? last : false;
  }, { timeout, interval: 250, what: `deployment ${name} to have ${n} ready replicas` }).catch((e) => {
    throw new Error(`${e.message} (last: ${JSON.stringify(last?.status ?? null)})`);
  });
}

const rowSel = (name) => `[data-testid=deployment-row][data-deployment="${name}"]`;
const replicaSel = (name) => `[data-testid=replica-row][data-deployment="${name}"]`;

async function polls(page) {
  return page.$eval('[data-testid=view-models]', (el) => Number(el.getAttribute('data-polls') || 0));
}

// Waits until the tab has polled at least `n` more times than now.
async function waitPolls(page, n, timeout = 30000) {
  const want = (await polls(page)) + n;
  await page.waitForFunction((w) => Number(document.querySelector('[data-testid=view-models]').getAttribute('data-polls') || 0) >= w,
    want, { timeout, polling: 100 });
}

async function cellText(page, selector) {
  return page.$eval(selector, (el) => el.textContent.trim()).catch(() => '');
}

test('with nothing deployed the Models tab says how to deploy', { timeout: 180000 }, async (t) => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '1'];
  await withDashboard('models-empty', flags, async ({ drover, page }) => {
    const missing = await deploymentsMissing(drover);
    if (missing) {
      t.skip(missing);
      return;
    }
    await openTab(page, 'models');
    await page.waitForSelector('[data-testid=models-empty]', { state: 'visible', timeout: 15000 });
    const text = (await page.textContent('[data-testid=models-empty]')).replace(/\s+/g, ' ');
    assert.ok(text.includes(EMPTY_HINT), `the empty state shows '${EMPTY_HINT}' (it says: ${text})`);
    assert.equal(await page.locator('[data-testid=deployment-row]').count(), 0);
    assert.equal(await cellText(page, '[data-testid=models-deployments]'), '0');
    assert.equal(await page.isVisible('[data-testid=models-error]'), false, 'no error next to the empty state');
    // The admin is not told its view is limited to one tenant.
    assert.equal(await page.isVisible('[data-testid=models-scope]'), false);
  }, { readyNodes: 2, readyGpus: 1 });
});

test('a deployment created through the API appears with its replica, which turns ready', { timeout: 240000 }, async (t) => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '1'];
  await withDashboard('models-deployment', flags, async ({ drover, page }) => {
    const missing = await deploymentsMissing(drover);
    if (missing) {
      t.skip(missing);
      return;
    }
    await openTab(page, 'models');
    await page.waitForSelector('[data-testid=models-empty]', { state: 'visible', timeout: 15000 });

    // Created after the page is open: the tab's polls must bring it in.
    await createDeployment(drover, { name: 'echo', model: 'echo-model', replicas: 1, gpus: 1 });
    await page.waitForSelector(rowSel('echo'), { state: 'visible', timeout: 30000 }).catch((e) => {
      throw new Error(`deployment echo never appeared on the Models tab: ${e.message}`);
    });
    assert.equal(await page.isVisible('[data-testid=models-empty]'), false, 'the empty state went away');
    assert.equal(await cellText(page, `${rowSel('echo')} [data-testid=deployment-model]`), 'echo',
      'clients ask for the deployment\'s name when no served model name is given');
    assert.equal(await cellText(page, `${rowSel('echo')} [data-testid=deployment-tenant]`), 'default');

    // Its replica, placed on the only GPU (sim-1), turns ready.
    await page.waitForSelector(replicaSel('echo'), { state: 'visible', timeout: 60000 }).catch((e) => {
      throw new Error(`echo's replica never appeared: ${e.message}`);
    });
    await page.waitForSelector(`${replicaSel('echo')} [data-testid=replica-ready][data-ready=true]`,
      { state: 'visible', timeout: 90000 }).catch(async (e) => {
      const shown = await cellText(page, `${replicaSel('echo')} [data-testid=replica-ready]`);
      const reason = await cellText(page, `${replicaSel('echo')} [data-testid=replica-reason]`);
      const api = await deployment(drover, 'echo').catch((err) => ({ error: err.message }));
      throw new Error(`echo's replica did not turn ready on the page (shows '${shown}', reason '${reason}'; ` +
        `API: ${JSON.stringify(api.status ?? api)}): ${e.message}`);
    });
    assert.equal(await cellText(page, `${replicaSel('echo')} [data-testid=replica-ready]`), 'Ready');
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.trim() === 'Ready',
      `${rowSel('echo')} [data-testid=deployment-status]`, { timeout: 30000, polling: 100 });

    // What the page shows is what the API says.
    const d = await waitReadyReplicas(drover, 'echo', 1);
    const [r] = d.status.replicas.filter((x) => x.ready);
    assert.equal(d.status.replicas.length, 1, 'one replica');
    assert.ok(r.jobId, 'the replica has a job id');
    assert.equal(r.node, 'sim-1', 'the replica of a 1-GPU deployment runs on the node with the GPU');
    assert.match(r.endpoint, /:\d+$/, 'the replica has an endpoint host:port');
    await waitFor(async () => (await cellText(page, `${replicaSel('echo')}[data-replica="${r.jobId}"] [data-testid=replica-id]`)) === r.jobId,
      { timeout: 15000, what: `the replica row of ${r.jobId}` });
    const row = `${replicaSel('echo')}[data-replica="${r.jobId}"]`;
    assert.equal(await cellText(page, `${row} [data-testid=replica-node]`), r.node);
    assert.equal(await cellText(page, `${row} [data-testid=replica-endpoint]`), r.endpoint);
    assert.equal(await cellText(page, `${row} [data-testid=replica-restarts]`), String(r.restarts ?? 0));
    assert.equal(await cellText(page, `${row} [data-testid=replica-outstanding]`), String(Number(r.outstanding ?? 0)));
    assert.equal(await cellText(page, `${rowSel('echo')} [data-testid=deployment-replicas]`), '1/1');
    assert.equal(await cellText(page, '[data-testid=models-deployments]'), '1');
    assert.equal(await cellText(page, '[data-testid=models-ready]'), '1/1');

    // Rates come from successive polls, and the page says over how long.
    await waitPolls(page, 2);
    const usage = await drover.request('/api/v1/serving/usage');
    if (usage.status === 200) {
      const windowText = await cellText(page, '[data-testid=models-rate-window]');
      assert.match(windowText, /^over the last \d+ s$/, `the rate window is named (shows '${windowText}')`);
      assert.equal(await page.isVisible('[data-testid=usage-error]'), false, 'usage read without error');
    } else {
      // The route is another helper's: the page says it has no usage.
      t.diagnostic(`GET /api/v1/serving/usage: HTTP ${usage.status}; the usage checks were not made`);
      assert.equal(await page.isVisible('[data-testid=usage-error]'), true, 'the page says usage is unavailable');
    }
  }, { readyNodes: 2, readyGpus: 1 });
});

test('a non-admin sees only its own tenant\'s deployments', { timeout: 240000 }, async (t) => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '2'];
  await withDashboard('models-tenant', flags, async ({ drover, page }) => {
    const missing = await deploymentsMissing(drover);
    if (missing) {
      t.skip(missing);
      return;
    }
    await drover.api('/api/v1/tenants', { method: 'POST', body: { name: 'team-a', weight: 1, borrowLimit: -1 } });
    const created = await drover.api('/api/v1/tokens', { method: 'POST', body: { name: 'ada', tenant: 'team-a', role: 'user' } });
    assert.ok(created.token, 'a token for team-a');
    await createDeployment(drover, { name: 'echo-default', tenant: 'default' });
    await createDeployment(drover, { name: 'echo-team', tenant: 'team-a' });

    // The API already filters: the user's list has team-a's only.
    const mine = await drover.request('/api/v1/deployments', { token: created.token });
    assert.equal(mine.status, 200, `the user may list deployments: ${mine.text}`);
    assert.deepEqual((mine.json.deployments ?? []).map((d) => d.spec.name), ['echo-team']);

    // The admin's page shows both.
    await openTab(page, 'models');
    await page.waitForSelector(rowSel('echo-default'), { state: 'visible', timeout: 30000 });
    await page.waitForSelector(rowSel('echo-team'), { state: 'visible', timeout: 30000 });

    // The user's: team-a's only, and a note that says so.
    const who = await loginWithToken(page, created.token);
    assert.equal(who.tenant, 'team-a');
    await openTab(page, 'models');
    await page.waitForSelector(rowSel('echo-team'), { state: 'visible', timeout: 30000 });
    await waitPolls(page, 2);
    assert.equal(await page.locator(rowSel('echo-default')).count(), 0, 'another tenant\'s deployment is not shown');
    assert.equal(await page.locator('[data-testid=deployment-row]').count(), 1);
    assert.equal(await page.isVisible('[data-testid=models-scope]'), true, 'the page says it shows one tenant');
    assert.match(await cellText(page, '[data-testid=models-scope]'), /team-a/);
    assert.equal(await cellText(page, `${rowSel('echo-team')} [data-testid=deployment-tenant]`), 'team-a');
    assert.equal(await page.isVisible('[data-testid=models-error]'), false);
  }, { readyNodes: 2, readyGpus: 2 });
});
