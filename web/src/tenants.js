// The Tenants tab: each tenant's GPUs in use against its guarantee and its
// fair share, as numbers and as one bar per tenant on a common scale.

import { api } from './api.js';
import { el, milliGpus, num, setAttr, setText } from './format.js';

const $ = (id) => document.getElementById(id);

function guaranteedMilli(t) {
  return Object.values(t.guaranteedGpus || {}).reduce((s, n) => s + num(n) * 1000, 0);
}

function guaranteeText(t) {
  const entries = Object.entries(t.guaranteedGpus || {}).filter(([, n]) => num(n) > 0);
  if (!entries.length) return '0';
  const total = entries.reduce((s, [, n]) => s + num(n), 0);
  return String(total);
}

function guaranteeTitle(t) {
  const entries = Object.entries(t.guaranteedGpus || {}).filter(([, n]) => num(n) > 0);
  return entries.length ? entries.map(([m, n]) => `${num(n)} × ${m || 'any model'}`).join('\n') : 'no guarantee';
}

export class Tenants {
  constructor() {
    this.rows = new Map();
    this.inFlight = false;
  }

  async refresh() {
    if (this.inFlight) return;
    this.inFlight = true;
    try {
      const r = await api('/api/v1/tenants');
      $('tenants-error').hidden = true;
      this.render((r && r.tenants) || []);
    } catch (err) {
      setText($('tenants-error'), `cannot list tenants: ${err.message}`);
      $('tenants-error').hidden = false;
    } finally {
      this.inFlight = false;
    }
  }

  render(tenants) {
    const sorted = [...tenants].sort((a, b) => String(a.name).localeCompare(String(b.name)));
    // One scale for every bar, so bars compare across tenants.
    let scale = 1000;
    for (const t of sorted) {
      scale = Math.max(scale, num(t.usageMilli), guaranteedMilli(t), num(t.fairShareMilli));
    }
    const body = $('tenants-body');
    const keep = new Set();
    let prev = null;
    for (const t of sorted) {
      keep.add(t.name);
      let row = this.rows.get(t.name);
      if (!row) {
        row = this.makeRow(t.name);
        this.rows.set(t.name, row);
      }
      this.fillRow(row, t, scale);
      const want = prev ? prev.tr.nextSibling : body.firstChild;
      if (want !== row.tr) body.insertBefore(row.tr, want);
      prev = row;
    }
    for (const [name, row] of this.rows) {
      if (!keep.has(name)) {
        row.tr.remove();
        this.rows.delete(name);
      }
    }
    $('tenants-empty').hidden = sorted.length > 0;
  }

  makeRow(name) {
    const r = {};
    for (const k of ['weight', 'usage', 'guarantee', 'fair', 'borrowed', 'limit', 'running', 'pending']) {
      r[k] = el('td', { class: 'num' });
    }
    r.usageFill = el('div', { class: 'fill usage' });
    r.borrowFill = el('div', { class: 'fill borrowed' });
    r.guaranteeTick = el('div', { class: 'tick guarantee' });
    r.fairTick = el('div', { class: 'tick fair' });
    r.bar = el('div', { class: 'share-bar', 'data-testid': 'tenant-bar' }, r.usageFill, r.borrowFill, r.guaranteeTick, r.fairTick);
    r.tr = el('tr', { 'data-testid': 'tenant-row', 'data-tenant': name },
      el('td', { class: 'name' }, name), r.weight, r.usage, r.guarantee, r.fair, r.borrowed, r.limit, r.running, r.pending,
      el('td', { class: 'bar-col' }, r.bar));
    return r;
  }

  fillRow(r, t, scale) {
    const usage = num(t.usageMilli);
    const borrowed = Math.min(num(t.borrowedMilli), usage);
    const guarantee = guaranteedMilli(t);
    const fair = num(t.fairShareMilli);
    const limit = num(t.borrowLimit);
    setText(r.weight, String(Number(num(t.weight).toFixed(3))));
    setText(r.usage, milliGpus(usage));
    setText(r.guarantee, guaranteeText(t));
    setAttr(r.guarantee, 'title', guaranteeTitle(t));
    setText(r.fair, milliGpus(fair));
    setText(r.borrowed, milliGpus(borrowed));
    setText(r.limit, limit < 0 ? 'none' : String(limit));
    setText(r.running, String(num(t.runningJobs)));
    setText(r.pending, String(num(t.pendingJobs)));
    const pct = (v) => `${((100 * v) / scale).toFixed(2)}%`;
    // In use within the guarantee (or all of it) and the borrowed part on top.
    r.usageFill.style.width = pct(usage - borrowed);
    r.borrowFill.style.left = pct(usage - borrowed);
    r.borrowFill.style.width = pct(borrowed);
    r.guaranteeTick.style.left = pct(guarantee);
    r.guaranteeTick.hidden = guarantee <= 0;
    r.fairTick.style.left = pct(fair);
    r.fairTick.hidden = fair <= 0;
    r.tr.classList.toggle('over-fair', fair > 0 && usage > fair);
    setAttr(r.bar, 'title',
      `${t.name}: ${milliGpus(usage)} GPUs in use (${milliGpus(borrowed)} borrowed), ` +
      `guarantee ${milliGpus(guarantee)}, fair share ${milliGpus(fair)}`);
  }
}
