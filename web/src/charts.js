// Thin wrappers around uPlot: a time-series chart that creates its plot once
// its container is laid out (a hidden tab has no width), follows the
// container's size, and records how many points it draws in the
// container's data-points attribute (the browser tests watch it).

import uPlot from 'uplot';

const AXIS = {
  stroke: '#8b949e',
  grid: { stroke: 'rgba(139, 148, 158, 0.15)', width: 1 },
  ticks: { stroke: 'rgba(139, 148, 158, 0.3)', width: 1 },
  font: '11px system-ui, sans-serif',
};

export class TimeChart {
  // series: [{label, stroke, scale, unit, fill?, spanGaps?}]; axes: [{scale, side, label}]
  constructor(container, { series, axes, scales = {}, height = 220 }) {
    this.container = container;
    this.height = height;
    this.opts = {
      series: [
        { label: 'time', value: '{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}' },
        ...series.map((s) => ({
          label: s.label,
          stroke: s.stroke,
          fill: s.fill,
          width: 1.5,
          scale: s.scale,
          spanGaps: s.spanGaps ?? false,
          points: { show: false },
          value: (u, v) => (v === null || v === undefined ? '–' : `${Number(v).toFixed(s.digits ?? 0)}${s.unit || ''}`),
        })),
      ],
      axes: [
        { ...AXIS },
        ...axes.map((a) => ({
          ...AXIS,
          scale: a.scale,
          side: a.side ?? 3,
          label: a.label,
          labelFont: AXIS.font,
          labelSize: 16,
          grid: a.side === 1 ? { show: false } : AXIS.grid,
          values: a.values,
          incrs: a.incrs,
          size: 48,
        })),
      ],
      scales: { x: { time: true }, ...scales },
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
    };
    this.plot = null;
    this.data = [[], ...series.map(() => [])];
    this.observer = new ResizeObserver(() => this.fit());
    this.observer.observe(container);
  }

  width() {
    return Math.floor(this.container.clientWidth);
  }

  fit() {
    const w = this.width();
    if (w <= 0) return;
    if (!this.plot) {
      this.plot = new uPlot({ ...this.opts, width: w, height: this.height }, this.data, this.container);
    } else if (Math.abs(this.plot.width - w) > 1) {
      this.plot.setSize({ width: w, height: this.height });
    }
  }

  // data: [xs (seconds), ys1, ys2, ...], equal lengths; null marks a gap.
  setData(data) {
    this.data = data;
    this.container.setAttribute('data-points', String(data[0].length));
    // Without a plot yet, the ResizeObserver creates it once the container
    // has a size; asking for the width here would force a layout of the
    // whole page on every update.
    if (this.plot) this.plot.setData(data);
  }

  destroy() {
    this.observer.disconnect();
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }
}
