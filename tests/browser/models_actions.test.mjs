// The Models tab's actions (issue 18): an operator scales a deployment and
// undeploys it from the page; the server's refusals are shown there; a
// session whose token may not change deployments gets no buttons.
//
// The page is waited on (its polls and the rows they bring), never slept on.
// Who gets the buttons and what a refusal says are checked first without a
// browser, on the page's own functions.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiError } from '../../web/src/api.js';
import { canChange, failureText, parseReplicas } from '../../web/src/deployment_actions.js';
import {
  cellText, createDeployment, deployment, deploymentsMissing, replicaSel, rowSel, waitPolls,
} from './deployments.mjs';
import { artifactPath, loginWithToken, openTab, withDashboard } from './harness.mjs';

test('the buttons go to whoever the server lets change the deployment', () => {
  const who = (role, tenant = 'team-a') => ({ name: 'x', tenant, role });
  assert.equal(canChange(who('admin', 'default'), 'team-a'), true, 'an admin, any tenant');
  assert.equal(canChange(who('user'), 'team-a'), true);
  assert.equal(canChange(who('tenant-admin'), 'team-a'), true);
  assert.equal(canChange(who('user'), 'team-b'), false, 'another tenant\'s');
  assert.equal(canChange(who('viewer'), 'team-a'), false, 'a viewer');
  assert.equal(canChange(who('user', 'default'), ''), true, 'no tenant is the default tenant');
  assert.equal(canChange(who('gateway', 'default'), 'default'), false);
  assert.equal(canChange(null, 'default'), false, 'logged out');
});

test('a replica count is a whole number; the range is the server\'s to refuse', () => {
  assert.deepEqual(parseReplicas(' 2 '), { replicas: 2 });
  assert.deepEqual(parseReplicas('300'), { replicas: 300 });
  assert.deepEqual(parseReplicas('-1'), { replicas: -1 });
  for (const bad of ['', '1.5', 'two', '2e3']) assert.ok(parseReplicas(bad).error, `'${bad}' is refused`);
});

test('a refusal names what failed, the server\'s message and the status', () => {
  assert.equal(failureText('cannot scale echo to 300', new ApiError('replicas 300 is outside 0..256', 400)),
    'cannot scale echo to 300: replicas 300 is outside 0..256 (HTTP 400)');
  assert.equal(failureText('cannot undeploy echo', new ApiError('role viewer may not delete deployments', 403)),
    'cannot undeploy echo: not allowed (HTTP 403): role viewer may not delete deployments');
  assert.equal(failureText('cannot undeploy echo', new ApiError('deployment \'echo\' not found', 404)),
    'cannot undeploy echo: deployment \'echo\' not found (HTTP 404)');
  assert.equal(failureText('cannot scale echo to 2', new ApiError('cannot reach the server: x', 0)),
    'cannot scale echo to 2: cannot reach the server: x');
});

const actionsSel = (name) => `[data-testid=deployment-actions][data-deployment="${name}"]`;

// Waits until the page shows `n` replica rows of `name`, all ready.
async function waitReadyRows(page, name, n, timeout = 90000) {
  await page.waitForFunction(([sel, want]) => {
    const rows = [...document.querySelectorAll(sel)];
    return rows.length === want && rows.every((r) => r.querySelector('[data-testid=replica-ready]')?.dataset.ready === 'true');
  }, [replicaSel(name), n], { timeout, polling: 100 }).catch(async (e) => {
    const shown = await page.$$eval(replicaSel(name), (rows) => rows.map((r) => r.textContent.replace(/\s+/g, ' ').trim()));
    throw new Error(`the page did not show ${n} ready replicas of ${name} (shows ${JSON.stringify(shown)}): ${e.message}`);
  });
}

