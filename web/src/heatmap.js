// The nodes x GPUs heatmap.
//
// Built for large fleets (512 nodes x 8 GPUs = 4096 cells refreshed every
// 2 s): the DOM is built once per node set (same names and GPU counts, in
// order) and every later update only writes what changed, compared against
// per-cell caches rather than read back from the DOM. Colours come from a
// precomputed palette of 101 steps, so an unchanged cell costs one integer
// comparison and its (cheap) tooltip string.
//
// Invariants: cells[k], prevColor[k], prevFlags[k], prevTitle[k] describe the
// k-th GPU in node order; rowOf[k] is its row; signature names the node set
// the DOM was built for. Rows are in natural order of node names (sim-2
// before sim-10), whatever order the server sends.

import { bytes, el, enumLabel, fixed, num } from './format.js';

export const METRICS = {
  utilization: { label: 'utilization', min: '0%', max: '100%' },
  memory: { label: 'memory used', min: '0%', max: '100%' },
  temperature: { label: 'temperature', min: '20 °C', max: '95 °C' },
  power: { label: 'power of limit', min: '0%', max: '100%' },
};

// Dark blue (idle) -> teal -> green -> amber -> red (hot/full).
const STOPS = [
  [0.0, [30, 42, 72]],
  [0.3, [31, 111, 139]],
  [0.55, [46, 160, 67]],
  [0.8, [227, 179, 65]],
  [1.0, [248, 81, 73]],
];
export const PALETTE = Array.from({ length: 101 }, (_, i) => {
  const x = i / 100;
  let j = 1;
  while (j < STOPS.length - 1 && x > STOPS[j][0]) j++;
  const [x0, c0] = STOPS[j - 1];
  const [x1, c1] = STOPS[j];
  const t = (x - x0) / (x1 - x0);
  const c = c0.map((v, k) => Math.round(v + (c1[k] - v) * t));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
});
export const NO_DATA = 'rgb(58, 63, 75)';
const NO_DATA_INDEX = -1;

// The metric as a fraction 0..1, or -1 when the GPU does not report it.
export function metricFraction(gpu, metric) {
  switch (metric) {
    case 'memory': {
      const used = num(gpu.memoryUsedBytes);
      const total = num(gpu.memoryTotalBytes);
      return used >= 0 && total > 0 ? used / total : -1;
    }
    case 'temperature': {
      const t = num(gpu.temperatureC);
      return t >= 0 ? (t - 20) / 75 : -1;
    }
    case 'power': {
      const p = num(gpu.powerW);
      const limit = num(gpu.powerLimitW);
      return p >= 0 && limit > 0 ? p / limit : -1;
    }
    default: {
      const u = num(gpu.utilizationPct);
      return u >= 0 ? u / 100 : -1;
    }
  }
}

// Natural order: digit runs compare as numbers. Shared with the browser test.
export const NODE_COLLATOR = new Intl.Collator('en', { numeric: true });

function colorIndex(fraction) {
  if (fraction < 0 || !Number.isFinite(fraction)) return NO_DATA_INDEX;
  return Math.round(Math.min(1, fraction) * 100);
}

export function gpuTooltip(nodeName, index, gpu) {
  const used = num(gpu.memoryUsedBytes);
  const total = num(gpu.memoryTotalBytes);
  const memPct = used >= 0 && total > 0 ? ` (${((100 * used) / total).toFixed(0)}%)` : '';
  const limit = num(gpu.powerLimitW);
  const lines = [
    `${nodeName} GPU ${index}${gpu.model ? ` · ${gpu.model}` : ''}`,
    `utilization ${fixed(gpu.utilizationPct, 0, '%')}`,
    `memory ${bytes(used)} / ${bytes(total)}${memPct}`,
    `temperature ${fixed(gpu.temperatureC, 0, ' °C')}`,
    `power ${fixed(gpu.powerW, 0, ' W')}${limit > 0 ? ` / ${limit.toFixed(0)} W` : ''}`,
    gpu.jobId ? `job ${gpu.jobId}` : 'free',
  ];
  if (!gpu.healthy) lines.push(`UNHEALTHY: ${gpu.healthReason || 'no reason given'}`);
  return lines.join('\n');
}

export class Heatmap {
  // onSelect(node, gpuIndex): a GPU cell was clicked; onSelectNode(node): a
  // node's name was.
  constructor(container, { onSelect, onSelectNode }) {
    this.container = container;
    this.signature = null;
    this.cells = [];
    this.rows = [];
    this.rowOf = [];
    this.prevColor = new Int16Array(0);
    this.prevFlags = new Uint8Array(0);
    this.prevTitle = [];
    this.prevRowFlags = [];
    this.selected = null;
    this.lastMetric = null;
    this.order = null;  // names in natural order, for the cached sort below
    container.addEventListener('click', (ev) => {
      const name = ev.target.closest('[data-testid="node-name"]');
      if (name) {
        if (onSelectNode) onSelectNode(name.dataset.node);
        return;
      }
      const cell = ev.target.closest('[data-testid="gpu-cell"]');
      if (cell) onSelect(cell.dataset.node, Number(cell.dataset.gpu));
    });
  }

