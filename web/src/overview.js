// The Overview tab: fleet totals, the GPU heatmap and the detail of one GPU
// or of one node (nodedetail.js); one detail panel at a time.

import { api } from './api.js';
import { TimeChart } from './charts.js';
import { bytes, el, enumLabel, fixed, num, setText } from './format.js';
import { Heatmap, METRICS, NO_DATA, PALETTE } from './heatmap.js';
import { NodeDetail } from './nodedetail.js';

const $ = (id) => document.getElementById(id);
const q = (testid) => document.querySelector(`[data-testid="${testid}"]`);

export class Overview {
  constructor() {
    this.fleet = null;
    this.metric = 'utilization';
    this.heatmap = new Heatmap($('heatmap'), {
      onSelect: (n, i) => this.openDetail(n, i),
      onSelectNode: (n) => this.openNode(n),
    });
    this.nodeDetail = new NodeDetail();
    this.detail = null;  // {node, index}
    this.chart = null;
    this.historyInFlight = false;
    this.historyWanted = false;
    this.heatmapStale = false;

    const select = $('metric-select');
    select.value = this.metric;
    select.addEventListener('change', () => {
      this.metric = select.value in METRICS ? select.value : 'utilization';
      this.drawLegend();
      if (this.fleet) this.heatmap.update(this.fleet.nodes || [], this.metric);
    });
    $('gpu-detail-close').addEventListener('click', () => this.closeDetail());
    document.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape' && this.detail) this.closeDetail();
      if (ev.key === 'Escape') this.nodeDetail.close();
    });
    this.drawLegend();
  }

  drawLegend() {
    const m = METRICS[this.metric];
    const stops = [0, 25, 50, 75, 100].map((i) => PALETTE[i]).join(', ');
    $('legend').replaceChildren(
      el('span', { class: 'key' }, m.min),
      el('span', { class: 'gradient', style: `background: linear-gradient(to right, ${stops})` }),
      el('span', { class: 'key' }, m.max),
      el('span', { class: 'key' }, el('span', { class: 'swatch', style: `background: ${NO_DATA}` }), 'no data'),
      el('span', { class: 'key' }, el('span', { class: 'swatch unhealthy-swatch' }), 'unhealthy'),
      el('span', { class: 'key' }, el('span', { class: 'swatch busy-swatch' }), 'has a job'),
      el('span', { class: 'key' }, el('span', { class: 'swatch dim-swatch' }), 'node not ready'),
    );
  }

  // Called on every fleet event (and the initial fetch).
  render(fleet) {
    this.fleet = fleet;
    const nodes = fleet.nodes || [];
    let gpus = 0;
    let healthy = 0;
    let busy = 0;
    let utilSum = 0;
    let utilN = 0;
    let ready = 0;
    let drained = 0;
    for (const n of nodes) {
      if (n.state === 'NODE_STATE_READY') ready++;
      if (n.drained) drained++;
      for (const g of n.gpus || []) {
        gpus++;
        if (g.healthy) healthy++;
        if (g.jobId) busy++;
        const u = num(g.utilizationPct);
        if (u >= 0) {
          utilSum += u;
          utilN++;
        }
      }
    }
    setText(q('total-nodes'), String(nodes.length));
    setText($('nodes-sub'), `${ready} ready${drained ? `, ${drained} drained` : ''}`);
    setText(q('total-gpus'), String(gpus));
    setText($('gpus-sub'), `${busy} with jobs, ${gpus - busy} free`);
    setText(q('total-healthy-gpus'), String(healthy));
    setText($('healthy-sub'), gpus - healthy ? `${gpus - healthy} unhealthy` : 'all healthy');
    $('healthy-sub').classList.toggle('bad', gpus - healthy > 0);
    setText($('mean-util'), utilN ? `${(utilSum / utilN).toFixed(0)}%` : 'n/a');
    setText($('util-sub'), `over ${utilN} reporting GPUs`);

    const jobs = fleet.jobs || {};
    setText($('jobs-running'), `${num(jobs.Running)} running`);
    const others = Object.entries(jobs)
      .filter(([k, v]) => k !== 'Running' && num(v) > 0)
      .map(([k, v]) => `${num(v)} ${k.toLowerCase()}`);
    setText($('jobs-sub'), others.join(', ') || 'nothing else');
    setText($('overview-queue'), String(num(fleet.queueDepth)));

    $('heatmap-empty').hidden = nodes.length > 0;
    // The heatmap is most of the cost; behind another tab it waits for show().
    this.heatmapStale = $('view-overview').hidden;
    if (!this.heatmapStale) this.heatmap.update(nodes, this.metric);
    if (this.detail && !this.heatmapStale) {
      this.renderFacts();
      this.refreshHistory();
    }
    if (!this.heatmapStale) this.nodeDetail.refresh();
  }

  // The tab became visible: catch up with the latest fleet.
  show() {
    if (this.heatmapStale && this.fleet) {
      this.heatmapStale = false;
      this.heatmap.update(this.fleet.nodes || [], this.metric);
      if (this.detail) {
        this.renderFacts();
        this.refreshHistory();
      }
      this.nodeDetail.refresh();
    }
  }

  openNode(name) {
    if (this.detail) this.closeDetail();
    this.nodeDetail.open(name);
  }

  findGpu() {
    if (!this.fleet || !this.detail) return null;
    const node = (this.fleet.nodes || []).find((n) => n.name === this.detail.node);
    if (!node) return null;
    const gpu = (node.gpus || [])[this.detail.index];
    return gpu ? { node, gpu } : null;
  }

  openDetail(nodeName, index) {
    this.nodeDetail.close();
    this.detail = { node: nodeName, index };
    this.heatmap.select(nodeName, index);
    const panel = $('gpu-detail');
    panel.hidden = false;
    setText($('gpu-detail-title'), `${nodeName} · GPU ${index}`);
    if (!this.chart) {
      this.chart = new TimeChart($('chart-gpu'), {
        series: [
          { label: 'utilization', stroke: '#58a6ff', scale: '%', unit: '%' },
          { label: 'memory used', stroke: '#a371f7', scale: '%', unit: '%' },
          { label: 'temperature', stroke: '#f0883e', scale: '%', unit: ' °C' },
          { label: 'power', stroke: '#3fb950', scale: 'W', unit: ' W' },
        ],
        axes: [
          { scale: '%', side: 3, label: '% / °C' },
          { scale: 'W', side: 1, label: 'W' },
        ],
        scales: { '%': { range: [0, 100] }, W: { range: (u, min, max) => [0, Math.max(100, max * 1.1)] } },
      });
    }
    this.chart.setData([[], [], [], [], []]);
    $('gpu-detail-error').hidden = true;
    this.renderFacts();
    this.refreshHistory();
    panel.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  }

  closeDetail() {
    this.detail = null;
    this.heatmap.select(null);
    $('gpu-detail').hidden = true;
  }

  renderFacts() {
    const found = this.findGpu();
    const facts = $('gpu-detail-facts');
    if (!found) {
      facts.replaceChildren(el('div', { class: 'fact' }, el('dt', {}, 'GPU'), el('dd', { class: 'bad' }, 'no longer in the fleet')));
      return;
    }
    const { node, gpu } = found;
    const used = num(gpu.memoryUsedBytes);
    const total = num(gpu.memoryTotalBytes);
    const limit = num(gpu.powerLimitW);
    const rows = [
      ['Model', gpu.model || 'unknown'],
      ['Node', `${enumLabel(node.state, 'NODE_STATE_')}${node.drained ? ', drained' : ''}`],
      ['Health', gpu.healthy ? 'healthy' : `UNHEALTHY: ${gpu.healthReason || 'no reason given'}`, gpu.healthy ? 'good' : 'bad'],
      ['Job', gpu.jobId || 'free'],
      ['Utilization', fixed(gpu.utilizationPct, 0, '%')],
      ['Memory', `${bytes(used)} / ${bytes(total)}`],
      ['Temperature', fixed(gpu.temperatureC, 0, ' °C')],
      ['Power', `${fixed(gpu.powerW, 0, ' W')}${limit > 0 ? ` / ${limit.toFixed(0)} W` : ''}`],
    ];
    facts.replaceChildren(...rows.map(([k, v, cls]) => el('div', { class: 'fact' }, el('dt', {}, k), el('dd', { class: cls }, v))));
  }

  // One request at a time; an event arriving meanwhile asks for one more.
  async refreshHistory() {
    if (!this.detail) return;
    if (this.historyInFlight) {
      this.historyWanted = true;
      return;
    }
    this.historyInFlight = true;
    const { node, index } = this.detail;
    try {
      const h = await api(`/api/v1/nodes/${encodeURIComponent(node)}/gpus/${index}/history`);
      if (this.detail && this.detail.node === node && this.detail.index === index) {
        $('gpu-detail-error').hidden = true;
        this.drawHistory(h.points || []);
      }
    } catch (err) {
      if (this.detail && this.detail.node === node && this.detail.index === index) {
        setText($('gpu-detail-error'), `history: ${err.message}`);
        $('gpu-detail-error').hidden = false;
      }
    } finally {
      this.historyInFlight = false;
      if (this.historyWanted) {
        this.historyWanted = false;
        this.refreshHistory();
      }
    }
  }

  drawHistory(points) {
    const found = this.findGpu();
    const total = found ? num(found.gpu.memoryTotalBytes) : -1;
    const value = (v) => (num(v) >= 0 ? num(v) : null);
    const xs = [];
    const util = [];
    const mem = [];
    const temp = [];
    const power = [];
    for (const p of points) {
      xs.push(num(p.timeUnixNanos) / 1e9);
      util.push(value(p.utilizationPct));
      const used = num(p.memoryUsedBytes);
      mem.push(used >= 0 && total > 0 ? (100 * used) / total : null);
      temp.push(value(p.temperatureC));
      power.push(value(p.powerW));
    }
    this.chart.setData([xs, util, mem, temp, power]);
  }
}
