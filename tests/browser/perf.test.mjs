// Performance of the overview on a large simulated fleet. It measures and
// records (stdout and <ARTIFACTS>/perf.json); it asserts only that every GPU
// has a cell and that live updates happened, never a timing.
//
// DROVER_PERF_NODES x DROVER_PERF_GPUS simulated GPUs (default 512 x 8 =
// 4096, the size issue 6 names).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { artifactPath, fleetUpdates, waitForFleetUpdates, withDashboard } from './harness.mjs';

const NODES = Number(process.env.DROVER_PERF_NODES || 512);
const GPUS = Number(process.env.DROVER_PERF_GPUS || 8);
const READY_TIMEOUT_MS = 1000 * Number(process.env.DROVER_PERF_READY_TIMEOUT_S || 180);
const UPDATES = 5;

test(`overview with ${NODES} x ${GPUS} simulated GPUs`, { timeout: READY_TIMEOUT_MS + 240000 }, async () => {
  const flags = ['--devices', 'none', '--simulate', String(NODES), '--simulate-gpus', String(GPUS)];
  const report = { nodes: NODES, gpusPerNode: GPUS, cells: NODES * GPUS, timings: {} };
  try {
    await withDashboard('perf-overview', flags, async ({ drover, page }) => {
      const nodes = await drover.nodes();
      const gpus = nodes.reduce((s, n) => s + (n.gpus?.length ?? 0), 0);
      assert.equal(gpus, NODES * GPUS, 'GPUs reported by the API');

      // The page was opened once every node was ready: time to a full heatmap.
      const tPage = Date.now();
      await page.waitForFunction((want) => document.querySelectorAll('[data-testid=gpu-cell]').length === want,
        gpus, { timeout: 60000, polling: 100 }).catch(async (e) => {
        const cells = await page.locator('[data-testid=gpu-cell]').count();
        throw new Error(`the overview shows ${cells} GPU cells, not ${gpus}: ${e.message}`);
      });
      report.firstFullHeatmapMs = Date.now() - tPage;
      // Chromium's counters (layouts, script time) over the updates measured.
      const cdp = await page.context().newCDPSession(page);
      await cdp.send('Performance.enable');
      const updates0 = await fleetUpdates(page);
      await waitForFleetUpdates(page, updates0 + UPDATES, 60000);
      report.updatesObserved = (await fleetUpdates(page)) - updates0;
      assert.ok(report.updatesObserved >= UPDATES, 'fleet updates arrived');
      assert.equal(await page.locator('[data-testid=gpu-cell]').count(), gpus, 'every GPU still has a cell');

      report.droverStats = await page.evaluate(() => window.__droverStats ?? null);
      report.performanceMemory = await page.evaluate(() => (performance.memory
        ? { usedJSHeapSize: performance.memory.usedJSHeapSize, totalJSHeapSize: performance.memory.totalJSHeapSize }
        : null));
      const { metrics } = await cdp.send('Performance.getMetrics');
      const m = Object.fromEntries(metrics.map((x) => [x.name, x.value]));
      // Over the updates observed (Performance.enable started the counters).
      report.cdp = { JSHeapUsedSize: m.JSHeapUsedSize, JSHeapTotalSize: m.JSHeapTotalSize, Nodes: m.Nodes,
        LayoutCount: m.LayoutCount, RecalcStyleCount: m.RecalcStyleCount, ScriptDuration: m.ScriptDuration,
        LayoutDuration: m.LayoutDuration, TaskDuration: m.TaskDuration };
      await cdp.detach();
    }, { readyNodes: NODES + 1, readyGpus: NODES * GPUS, upTimeout: READY_TIMEOUT_MS, timings: report.timings });
  } finally {
    // Whatever was measured, also when an assertion failed.
    fs.writeFileSync(artifactPath('perf.json'), `${JSON.stringify(report, null, 2)}\n`);
    console.log(`perf: ${JSON.stringify(report)}`);
  }
});
