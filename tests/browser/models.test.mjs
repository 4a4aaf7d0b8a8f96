// The Models tab (issue 18): model deployments with their replicas and
// where they run, the gateway's usage, the empty state, and what a
// non-admin sees.
//
// Deployments are created through the REST API (deployments.mjs).
//
// A server without the deployments API (GET /api/v1/deployments: 404) skips
// these tests, saying so; any other failure fails them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  cellText, createDeployment, deployment, deploymentsMissing, replicaSel, rowSel, testEngine, waitPolls, waitReadyReplicas,
} from './deployments.mjs';
import { loginWithToken, openTab, waitFor, withDashboard } from './harness.mjs';

const EMPTY_HINT = 'drover deploy NAME --model M --replicas N --gpus G';

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

// One chat completion through the gateway as `token`; returns the
// engine's usage as the client saw it.
async function chat(drover, token, model, content) {
  const res = await fetch(`http://${drover.gateway}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content }], max_tokens: 4 }),
    signal: AbortSignal.timeout(30000),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`POST /v1/chat/completions: HTTP ${res.status}: ${text}`);
  const usage = JSON.parse(text).usage ?? {};
  return { prompt: Number(usage.prompt_tokens ?? 0), completion: Number(usage.completion_tokens ?? 0) };
}

test('requests through the gateway show as rates and as the tenant\'s usage', { timeout: 240000 }, async (t) => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '1', '--gateway-listen', '127.0.0.1:0'];
  await withDashboard('models-usage', flags, async ({ drover, page }) => {
    const missing = await deploymentsMissing(drover);
    if (missing) {
      t.skip(missing);
      return;
    }
    const usage = await drover.request('/api/v1/serving/usage');
    const why = [];
    if (usage.status !== 200) why.push(`GET /api/v1/serving/usage: HTTP ${usage.status}`);
    if (!testEngine()) why.push('no drover-test-engine next to the drover binary (or DROVER_TEST_ENGINE)');
    if (why.length) {
      t.skip(`no traffic to meter: ${why.join('; ')}`);
      return;
    }
    await drover.waitGateway();
    await createDeployment(drover, { name: 'echo', replicas: 1, gpus: 1 });
    await waitReadyReplicas(drover, 'echo', 1);
    // The gateway learns the ready replica from the server: until it lists
    // the model, a request would be refused (and metered as an error).
    await waitFor(async () => {
      const res = await fetch(`http://${drover.gateway}/v1/models`, {
        headers: { authorization: `Bearer ${drover.token}` }, signal: AbortSignal.timeout(10000),
      });
      const body = await res.json();
      return res.status === 200 && (body.data ?? []).some((m) => m.id === 'echo');
    }, { timeout: 30000, interval: 200, what: 'the gateway to list model echo' });
    await openTab(page, 'models');
    await page.waitForSelector(`${replicaSel('echo')} [data-testid=replica-ready][data-ready=true]`, { state: 'visible', timeout: 60000 });

    // Requests until the page shows a request rate for echo (it needs two
    // polls around them), then the totals must match what the engine said.
    const sent = { requests: 0, prompt: 0, completion: 0 };
    const rateShown = async () => Number(await cellText(page, `${rowSel('echo')} [data-testid=deployment-rps]`)) > 0;
    await waitFor(async () => {
      const u = await chat(drover, drover.token, 'echo', `hello number ${sent.requests}`);
      sent.requests++;
      sent.prompt += u.prompt;
      sent.completion += u.completion;
      return rateShown();
    }, { timeout: 60000, interval: 200, what: 'a request rate for echo on the page' });
    assert.ok(sent.completion > 0, 'the engine reported completion tokens');
    // The token rate may show a poll after the request rate: under a full
    // ctest -j 2 the page once showed requests/s with 0 tokens/s at the
    // first look. It must still show, within 30 s.
    await waitFor(async () => Number(await cellText(page, `${rowSel('echo')} [data-testid=deployment-tps]`)) > 0,
      { timeout: 30000, interval: 200, what: 'tokens per second shown for echo' });
    assert.ok(Number(await cellText(page, '[data-testid=models-rps]')) > 0, 'the requests/s card shows traffic');

    const row = '[data-testid=usage-tenant-row][data-tenant=default]';
    await page.waitForFunction(([sel, n]) => document.querySelector(`${sel} [data-testid=usage-requests]`)?.getAttribute('title') === String(n),
      [row, sent.requests], { timeout: 30000, polling: 100 }).catch(async (e) => {
      throw new Error(`the default tenant's usage row did not show ${sent.requests} requests ` +
        `(shows '${await cellText(page, `${row} [data-testid=usage-requests]`)}'): ${e.message}`);
    });
    const title = async (testid) => page.$eval(`${row} [data-testid=${testid}]`, (el) => el.getAttribute('title'));
    assert.equal(await title('usage-prompt'), String(sent.prompt), 'prompt tokens as the engine reported them');
    assert.equal(await title('usage-completion'), String(sent.completion), 'completion tokens as the engine reported them');
    assert.equal(await cellText(page, `${row} [data-testid=usage-errors]`), '0');
    assert.equal(await page.locator('[data-testid=usage-row][data-tenant=default][data-model=echo]').count(), 1,
      'one row for the admin key on echo');
  }, { readyNodes: 2, readyGpus: 1 });
});
