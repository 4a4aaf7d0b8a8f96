// The Scheduler tab: decision rate, queue depth over time (the server's
// history plus the points seen live since) and the decision latency
// histogram.

import { TimeChart } from './charts.js';
import { el, num, setAttr, setText } from './format.js';

const $ = (id) => document.getElementById(id);
const q = (testid) => document.querySelector(`[data-testid="${testid}"]`);
const LIVE_WINDOW_S = 3600;

// Short enough for a bar label: 0.00025 -> "250 µs", 0.004096 -> "4.1 ms",
// 0.032768 -> "33 ms", 2 -> "2 s".
export function seconds(v) {
  const s = num(v);
  const short = (x) => (x >= 10 ? x.toFixed(0) : String(+x.toPrecision(2)));
  if (s < 1e-3) return `${short(s * 1e6)} µs`;
  if (s < 1) return `${short(s * 1e3)} ms`;
  return `${short(s)} s`;
}

// The upper bound of the bucket holding quantile `p` of the decisions.
function quantile(buckets, p) {
  const total = buckets.reduce((s, b) => s + num(b.count), 0);
  if (!total) return null;
  let seen = 0;
  for (const b of buckets) {
    seen += num(b.count);
    if (seen >= p * total) return b.inf ? '> last bound' : `≤${seconds(b.leSeconds)}`;
  }
  return null;
}

export class Scheduler {
  constructor() {
    this.live = [];  // [{t (s), depth, running}] received since the page loaded
    this.running = 0;
    this.fleetTimeS = 0;
    this.bars = [];
    this.barsKey = '';
    this.queueChart = new TimeChart($('chart-queue'), {
      series: [
        { label: 'queue depth', stroke: '#f0883e', fill: 'rgba(240, 136, 62, 0.12)', scale: 'n' },
        { label: 'running', stroke: '#58a6ff', scale: 'n' },
      ],
      axes: [{ scale: 'n', side: 3, label: 'jobs', incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000] }],
      scales: { n: { range: (u, min, max) => [0, Math.max(4, Math.ceil(max * 1.1))] } },
      height: 240,
    });
  }

  // Fleet events carry the running count and the server's clock.
  noteFleet(fleet) {
    this.running = num((fleet.jobs || {}).Running);
    this.fleetTimeS = num(fleet.timeUnixNanos) / 1e9;
  }

  render(stats) {
    setText(q('decisions-per-second'), num(stats.decisionsPerSecond).toFixed(1));
    setText(q('queue-depth'), String(num(stats.queueDepth)));
    setText($('decisions-total'), String(num(stats.decisionsTotal)));
    setText($('preemptions-total'), String(num(stats.preemptionsTotal)));
    this.renderQueue(stats);
    this.renderLatency(stats.decisionLatency || []);
  }

  renderQueue(stats) {
    const t = this.fleetTimeS > 0 ? this.fleetTimeS : Date.now() / 1000;
    const last = this.live[this.live.length - 1];
    if (!last || t > last.t) this.live.push({ t, depth: num(stats.queueDepth), running: this.running });
    while (this.live.length && this.live[0].t < t - LIVE_WINDOW_S) this.live.shift();

    // The server's history (every 5 s) merged by time with the points seen
    // live (every event), so the line grows with each event.
    const points = [];
    for (const p of stats.queueHistory || []) {
      points.push({ t: num(p.timeUnixNanos) / 1e9, depth: num(p.depth), running: num(p.running) });
    }
    points.push(...this.live);
    points.sort((a, b) => a.t - b.t);
    const xs = [];
    const depth = [];
    const running = [];
    for (const p of points) {
      if (xs.length && p.t <= xs[xs.length - 1]) continue;  // x strictly increasing
      xs.push(p.t);
      depth.push(p.depth);
      running.push(p.running);
    }
    this.queueChart.setData([xs, depth, running]);
  }

  renderLatency(buckets) {
    const container = $('chart-latency');
    const key = buckets.map((b) => (b.inf ? 'inf' : String(b.leSeconds))).join('|');
    if (key !== this.barsKey) {
      this.bars = buckets.map((b, i) => {
        const label = b.inf ? `>${buckets.length > 1 ? seconds(buckets[i - 1].leSeconds) : '0'}` : `≤${seconds(b.leSeconds)}`;
        const fill = el('div', { class: 'bar-fill' });
        const count = el('div', { class: 'bar-count' });
        const bar = el('div', { class: 'bar', 'data-testid': 'latency-bar' },
          count, el('div', { class: 'bar-track' }, fill), el('div', { class: 'bar-label' }, label));
        return { bar, fill, count, label };
      });
      container.replaceChildren(...this.bars.map((b) => b.bar));
      if (!buckets.length) container.append(el('div', { class: 'empty' }, 'No decisions yet.'));
      this.barsKey = key;
    }
    const max = Math.max(1, ...buckets.map((b) => num(b.count)));
    const total = buckets.reduce((s, b) => s + num(b.count), 0);
    buckets.forEach((b, i) => {
      const n = num(b.count);
      const bar = this.bars[i];
      bar.fill.style.height = `${((100 * n) / max).toFixed(1)}%`;
      setText(bar.count, n ? String(n) : '');
      setAttr(bar.bar, 'title', `${bar.label}: ${n} decisions (${total ? ((100 * n) / total).toFixed(1) : 0}%)`);
    });
    container.setAttribute('data-points', String(buckets.length));
    const p50 = quantile(buckets, 0.5);
    const p99 = quantile(buckets, 0.99);
    setText($('latency-sub'), total ? `${total} decisions · p50 ${p50} · p99 ${p99}` : '');
  }
}