test('an operator scales a deployment from 1 to 2 replicas and undeploys it from the page', { timeout: 240000 }, async (t) => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '2'];
  await withDashboard('models-actions', flags, async ({ drover, page }) => {
    const missing = await deploymentsMissing(drover);
    if (missing) {
      t.skip(missing);
      return;
    }
    await createDeployment(drover, { name: 'echo', replicas: 1, gpus: 1 });
    await openTab(page, 'models');
    await waitReadyRows(page, 'echo', 1);
    const actions = actionsSel('echo');
    await page.waitForSelector(`${actions} [data-testid=deployment-scale]`, { state: 'visible', timeout: 15000 });
    assert.equal(await page.inputValue(`${actions} [data-testid=deployment-scale-input]`), '1', 'the box shows the desired count');
    assert.equal(await page.isVisible(`${actions} [data-testid=deployment-autoscale]`), false, 'not auto-scaled');

    // Out of range: the server's message is shown, and nothing changes.
    await page.fill(`${actions} [data-testid=deployment-scale-input]`, '300');
    await page.click(`${actions} [data-testid=deployment-scale]`);
    const error = `${actions} [data-testid=deployment-action-error]`;
    await page.waitForSelector(error, { state: 'visible', timeout: 15000 });
    const said = await cellText(page, error);
    assert.match(said, /cannot scale echo to 300: .*outside 0\.\.256.*HTTP 400/, `the refusal is shown (it says: ${said})`);
    assert.equal(Number((await deployment(drover, 'echo')).status.desiredReplicas), 1, 'still 1 replica desired');
    await page.screenshot({ path: artifactPath('models-actions-error.png'), fullPage: true });

    // 1 -> 2: the second replica is placed on the other GPU and turns ready.
    await page.fill(`${actions} [data-testid=deployment-scale-input]`, '2');
    await page.click(`${actions} [data-testid=deployment-scale]`);
    await page.waitForSelector(error, { state: 'hidden', timeout: 15000 });
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.trim().endsWith('/2'),
      `${rowSel('echo')} [data-testid=deployment-replicas]`, { timeout: 15000, polling: 100 });
    await waitReadyRows(page, 'echo', 2);
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.trim() === '2/2',
      `${rowSel('echo')} [data-testid=deployment-replicas]`, { timeout: 30000, polling: 100 });
    const d = await deployment(drover, 'echo');
    assert.equal(Number(d.status.desiredReplicas), 2, 'the server has 2 replicas desired');
    assert.equal(d.status.replicas.filter((r) => r.ready).length, 2, 'the server has 2 ready replicas');
    assert.equal(await page.inputValue(`${actions} [data-testid=deployment-scale-input]`), '2');

    // Undeploy asks first; "Keep it" keeps it.
    await page.click(`${actions} [data-testid=deployment-undeploy]`);
    await page.waitForSelector(`${actions} [data-testid=deployment-undeploy-confirmation]`, { state: 'visible', timeout: 5000 });
    await page.click(`${actions} [data-testid=deployment-undeploy-cancel]`);
    await page.waitForSelector(`${actions} [data-testid=deployment-undeploy-confirmation]`, { state: 'hidden', timeout: 5000 });
    await waitPolls(page, 1);
    assert.equal((await drover.request('/api/v1/deployments/echo')).status, 200, 'kept');
    assert.equal(await page.locator(rowSel('echo')).count(), 1);

    await page.click(`${actions} [data-testid=deployment-undeploy]`);
    await page.click(`${actions} [data-testid=deployment-undeploy-confirm]`);
    await page.waitForSelector(rowSel('echo'), { state: 'detached', timeout: 15000 });
    await page.waitForSelector('[data-testid=models-empty]', { state: 'visible', timeout: 15000 });
    const gone = await drover.request('/api/v1/deployments/echo');
    assert.equal(gone.status, 404, `the server no longer has it: ${gone.text}`);
    // A later poll does not bring it back.
    await waitPolls(page, 2);
    assert.equal(await page.locator(rowSel('echo')).count(), 0);
    assert.equal(await page.isVisible('[data-testid=models-error]'), false);
  }, { readyNodes: 2, readyGpus: 2 });
});

test('only a token that may change a deployment gets its buttons; an auto-scaled one shows min and max', { timeout: 240000 }, async (t) => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '1'];
  await withDashboard('models-actions-roles', flags, async ({ drover, page }) => {
    const missing = await deploymentsMissing(drover);
    if (missing) {
      t.skip(missing);
      return;
    }
    await createDeployment(drover, { name: 'auto', replicas: 1, minReplicas: 1, maxReplicas: 3, gpus: 1 });
    const viewer = await drover.api('/api/v1/tokens', { method: 'POST', body: { name: 'vic', tenant: 'default', role: 'viewer' } });
    const user = await drover.api('/api/v1/tokens', { method: 'POST', body: { name: 'uma', tenant: 'default', role: 'user' } });

    // The admin: buttons, and the auto-scaling bounds next to the count.
    await openTab(page, 'models');
    const actions = actionsSel('auto');
    await page.waitForSelector(`${actions} [data-testid=deployment-autoscale]`, { state: 'visible', timeout: 30000 });
    assert.equal(await cellText(page, `${actions} [data-testid=deployment-autoscale]`), 'auto-scaled: min 1, max 3');

    // The viewer sees the deployment and no buttons; the server would refuse it (403).
    assert.equal((await loginWithToken(page, viewer.token)).role, 'viewer');
    await openTab(page, 'models');
    await page.waitForSelector(rowSel('auto'), { state: 'visible', timeout: 30000 });
    await waitPolls(page, 1);
    assert.equal(await page.locator('[data-testid=deployment-actions]').count(), 0, 'a viewer gets no actions');
    const refused = await drover.request('/api/v1/deployments/auto/scale',
      { method: 'POST', body: { replicas: 2 }, token: viewer.token });
    assert.equal(refused.status, 403, `a viewer may not scale: ${refused.text}`);

    // A user of the deployment's tenant may.
    assert.equal((await loginWithToken(page, user.token)).role, 'user');
    await openTab(page, 'models');
    await page.waitForSelector(`${actions} [data-testid=deployment-undeploy]`, { state: 'visible', timeout: 30000 });
  }, { readyNodes: 2, readyGpus: 1 });
});
