// The Jobs view: live job states, why a job waits, and cancel from the UI.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jobRowText, openTab, waitFor, waitForJobRowState, withDashboard } from './harness.mjs';

// Shows every job whatever the filters' defaults are.
async function showAllJobs(page) {
  await openTab(page, 'jobs');
  await page.selectOption('[data-testid=filter-state]', 'all');
  await page.fill('[data-testid=filter-tenant]', '');
}

async function waitForJobRow(page, id, timeout = 30000) {
  await page.waitForSelector(`[data-testid=job-row][data-job="${id}"]`, { state: 'attached', timeout })
    .catch((e) => {
      throw new Error(`job ${id} never appeared in the Jobs view: ${e.message}`);
    });
}

test('a job submitted with the CLI appears and then shows Succeeded', { timeout: 180000 }, async () => {
  const flags = ['--devices', 'none', '--simulate', '2', '--simulate-gpus', '2'];
  await withDashboard('job-succeeds', flags, async ({ drover, page }) => {
    await showAllJobs(page);
    // Submitted after the page is open: it must appear without a reload.
    const id = await drover.submit(['--gpus', '1', '--name', 'browser-sleep'], ['sleep', '3']);
    await waitForJobRow(page, id);
    // From here on the job's changes are pushed (/api/v1/watch): the page
    // does not list the jobs again while the job runs and ends.
    let lists = 0;
    page.on('request', (req) => {
      if (req.method() === 'GET' && new URL(req.url()).pathname === '/api/v1/jobs') lists++;
    });
    await waitForJobRowState(page, id, 'Succeeded', 60000);
    assert.equal(lists, 0, 'the job list was fetched again instead of pushed');
    const job = await drover.job(id);
    assert.equal(job.status.state, 'JOB_STATE_SUCCEEDED');
    assert.equal(await page.locator(`[data-testid=job-row][data-job="${id}"] [data-testid=job-cancel]`).count(), 0,
      'an ended job has no cancel button');

    // A gang's output, one replica at a time, from the row's Logs button.
    const gang = await drover.submit(['--replicas', '2', '--gpus', '1', '--name', 'browser-gang'],
      ['sh', '-c', 'echo replica $DROVER_REPLICA says hi']);
    await waitForJobRow(page, gang);
    await waitForJobRowState(page, gang, 'Succeeded', 60000);
    await page.click(`[data-testid=job-row][data-job="${gang}"] [data-testid=job-logs]`);
    const logText = () => page.textContent('[data-testid=log-text]');
    await waitFor(async () => (await logText()) === 'replica 0 says hi\n', { timeout: 10000 })
      .catch(async () => assert.fail(`replica 0's output is not shown: ${JSON.stringify(await logText())}`));
    await page.selectOption('[data-testid=log-replica]', '1');
    await waitFor(async () => (await logText()) === 'replica 1 says hi\n', { timeout: 10000 })
      .catch(async () => assert.fail(`replica 1's output is not shown: ${JSON.stringify(await logText())}`));
    assert.equal(await page.locator('[data-testid=log-replica] option').count(), 2, 'one choice per replica');
  }, { readyNodes: 3, readyGpus: 4 });
});

test('a pending job shows the scheduler\'s reason', { timeout: 180000 }, async () => {
  // One node with 2 GPUs: a 2-GPU job fills it, the next one must wait
  // (it fits the cluster, so the server accepts it).
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '2'];
  await withDashboard('pending-reason', flags, async ({ drover, page }) => {
    const running = await drover.submit(['--gpus', '2', '--name', 'browser-fill'], ['sleep', '600']);
    await drover.waitJobState(running, ['JOB_STATE_BOUND', 'JOB_STATE_RUNNING']);
    const waiting = await drover.submit(['--gpus', '2', '--name', 'browser-wait'], ['sleep', '600']);
    const pending = await drover.waitJobState(waiting, 'JOB_STATE_PENDING');
    assert.ok(pending.status.message, 'the API gives a reason for the pending job');

    await showAllJobs(page);
    await waitForJobRow(page, waiting);
    await waitForJobRowState(page, waiting, 'Pending', 30000);
    // The row shows the scheduler's reason as the API reports it now.
    let last = {};
    await waitFor(async () => {
      const squash = (s) => s.replace(/\s+/g, ' ').trim();
      const ui = squash(await jobRowText(page, waiting, '[data-testid=job-reason]'));
      const api = squash((await drover.job(waiting)).status.message ?? '');
      last = { ui, api };
      return ui !== '' && api !== '' && ui.includes(api);
    }, { timeout: 30000, what: 'the job-reason cell to show the API\'s status message' }).catch((e) => {
      throw new Error(`${e.message} (page: '${last.ui}', API: '${last.api}')`);
    });
    // The job that holds the GPUs runs on sim-1.
    await waitForJobRowState(page, running, 'Running', 30000);
    const where = await jobRowText(page, running, '[data-testid=job-where]');
    assert.match(where, /sim-1/, 'job-where names the node');
  }, { readyNodes: 2, readyGpus: 2 });
});

test('cancel from the UI cancels the job', { timeout: 180000 }, async () => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '2'];
  await withDashboard('cancel-from-ui', flags, async ({ drover, page }) => {
    const id = await drover.submit(['--gpus', '1', '--name', 'browser-cancel'], ['sleep', '600']);
    await drover.waitJobState(id, 'JOB_STATE_RUNNING');
    await showAllJobs(page);
    await waitForJobRow(page, id);
    await waitForJobRowState(page, id, 'Running', 30000);
    await page.click(`[data-testid=job-row][data-job="${id}"] [data-testid=job-cancel]`);
    await waitForJobRowState(page, id, 'Cancelled', 60000);
    const job = await drover.job(id);
    assert.equal(job.status.state, 'JOB_STATE_CANCELLED');
    assert.equal(await page.locator(`[data-testid=job-row][data-job="${id}"] [data-testid=job-cancel]`).count(), 0,
      'a cancelled job has no cancel button');
  }, { readyNodes: 2, readyGpus: 2 });
});
