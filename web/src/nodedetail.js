// The detail of one node: state, conditions, topology, labels, a table of
// its GPUs (GET /api/v1/nodes/{name}) and one utilization line per GPU over
// time (GET /api/v1/nodes/{name}/gpus/{i}/history, fetched in parallel).
// Refreshed on every fleet event while open.

import { api } from './api.js';
import { TimeChart } from './charts.js';
import { el, enumLabel, num, setText } from './format.js';

const $ = (id) => document.getElementById(id);

const COLORS = ['#58a6ff', '#3fb950', '#f0883e', '#a371f7', '#f778ba', '#e3b341', '#39c5cf', '#ff7b72'];

// A telemetry value, which is absent (or -1) when the GPU does not report it.
function reading(v, digits, unit) {
  if (v === undefined || v === null) return 'n/a';
  const n = num(v);
  return n >= 0 && Number.isFinite(n) ? `${n.toFixed(digits)}${unit}` : 'n/a';
}

function conditionText(c) {
  const ok = c.status === true;
  const text = ok ? c.type : `${c.type}=False${c.message ? ` (${c.message})` : ''}`;
  return [text, ok ? 'good' : 'bad'];
}

function topologyText(t) {
  if (!t) return 'unknown';
  const parts = [
    `${num(t.sockets)} socket${num(t.sockets) === 1 ? '' : 's'}`,
    `${num(t.numaNodes)} NUMA node${num(t.numaNodes) === 1 ? '' : 's'}`,
    `${num(t.cores)} cores`,
  ];
  const nics = t.nics || [];
  parts.push(nics.length
    ? `NICs: ${nics.map((n) => `${n.name || '?'}${n.numaNode !== undefined ? ` (NUMA ${num(n.numaNode)})` : ''}`).join(', ')}`
    : 'no NICs');
  return parts.join(', ');
}

// Merges per-GPU histories onto one time axis (the union of their sample
// times); a GPU without a sample at some time gets null there.
export function mergeHistories(histories) {
  const times = new Set();
  for (const points of histories) for (const p of points) times.add(num(p.timeUnixNanos));
  const xs = [...times].sort((a, b) => a - b);
  const at = new Map(xs.map((t, i) => [t, i]));
  const series = histories.map((points) => {
    const ys = new Array(xs.length).fill(null);
    for (const p of points) {
      if (p.utilizationPct === undefined || p.utilizationPct === null) continue;
      const u = num(p.utilizationPct);
      if (u >= 0 && Number.isFinite(u)) ys[at.get(num(p.timeUnixNanos))] = u;
    }
    return ys;
  });
  return [xs.map((t) => t / 1e9), ...series];
}

export class NodeDetail {
  constructor() {
    this.name = null;
    this.generation = 0;  // bumped on open/close; stale answers are dropped
    this.inFlight = false;
    this.wanted = false;
    this.chart = null;
    this.chartGpus = -1;
    $('node-detail-close').addEventListener('click', () => this.close());
  }

  isOpen() {
    return this.name !== null;
  }

  open(name) {
    this.name = name;
    this.generation++;
    const panel = $('node-detail');
    panel.hidden = false;
    panel.setAttribute('data-node', name);
    setText($('node-detail-title'), `Node ${name}`);
    $('node-detail-facts').replaceChildren();
    $('node-detail-gpus').replaceChildren();
    $('node-detail-error').hidden = true;
    $('node-detail-no-gpus').hidden = true;
    if (this.chart) this.chart.setData([[], ...new Array(this.chartGpus).fill([])]);
    this.refresh();
    panel.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  }

  close() {
    if (this.name === null) return;
    this.name = null;
    this.generation++;
    $('node-detail').hidden = true;
    $('node-detail').removeAttribute('data-node');
  }