  // `nodes` sorted by name in natural order. The order of the previous call
  // is reused while the server sends the same names in the same order, so a
  // steady fleet costs one pass over the names, not a sort.
  sorted(nodes) {
    const key = nodes.map((n) => n.name).join('\n');
    if (!this.order || this.order.key !== key) {
      const perm = nodes.map((_, i) => i).sort((a, b) => NODE_COLLATOR.compare(nodes[a].name, nodes[b].name));
      this.order = { key, perm };
    }
    return this.order.perm.map((i) => nodes[i]);
  }

  // Draws `nodes` (Fleet.nodes) coloured by `metric`.
  update(unsorted, metric) {
    const nodes = this.sorted(unsorted);
    const signature = nodes.map((n) => `${n.name}:${(n.gpus || []).length}`).join('|');
    if (signature !== this.signature) this.rebuild(nodes, signature);
    const force = metric !== this.lastMetric;
    this.lastMetric = metric;
    let k = 0;
    for (let r = 0; r < nodes.length; r++) {
      const node = nodes[r];
      const rowFlags = (node.state === 'NODE_STATE_READY' ? 0 : 1) | (node.drained ? 2 : 0);
      if (rowFlags !== this.prevRowFlags[r]) {
        const row = this.rows[r];
        row.classList.toggle('not-ready', (rowFlags & 1) !== 0);
        row.classList.toggle('drained', (rowFlags & 2) !== 0);
        row.title = `${node.name}: ${enumLabel(node.state, 'NODE_STATE_')}${node.drained ? ', drained' : ''}`;
        this.prevRowFlags[r] = rowFlags;
      }
      const gpus = node.gpus || [];
      for (let i = 0; i < gpus.length; i++, k++) {
        const gpu = gpus[i];
        const cell = this.cells[k];
        const ci = colorIndex(metricFraction(gpu, metric));
        if (force || ci !== this.prevColor[k]) {
          cell.style.backgroundColor = ci === NO_DATA_INDEX ? NO_DATA : PALETTE[ci];
          this.prevColor[k] = ci;
        }
        const flags = (gpu.healthy ? 0 : 1) | (gpu.jobId ? 2 : 0) | (ci === NO_DATA_INDEX ? 4 : 0);
        const changed = flags ^ this.prevFlags[k];
        if (changed) {
          if (changed & 1) {
            cell.classList.toggle('unhealthy', (flags & 1) !== 0);
            cell.setAttribute('data-healthy', flags & 1 ? 'false' : 'true');
          }
          if (changed & 2) cell.classList.toggle('busy', (flags & 2) !== 0);
          if (changed & 4) cell.classList.toggle('no-data', (flags & 4) !== 0);
          this.prevFlags[k] = flags;
        }
        const title = gpuTooltip(node.name, i, gpu);
        if (title !== this.prevTitle[k]) {
          cell.title = title;
          this.prevTitle[k] = title;
        }
      }
    }
  }

  rebuild(nodes, signature) {
    const fragment = document.createDocumentFragment();
    this.cells = [];
    this.rows = [];
    this.rowOf = [];
    this.prevTitle = [];
    this.prevRowFlags = nodes.map(() => -1);
    for (let r = 0; r < nodes.length; r++) {
      const node = nodes[r];
      const cells = el('div', { class: 'cells' });
      const gpus = node.gpus || [];
      for (let i = 0; i < gpus.length; i++) {
        const cell = el('div', {
          class: 'gpu-cell',
          'data-testid': 'gpu-cell',
          'data-node': node.name,
          'data-gpu': i,
          'data-healthy': 'true',
        });
        this.cells.push(cell);
        this.rowOf.push(r);
        this.prevTitle.push('');
        cells.append(cell);
      }
      const row = el('div', { class: 'node-row', 'data-testid': 'node-row', 'data-node': node.name },
        el('button', {
          type: 'button', class: 'node-name', 'data-testid': 'node-name', 'data-node': node.name,
          title: `${node.name}: show the node`, text: node.name,
        }), cells);
      this.rows.push(row);
      fragment.append(row);
    }
    // -1 / 0xff: "unknown", so the first update writes every cell.
    this.prevColor = new Int16Array(this.cells.length).fill(-2);
    this.prevFlags = new Uint8Array(this.cells.length);
    // Cells start healthy (data-healthy="true", flags 0) and without classes.
    this.container.replaceChildren(fragment);
    this.signature = signature;
    if (this.selected) this.select(this.selected.node, this.selected.index);
  }

  select(nodeName, index) {
    for (const c of this.container.querySelectorAll('.gpu-cell.selected')) c.classList.remove('selected');
    this.selected = nodeName === null ? null : { node: nodeName, index };
    if (!this.selected) return;
    const cell = this.container.querySelector(
      `[data-testid="gpu-cell"][data-node="${CSS.escape(nodeName)}"][data-gpu="${index}"]`);
    if (cell) cell.classList.add('selected');
  }
}
