// The Scheduler tab's charts follow the live events.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fleetUpdates, openTab, waitForFleetUpdates, withDashboard } from './harness.mjs';

async function chartPoints(page, id) {
  return page.$eval(`[data-testid=${id}]`, (el) => Number(el.getAttribute('data-points') || 0));
}

test('the queue chart updates over time', { timeout: 180000 }, async () => {
  const flags = ['--devices', 'none', '--simulate', '1', '--simulate-gpus', '2'];
  await withDashboard('chart-updates', flags, async ({ drover, page }) => {
    await openTab(page, 'scheduler');
    await page.waitForSelector('[data-testid=chart-queue]', { state: 'visible', timeout: 15000 });
    await page.waitForSelector('[data-testid=chart-latency]', { state: 'visible', timeout: 15000 });
    // Some scheduling work, so that the queue and latency have something to show.
    await drover.submit(['--gpus', '1', '--name', 'browser-chart'], ['sleep', '600']);

    // The baseline is a chart drawn from at least one event, not an empty one.
    await waitForFleetUpdates(page, 1);
    await page.waitForSelector('[data-testid=chart-queue][data-points]', { state: 'attached', timeout: 15000 });
    const points0 = await chartPoints(page, 'chart-queue');
    const updates0 = await fleetUpdates(page);
    // Either more points, or (a full, sliding window) different points after
    // at least two more events.
    await page.waitForFunction(([p0, u0]) => {
      const chart = document.querySelector('[data-testid=chart-queue]');
      const last = document.querySelector('[data-testid=last-update]');
      const points = Number(chart?.getAttribute('data-points') || 0);
      const updates = Number(last?.getAttribute('data-updates') || 0);
      return points > p0 || (updates >= u0 + 2 && points !== p0);
    }, [points0, updates0], { timeout: 45000, polling: 100 }).catch(async (e) => {
      const now = { points: await chartPoints(page, 'chart-queue'), updates: await fleetUpdates(page) };
      throw new Error(`chart-queue did not change (started at ${points0} points, ${updates0} updates; ` +
        `now ${JSON.stringify(now)}): ${e.message}`);
    });
    assert.ok(await fleetUpdates(page) > 0, 'fleet events arrived');
    for (const id of ['decisions-per-second', 'queue-depth']) {
      const text = (await page.textContent(`[data-testid=${id}]`)).trim();
      assert.ok(text !== '', `${id} shows a value`);
    }
  }, { readyNodes: 2, readyGpus: 2 });
});