  // One refresh at a time; a call meanwhile asks for one more afterwards.
  async refresh() {
    if (this.name === null) return;
    if (this.inFlight) {
      this.wanted = true;
      return;
    }
    this.inFlight = true;
    const name = this.name;
    const generation = this.generation;
    const base = `/api/v1/nodes/${encodeURIComponent(name)}`;
    try {
      const node = await api(base);
      if (generation !== this.generation) return;
      this.renderNode(node);
      const gpus = node.gpus || [];
      const histories = await Promise.all(gpus.map((g, i) =>
        api(`${base}/gpus/${g.index ?? i}/history`).then((h) => (h && h.points) || [])));
      if (generation !== this.generation) return;
      $('node-detail-error').hidden = true;
      this.drawChart(gpus, histories);
    } catch (err) {
      if (generation === this.generation) {
        setText($('node-detail-error'), `node ${name}: ${err.message}`);
        $('node-detail-error').hidden = false;
      }
    } finally {
      this.inFlight = false;
      if (this.wanted) {
        this.wanted = false;
        this.refresh();
      }
    }
  }

  renderNode(node) {
    const labels = Object.entries(node.labels || {}).sort(([a], [b]) => a.localeCompare(b));
    const conditions = node.conditions || [];
    const find = (type) => conditions.find((c) => c.type === type);
    const facts = [
      ['State', `${enumLabel(node.state, 'NODE_STATE_')}${node.drained ? ', drained' : ''}`,
        node.state === 'NODE_STATE_READY' ? 'good' : 'bad', 'node-state'],
    ];
    for (const type of ['Ready', 'GpusHealthy']) {
      const c = find(type);
      if (c) facts.push([type, ...conditionText(c), `node-condition-${type}`]);
    }
    for (const c of conditions) {
      if (c.type !== 'Ready' && c.type !== 'GpusHealthy') facts.push([c.type, ...conditionText(c)]);
    }
    facts.push(['Topology', topologyText(node.topology), undefined, 'node-topology']);
    const labelsDd = labels.length
      ? el('dd', { class: 'labels', 'data-testid': 'node-labels' },
        ...labels.map(([k, v]) => el('span', { class: 'label' }, `${k}=${v}`)))
      : el('dd', { 'data-testid': 'node-labels' }, 'none');
    $('node-detail-facts').replaceChildren(
      ...facts.map(([k, v, cls, testid]) => el('div', { class: 'fact' }, el('dt', {}, k),
        el('dd', { class: cls, 'data-testid': testid }, v))),
      el('div', { class: 'fact' }, el('dt', {}, 'Labels'), labelsDd),
    );

    const gpus = node.gpus || [];
    $('node-detail-no-gpus').hidden = gpus.length > 0;
    $('node-detail-gpus').replaceChildren(...gpus.map((g, i) => {
      const t = g.telemetry || {};
      const unhealthy = g.health === 'GPU_HEALTH_UNHEALTHY';
      const health = unhealthy
        ? `Unhealthy: ${g.healthReason || 'no reason given'}`
        : enumLabel(g.health, 'GPU_HEALTH_');
      const limit = t.powerLimitW !== undefined && num(t.powerLimitW) > 0 ? ` / ${num(t.powerLimitW).toFixed(0)} W` : '';
      const index = g.index ?? i;
      return el('tr', { 'data-testid': 'node-gpu-row', 'data-gpu': index },
        el('td', { class: 'num' }, String(index)),
        el('td', {}, g.model || 'unknown'),
        el('td', { class: unhealthy ? 'bad' : 'good' }, health),
        el('td', {}, g.jobId || 'free'),
        el('td', { class: 'num' }, reading(t.utilizationPct, 0, '%')),
        el('td', { class: 'num' }, reading(t.temperatureC, 0, ' °C')),
        el('td', { class: 'num' }, `${reading(t.powerW, 0, ' W')}${limit}`));
    }));
  }

  drawChart(gpus, histories) {
    // One line per GPU: a different GPU count needs a new plot.
    if (!this.chart || this.chartGpus !== gpus.length) {
      if (this.chart) this.chart.destroy();
      this.chart = new TimeChart($('chart-node'), {
        series: gpus.map((g, i) => ({
          label: `GPU ${g.index ?? i}`,
          stroke: COLORS[i % COLORS.length],
          scale: '%',
          unit: '%',
          spanGaps: true,  // GPUs sampled at different times leave nulls between
        })),
        axes: [{ scale: '%', side: 3, label: 'utilization %' }],
        scales: { '%': { range: [0, 100] } },
      });
      this.chartGpus = gpus.length;
    }
    this.chart.setData(mergeHistories(histories));
  }
}
