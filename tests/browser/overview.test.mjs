// The overview shows as many nodes and GPUs as the API reports, in natural
// order of names, and a node's detail (GPU table, utilization chart).
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

    // The rows are in natural order of node names (sim-2 before sim-10),
    // the order the page's collator (heatmap.js) gives.
    const collator = new Intl.Collator('en', { numeric: true });
    const natural = nodes.map((n) => n.name).sort((a, b) => collator.compare(a, b));
    assert.deepEqual(rows, natural, 'heatmap rows in natural order of names');
    const sims = rows.filter((r) => /^sim-\d+$/.test(r));
    assert.deepEqual(sims, Array.from({ length: SIM_NODES }, (_, i) => `sim-${i + 1}`), 'sim-1, sim-2, ...');
    const names = await page.$$eval('[data-testid=node-name]', (els) => els.map((e) => e.getAttribute('data-node')));
    assert.deepEqual(names, rows, 'one node-name per row, in row order');

    // Clicking a GPU opens its detail with a chart.
    await page.click('[data-testid=gpu-cell]');
    await page.waitForSelector('[data-testid=gpu-detail] [data-testid=chart-gpu]', { state: 'visible', timeout: 15000 });

    // Clicking a node's name opens its detail: the node named, one row per
    // GPU the API lists for it, and a chart that gets history points. The
    // first node with GPUs (this machine's node has none with --devices none).
    const byName = new Map(nodes.map((n) => [n.name, n]));
    const target = rows.find((r) => (byName.get(r).gpus ?? []).length > 0);
    assert.ok(target, 'a node with GPUs');
    const wantGpus = byName.get(target).gpus.length;
    await page.click(`[data-testid=node-name][data-node="${target}"]`);
    await page.waitForSelector('[data-testid=node-detail]', { state: 'visible', timeout: 15000 });
    assert.equal(await page.getAttribute('[data-testid=node-detail]', 'data-node'), target);
    const title = await page.textContent('[data-testid=node-detail-title]');
    assert.ok(title.includes(target), `node detail title '${title}' names ${target}`);
    await page.waitForFunction((want) =>
      document.querySelectorAll('[data-testid=node-detail] [data-testid=node-gpu-row]').length === want,
    wantGpus, { timeout: 15000, polling: 100 });
    const gpuRows = await page.$$eval('[data-testid=node-detail] [data-testid=node-gpu-row]',
      (els) => els.map((e) => e.getAttribute('data-gpu')));
    assert.deepEqual(gpuRows, byName.get(target).gpus.map((g, i) => String(g.index ?? i)));
    assert.ok(await page.isHidden('[data-testid=gpu-detail]'), 'one detail panel at a time');
    const stateText = await page.textContent('[data-testid=node-detail] [data-testid=node-state]');
    assert.ok(stateText.trim().length > 0, 'the node state is shown');
    await page.waitForFunction(() => {
      const c = document.querySelector('[data-testid=node-detail] [data-testid=chart-node]');
      return c && Number(c.getAttribute('data-points')) > 0;
    }, null, { timeout: 30000, polling: 100 });

    // Its close button closes it.
    await page.click('[data-testid=node-detail-close]');
    await page.waitForSelector('[data-testid=node-detail]', { state: 'hidden', timeout: 15000 });
  }, { readyNodes: SIM_NODES + 1, readyGpus: SIM_NODES * SIM_GPUS });
});
