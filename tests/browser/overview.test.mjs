// The overview shows as many nodes and GPUs as the API reports.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { withDashboard } from './harness.mjs';

const SIM_NODES = 3;
const SIM_GPUS = 4;

test('overview shows the nodes and GPUs of GET /api/v1/nodes', { timeout: 180000 }, async () => {
  const flags = ['--devices', 'none', '--simulate', String(SIM_NODES), '--simulate-gpus', String(SIM_GPUS)];
  // This machine's node (no GPUs with --devices none) plus the simulated ones.
  await withDashboard('overview-counts', flags, async ({ drover, page }) => {
    const nodes = await drover.nodes();
    assert.equal(nodes.length, SIM_NODES + 1, 'the local node and the simulated nodes');
    const expected = new Set();
    for (const n of nodes) for (const g of n.gpus ?? []) expected.add(`${n.name}/${g.index ?? 0}`);
    assert.equal(expected.size, SIM_NODES * SIM_GPUS, 'GPUs reported by the API');

    // The page shows what the API reports once the first fleet event is in.
    await page.waitForFunction(([wantNodes, wantGpus]) => {
      const text = (id) => document.querySelector(`[data-testid=${id}]`)?.textContent.trim();
      return text('total-nodes') === String(wantNodes) && text('total-gpus') === String(wantGpus) &&
        document.querySelectorAll('[data-testid=node-row]').length === wantNodes &&
        document.querySelectorAll('[data-testid=gpu-cell]').length === wantGpus;
    }, [nodes.length, expected.size], { timeout: 30000, polling: 100 }).catch(async (e) => {
      const seen = await page.evaluate(() => ({
        totalNodes: document.querySelector('[data-testid=total-nodes]')?.textContent,
        totalGpus: document.querySelector('[data-testid=total-gpus]')?.textContent,
        rows: document.querySelectorAll('[data-testid=node-row]').length,
        cells: document.querySelectorAll('[data-testid=gpu-cell]').length,
      }));
      throw new Error(`overview does not match the API (${nodes.length} nodes, ${expected.size} GPUs): ` +
        `page shows ${JSON.stringify(seen)}: ${e.message}`);
    });

    // One row per node and one cell per (node, GPU index) the API lists.
    const rows = await page.$$eval('[data-testid=node-row]', (els) => els.map((e) => e.getAttribute('data-node')));
    assert.deepEqual(new Set(rows), new Set(nodes.map((n) => n.name)));
    const cells = await page.$$eval('[data-testid=gpu-cell]',
      (els) => els.map((e) => `${e.getAttribute('data-node')}/${e.getAttribute('data-gpu')}`));
    assert.deepEqual(new Set(cells), expected);
    const healthy = await page.$$eval('[data-testid=gpu-cell]', (els) => els.map((e) => e.getAttribute('data-healthy')));
    for (const h of healthy) assert.ok(h === 'true' || h === 'false', `data-healthy is '${h}'`);
    const totalHealthy = await page.textContent('[data-testid=total-healthy-gpus]');
    assert.equal(Number.parseInt(totalHealthy.trim(), 10), healthy.filter((h) => h === 'true').length,
      'total-healthy-gpus counts the cells marked healthy');

    // Clicking a GPU opens its detail with a chart.
    await page.click('[data-testid=gpu-cell]');
    await page.waitForSelector('[data-testid=gpu-detail] [data-testid=chart-gpu]', { state: 'visible', timeout: 15000 });
  }, { readyNodes: SIM_NODES + 1, readyGpus: SIM_NODES * SIM_GPUS });
});
