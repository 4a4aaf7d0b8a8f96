// The Models tab: model deployments (GET /api/v1/deployments), each with
// its replicas and where they run, and what the gateway metered
// (GET /api/v1/serving/usage): requests, tokens, errors and latency per
// deployment and per tenant.
//
// Polled every 2 s while the tab is shown (main.js). The usage counters are
// cumulative since the gateway started; request, token and error rates are
// the difference between polls over the last few seconds (serving.js), and
// the page says over how many. A non-admin sees only its tenant's
// deployments (the server filters); usage is whatever the server gives the
// session. A session that may change a deployment gets its actions (scale,
// undeploy: deployment_actions.js) above its replicas.

import { api } from './api.js';
import { TimeChart } from './charts.js';
import { DeploymentActions, canChange } from './deployment_actions.js';
import { dateFromNanos, duration, el, enumLabel, num, setAttr, setText } from './format.js';
import { RateWindow, mergedLatency, parseUsage, totals } from './serving.js';

const $ = (id) => document.getElementById(id);
const q = (testid) => document.querySelector(`[data-testid="${testid}"]`);

const RATE_WINDOW_MS = 10000;
const CHART_WINDOW_S = 15 * 60;
const REPLICA_COLUMNS = 9;

// 0.04 -> "0.04", 3.25 -> "3.3", 1234 -> "1234".
export function rateText(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (v === 0) return '0';
  if (v < 0.1) return v.toFixed(2);
  if (v < 100) return v.toFixed(1);
  return v.toFixed(0);
}

// 999 -> "999", 12345 -> "12.3k", 4.2e6 -> "4.2M".
export function countText(v) {
  const n = num(v);
  if (n < 1000) return String(n);
  if (n < 1e6) return `${+(n / 1e3).toFixed(n < 1e4 ? 2 : 1)}k`;
  if (n < 1e9) return `${+(n / 1e6).toFixed(n < 1e7 ? 2 : 1)}M`;
  return `${+(n / 1e9).toFixed(2)}G`;
}

export function msText(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (v < 1) return `${+v.toPrecision(2)} ms`;
  if (v < 1000) return `${v < 10 ? v.toFixed(1) : v.toFixed(0)} ms`;
  return `${+(v / 1000).toPrecision(3)} s`;
}

// The name clients ask for in "model".
export function servedModel(d) {
  const spec = d.spec || {};
  return spec.servedModelName || spec.name || '';
}

// Deployments are named within their tenant (docs/security.md, "Names per
// tenant"): an admin's list may hold two of one name.
export function deploymentKey(d) {
  const spec = (d && d.spec) || {};
  return `${spec.tenant || 'default'}/${spec.name || ''}`;
}

function gpusPerReplica(spec) {
  const milli = num(spec.gpuMilli);
  let text = milli > 0 && milli < 1000 ? String(milli / 1000) : String(num(spec.gpus));
  if (text === '0') text = '0 (CPU)';
  return spec.gpuModel ? `${text} × ${spec.gpuModel}` : text;
}

function replicasText(spec, s) {
  const ready = num(s.readyReplicas);
  const desired = num(s.desiredReplicas);
  return `${ready}/${desired}`;
}

function autoscaleText(spec) {
  const max = num(spec.maxReplicas);
  if (max <= 0) return '';
  return `auto ${num(spec.minReplicas)}–${max}`;
}

// 'ready' | 'partial' | 'not-ready' | 'zero' for the status badge.
export function deploymentPhase(s) {
  const ready = num(s.readyReplicas);
  const desired = num(s.desiredReplicas);
  if (desired === 0) return ready > 0 ? 'partial' : 'zero';
  if (ready >= desired) return 'ready';
  return ready > 0 ? 'partial' : 'not-ready';
}

const PHASE_LABEL = { ready: 'Ready', partial: 'Partly ready', 'not-ready': 'Not ready', zero: 'Scaled to zero' };

// A replica's readiness as a word: Ready, or why not.
export function replicaPhase(r) {
  if (r.ready) return { key: 'ready', label: 'Ready' };
  const state = String(r.state || '');
  if (state === 'JOB_STATE_PENDING' || state === '' || state === 'JOB_STATE_UNSPECIFIED') return { key: 'pending', label: 'Pending' };
  if (state === 'JOB_STATE_BOUND') return { key: 'starting', label: 'Starting' };
  if (state === 'JOB_STATE_RUNNING') return { key: 'not-ready', label: 'Not ready' };
  if (state === 'JOB_STATE_CANCELLING' || state === 'JOB_STATE_PREEMPTING') return { key: 'stopping', label: 'Stopping' };
  if (state === 'JOB_STATE_FAILED') return { key: 'failed', label: 'Failed' };
  return { key: 'stopped', label: enumLabel(state, 'JOB_STATE_') };
}

export class Models {
  constructor() {
    this.deployments = [];
    this.usage = [];            // parsed usage rows (serving.js)
    this.usageState = 'none';   // 'ok' | 'missing' (404) | 'denied' (403) | 'error' | 'none'
    this.rates = new RateWindow(RATE_WINDOW_MS);
    this.groups = new Map();    // deploymentKey(d) -> {body, row, replicas: Map}
    this.tenantRows = new Map();
    this.usageRows = new Map();
    this.principal = null;
    this.inFlight = false;
    this.generation = 0;  // a poll answered after reset() is dropped
    this.polls = 0;
    this.series = [];           // [{t (s), rps, tps, eps}]
    this.chart = new TimeChart($('chart-serving'), {
      series: [
        { label: 'requests/s', stroke: '#58a6ff', scale: 'r', digits: 2 },
        { label: 'errors/s', stroke: '#f85149', scale: 'r', digits: 2 },
        { label: 'tokens/s', stroke: '#3fb950', scale: 't', digits: 1 },
      ],
      axes: [
        { scale: 'r', side: 3, label: 'requests/s' },
        { scale: 't', side: 1, label: 'tokens/s' },
      ],
      scales: {
        // One point (or none) has no time span: show the minute before it.
        x: { time: true, range: (u, min, max) => (min === null || max - min < 1 ? [(max ?? Date.now() / 1000) - 60, max ?? Date.now() / 1000] : [min, max]) },
        r: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] },
        t: { range: (u, min, max) => [0, Math.max(10, max * 1.1)] },
      },
      height: 200,
    });
  }

  setPrincipal(p) {
    this.principal = p;
    const admin = p && p.role === 'admin';
    const note = $('models-scope');
    setText(note, admin ? '' : `Deployments of tenant ${p && p.tenant ? p.tenant : '?'} only (your token's tenant).`);
    note.hidden = admin;
  }

  // Logged out: nothing of this session stays on the page for the next one.
  reset() {
    this.generation++;
    this.deployments = [];
    this.usage = [];
    this.usageState = 'none';
    this.rates.clear();
    this.series = [];
    this.chart.setData([[], [], [], []]);
    this.render();
    $('models-empty').hidden = true;
    $('models-error').hidden = true;
  }

  // A scale or an undeploy from the page succeeded: show its answer now (an
  // undeployed one goes), and drop a poll on its way, which may predate it.
  changed(key, d) {
    this.generation++;
    const named = (x) => deploymentKey(x) === key;
    this.deployments = d ? this.deployments.map((x) => (named(x) ? d : x)) : this.deployments.filter((x) => !named(x));
    this.render();
  }

  // Both lists at once; one poll at a time.
  async refresh() {
    if (this.inFlight) return;
    this.inFlight = true;
    const generation = this.generation;
    try {
      const [deps, usage] = await Promise.allSettled([api('/api/v1/deployments'), api('/api/v1/serving/usage')]);
      if (generation !== this.generation) return;
      const t = performance.now();
      if (deps.status === 'fulfilled') {
        this.deployments = (deps.value && deps.value.deployments) || [];
        $('models-error').hidden = true;
      } else {
        const err = deps.reason;
        setText($('models-error'), err && err.httpStatus === 404
          ? 'This server has no deployments API (GET /api/v1/deployments: 404).'
          : `cannot list deployments: ${err ? err.message : 'unknown error'}`);
        $('models-error').hidden = false;
      }
      if (usage.status === 'fulfilled') {
        this.usage = parseUsage(usage.value);
        this.usageState = 'ok';
        this.rates.add(t, this.usage);
      } else {
        const status = usage.reason && usage.reason.httpStatus;
        this.usageState = status === 404 ? 'missing' : status === 403 ? 'denied' : 'error';
        this.usageError = usage.reason ? usage.reason.message : '';
        this.usage = [];
        this.rates.clear();
      }
      this.polls++;
      this.render();
      $('view-models').setAttribute('data-polls', String(this.polls));
    } finally {
      this.inFlight = false;
    }
  }

  render() {
    const rate = this.rates.rate();
    const seconds = this.rates.seconds();
    this.renderCards(rate, seconds);
    this.renderDeployments(seconds > 0);
    this.renderUsage(seconds > 0);
    this.renderChart(rate);
    $('models-traffic').hidden = this.deployments.length === 0 && this.usage.length === 0;
  }

  windowText() {
    if (this.usageState !== 'ok') return 'no usage from the gateway';
    const s = this.rates.seconds();
    return s > 0 ? `over the last ${Math.round(s)} s` : 'measuring (two polls, 2 s apart)';
  }

  renderCards(rate, seconds) {
    const deps = this.deployments;
    let ready = 0;
    let desired = 0;
    let outstanding = 0;
    let waiting = 0;
    for (const d of deps) {
      const s = d.status || {};
      ready += num(s.readyReplicas);
      desired += num(s.desiredReplicas);
      outstanding += num(s.outstanding);
      waiting += num(s.waiting);
    }
    setText(q('models-deployments'), String(deps.length));
    setText($('models-deployments-sub'), `${deps.filter((d) => deploymentPhase(d.status || {}) === 'ready').length} fully ready`);
    setText(q('models-ready'), `${ready}/${desired}`);
    setText(q('models-outstanding'), String(outstanding));
    setText($('models-outstanding-sub'), waiting > 0 ? `${waiting} waiting for a replica` : 'in flight at the gateways');
    const all = totals(this.usage);
    setText(q('models-rps'), rate ? rateText(rate.requests) : '–');
    setText(q('models-tps'), rate ? rateText(rate.tokens) : '–');
    setText(q('models-eps'), rate ? rateText(rate.errors) : '–');
    setText($('models-errors-sub'), this.usageState === 'ok' ? `${countText(all.errors)} of ${countText(all.requests)} requests since start` : '');
    $('models-errors-sub').classList.toggle('bad', all.errors > 0);
    const text = this.windowText();
    for (const node of document.querySelectorAll('[data-rate-window]')) setText(node, text);
    setAttr(q('models-rate-window'), 'data-seconds', String(Math.round(seconds)));
  }

  renderDeployments(haveRates) {
    const sorted = [...this.deployments].sort((a, b) =>
      String((a.spec || {}).name).localeCompare(String((b.spec || {}).name)) || deploymentKey(a).localeCompare(deploymentKey(b)));
    const table = $('deployments-table');
    const keep = new Set();
    let prev = null;
    for (const d of sorted) {
      const name = (d.spec || {}).name || '';
      const key = deploymentKey(d);
      keep.add(key);
      let g = this.groups.get(key);
      if (!g) {
        g = this.makeGroup(name);
        this.groups.set(key, g);
      }
      this.fillGroup(g, d, haveRates);
      const want = prev ? prev.body.nextSibling : table.tBodies[0] || null;
      if (want !== g.body) table.insertBefore(g.body, want);
      prev = g;
    }
    for (const [key, g] of this.groups) {
      if (!keep.has(key)) {
        g.body.remove();
        this.groups.delete(key);
      }
    }
    const empty = sorted.length === 0 && $('models-error').hidden;
    $('models-empty').hidden = !empty;
    $('deployments-wrap').hidden = sorted.length === 0;
  }

  makeGroup(name) {
    const g = { replicas: new Map() };
    const cell = (testid, cls) => el('td', { class: cls, 'data-testid': testid });
    g.name = el('td', { class: 'name' }, name);
    g.modelName = el('span', { 'data-testid': 'deployment-model' });
    g.modelSource = el('span', { class: 'model-source' });
    g.model = el('td', { class: 'model' }, g.modelName, g.modelSource);
    g.tenant = cell('deployment-tenant');
    g.engine = cell('deployment-engine');
    g.gpus = cell('deployment-gpus', 'num');
    g.replicasCount = cell('deployment-replicas', 'num');
    g.status = el('span', { class: 'state', 'data-testid': 'deployment-status' });
    g.rps = cell('deployment-rps', 'num');
    g.tps = cell('deployment-tps', 'num');
    g.errors = cell('deployment-errors', 'num');
    g.p50 = cell('deployment-p50', 'num');
    g.p99 = cell('deployment-p99', 'num');
    g.outstanding = cell('deployment-outstanding', 'num');
    g.message = cell('deployment-message', 'reason');
    g.row = el('tr', { class: 'deployment-row', 'data-testid': 'deployment-row', 'data-deployment': name },
      g.name, g.model, g.tenant, g.engine, g.gpus, g.replicasCount, el('td', {}, g.status),
      g.rps, g.tps, g.errors, g.p50, g.p99, g.outstanding, g.message);
    g.replicaBody = el('tbody');
    g.noReplicas = el('tr', { class: 'no-replicas' }, el('td', { colspan: String(REPLICA_COLUMNS), class: 'muted' }, 'no replicas'));
    g.replicaTable = el('table', { class: 'table replicas-table', 'data-testid': 'replicas-table' },
      el('thead', {}, el('tr', {},
        ...['Replica', 'Rev', 'Node', 'Endpoint', 'Ready', 'State', 'Restarts', 'Outstanding', 'Reason']
          .map((h, i) => el('th', { class: [6, 7].includes(i) ? 'num' : undefined }, h)))),
      g.replicaBody);
    g.actions = null;  // DeploymentActions, while this session may change the deployment
    g.holder = el('td', { colspan: '14' }, g.replicaTable);
    g.replicaRow = el('tr', { class: 'replica-holder' }, g.holder);
    g.body = el('tbody', { class: 'deployment', 'data-testid': 'deployment', 'data-deployment': name }, g.row, g.replicaRow);
    return g;
  }

  fillGroup(g, d, haveRates) {
    const spec = d.spec || {};
    const s = d.status || {};
    const model = servedModel(d);
    setText(g.modelName, model);
    setText(g.modelSource, spec.model && spec.model !== model ? spec.model : '');
    setAttr(g.model, 'title', spec.model ? `clients ask for "${model}"; loaded from ${spec.model}` : `clients ask for "${model}"`);
    setText(g.tenant, spec.tenant || 'default');
    setText(g.engine, spec.engine || 'custom');
    setText(g.gpus, gpusPerReplica(spec));
    const auto = autoscaleText(spec);
    setText(g.replicasCount, auto ? `${replicasText(spec, s)} (${auto})` : replicasText(spec, s));
    setAttr(g.replicasCount, 'title', `${num(s.readyReplicas)} ready of ${num(s.desiredReplicas)} desired` +
      (auto ? `; auto-scaling between ${num(spec.minReplicas)} and ${num(spec.maxReplicas)}` : ''));
    const phase = deploymentPhase(s);
    setText(g.status, PHASE_LABEL[phase]);
    setAttr(g.status, 'data-state', phase);

    // Usage rows of this deployment's model, whoever called it (a row's
    // tenant is the caller's: an admin key may call any tenant's model).
    const mine = (r) => r.model === model;
    const rows = this.usage.filter(mine);
    const rate = haveRates ? this.rates.rate(mine) : null;
    const t = totals(rows);
    setText(g.rps, rate ? rateText(rate.requests) : '–');
    setText(g.tps, rate ? rateText(rate.tokens) : '–');
    setAttr(g.tps, 'title', rate
      ? `${rateText(rate.promptTokens)} prompt + ${rateText(rate.completionTokens)} completion tokens/s, ${this.windowText()}`
      : this.windowText());
    setText(g.errors, rows.length ? countText(t.errors) : '–');
    setAttr(g.errors, 'title', rows.length
      ? `${t.errors} errors of ${t.requests} requests since the gateway started${rate ? `; ${rateText(rate.errors)}/s ${this.windowText()}` : ''}`
      : 'no requests metered');
    g.errors.classList.toggle('bad', t.errors > 0);
    const lat = mergedLatency(rows);
    setText(g.p50, msText(lat.p50Ms));
    setText(g.p99, msText(lat.p99Ms));
    const latTitle = lat.exact ? 'since the gateway started'
      : 'since the gateway started; over several tenants or keys: p50 weighted by requests, p99 the largest';
    setAttr(g.p50, 'title', latTitle);
    setAttr(g.p99, 'title', latTitle);
    const waiting = num(s.waiting);
    // The engines' own queue, when a gateway scrapes their metrics (-1: not known).
    const queueMs = s.queueMs === undefined ? 0 : Number(s.queueMs);
    const queued = s.engineWaiting === undefined ? 0 : Number(s.engineWaiting);
    let text = waiting > 0 ? `${num(s.outstanding)} (+${waiting} waiting)` : String(num(s.outstanding));
    if (queued > 0) text += `, ${queued} queued in engines`;
    setText(g.outstanding, text);
    const last = dateFromNanos(s.lastRequestUnixNanos);
    const engines = queueMs >= 0 && s.queueMs !== undefined ? `; engine queue time ${msText(queueMs)}` : '';
    setAttr(g.outstanding, 'title', (last ? `last request ${duration(Date.now() - last.getTime())} ago` : 'no request yet') + engines);
    setText(g.message, s.message || '');
    setAttr(g.message, 'title', s.message || '');

    const may = canChange(this.principal, spec.tenant);
    if (may && !g.actions) {
      g.actions = new DeploymentActions(spec.name || '', {
        tenant: spec.tenant || '',
        onChanged: (n, answer) => this.changed(deploymentKey(d), answer),
      });
      g.holder.insertBefore(g.actions.root, g.replicaTable);
    } else if (!may && g.actions) {
      g.actions.root.remove();
      g.actions = null;
    }
    if (g.actions) g.actions.fill(d);

    const replicas = [...(s.replicas || [])].sort((a, b) =>
      String(a.jobId).localeCompare(String(b.jobId), undefined, { numeric: true }));
    const keep = new Set();
    let prev = null;
    for (const r of replicas) {
      const id = r.jobId || '';
      keep.add(id);
      let row = g.replicas.get(id);
      if (!row) {
        row = this.makeReplica(id, spec.name || '');
        g.replicas.set(id, row);
      }
      this.fillReplica(row, r, num(s.revision));
      const want = prev ? prev.tr.nextSibling : g.replicaBody.firstChild;
      if (want !== row.tr) g.replicaBody.insertBefore(row.tr, want);
      prev = row;
    }
    for (const [id, row] of g.replicas) {
      if (!keep.has(id)) {
        row.tr.remove();
        g.replicas.delete(id);
      }
    }
    if (replicas.length === 0 && !g.noReplicas.parentNode) g.replicaBody.append(g.noReplicas);
    if (replicas.length > 0 && g.noReplicas.parentNode) g.noReplicas.remove();
  }

  makeReplica(id, deployment) {
    const cell = (testid, cls) => el('td', { class: cls, 'data-testid': testid });
    const r = {
      id: el('td', { class: 'mono', 'data-testid': 'replica-id' }, id),
      revision: cell('replica-revision', 'mono'),
      node: cell('replica-node', 'mono'),
      endpoint: cell('replica-endpoint', 'mono'),
      ready: el('span', { class: 'state', 'data-testid': 'replica-ready' }),
      state: cell('replica-state'),
      restarts: cell('replica-restarts', 'num'),
      outstanding: cell('replica-outstanding', 'num'),
      reason: cell('replica-reason', 'reason'),
    };
    r.tr = el('tr', { 'data-testid': 'replica-row', 'data-replica': id, 'data-deployment': deployment },
      r.id, r.revision, r.node, r.endpoint, el('td', {}, r.ready), r.state, r.restarts, r.outstanding, r.reason);
    return r;
  }

  fillReplica(row, r, revision) {
    const rev = num(r.revision);
    setText(row.revision, String(rev));
    row.revision.classList.toggle('old-revision', revision > 0 && rev < revision);
    setAttr(row.revision, 'title', revision > 0 && rev < revision ? `an older template (the deployment is at ${revision})` : 'the current template');
    setText(row.node, r.node || '–');
    setText(row.endpoint, r.endpoint || '–');
    const phase = replicaPhase(r);
    setText(row.ready, phase.label);
    setAttr(row.ready, 'data-state', phase.key);
    setAttr(row.ready, 'data-ready', r.ready ? 'true' : 'false');
    setText(row.state, enumLabel(r.state, 'JOB_STATE_'));
    const restarts = num(r.restarts);
    setText(row.restarts, String(restarts));
    row.restarts.classList.toggle('warn', restarts > 0);
    setText(row.outstanding, String(num(r.outstanding)));
    setText(row.reason, r.reason || '');
    setAttr(row.reason, 'title', r.reason || '');
  }

  renderUsage(haveRates) {
    const box = $('usage-error');
    const messages = {
      missing: 'This server serves no usage (GET /api/v1/serving/usage: 404): is the gateway running?',
      denied: 'Usage is not visible to this session.',
      error: `cannot read usage: ${this.usageError || 'unknown error'}`,
    };
    const message = messages[this.usageState] || '';
    setText(box, message);
    box.hidden = !message;

    // Per tenant: sums over models and keys.
    const byTenant = new Map();
    for (const r of this.usage) {
      const name = r.tenant || '(none)';
      if (!byTenant.has(name)) byTenant.set(name, []);
      byTenant.get(name).push(r);
    }
    const tenants = [...byTenant.keys()].sort();
    this.syncRows($('usage-tenants-body'), this.tenantRows, tenants, (name) => this.makeTenantRow(name), (row, name) => {
      const rows = byTenant.get(name);
      const pick = (r) => (r.tenant || '(none)') === name;
      this.fillUsageCells(row, rows, haveRates ? this.rates.rate(pick) : null, new Set(rows.map((r) => r.model)).size);
    });

    const keyed = [...this.usage].sort((a, b) =>
      a.tenant.localeCompare(b.tenant) || a.model.localeCompare(b.model) || a.key.localeCompare(b.key));
    const ids = keyed.map((r) => `${r.tenant}\u0000${r.model}\u0000${r.key}`);
    const byId = new Map(keyed.map((r, i) => [ids[i], r]));
    this.syncRows($('usage-body'), this.usageRows, ids, (id) => this.makeUsageRow(byId.get(id)), (row, id) => {
      const r = byId.get(id);
      const pick = (x) => x.tenant === r.tenant && x.model === r.model && x.key === r.key;
      this.fillUsageCells(row, [r], haveRates ? this.rates.rate(pick) : null);
    });
    const none = this.usageState === 'ok' && this.usage.length === 0;
    $('usage-empty').hidden = !none;
    $('usage-wrap').hidden = this.usage.length === 0;
  }

  // Keeps `body`'s rows in the order of `ids`, made and filled by the callbacks.
  syncRows(body, cache, ids, make, fill) {
    const keep = new Set();
    let prev = null;
    for (const id of ids) {
      keep.add(id);
      let row = cache.get(id);
      if (!row) {
        row = make(id);
        cache.set(id, row);
      }
      fill(row, id);
      const want = prev ? prev.tr.nextSibling : body.firstChild;
      if (want !== row.tr) body.insertBefore(row.tr, want);
      prev = row;
    }
    for (const [id, row] of cache) {
      if (!keep.has(id)) {
        row.tr.remove();
        cache.delete(id);
      }
    }
  }

  usageCells() {
    const c = {};
    for (const k of ['requests', 'errors', 'prompt', 'completion', 'rps', 'tps', 'p50', 'p99']) {
      c[k] = el('td', { class: 'num', 'data-testid': `usage-${k}` });
    }
    return c;
  }

  makeTenantRow(name) {
    const c = this.usageCells();
    c.models = el('td', { class: 'num', 'data-testid': 'usage-models' });
    c.tr = el('tr', { 'data-testid': 'usage-tenant-row', 'data-tenant': name },
      el('td', { class: 'name' }, name), c.models, c.requests, c.errors, c.prompt, c.completion, c.rps, c.tps, c.p50, c.p99);
    return c;
  }

  makeUsageRow(r) {
    const c = this.usageCells();
    c.tr = el('tr', { 'data-testid': 'usage-row', 'data-tenant': r.tenant, 'data-model': r.model, 'data-key': r.key },
      el('td', {}, r.tenant), el('td', { class: 'model' }, r.model), el('td', { class: 'mono', title: 'API key id' }, r.key || '–'),
      c.requests, c.errors, c.prompt, c.completion, c.rps, c.tps, c.p50, c.p99);
    return c;
  }

  fillUsageCells(c, rows, rate, models) {
    const t = totals(rows);
    if (c.models) setText(c.models, String(models));
    setText(c.requests, countText(t.requests));
    setAttr(c.requests, 'title', String(t.requests));
    setText(c.errors, countText(t.errors));
    c.errors.classList.toggle('bad', t.errors > 0);
    setText(c.prompt, countText(t.promptTokens));
    setAttr(c.prompt, 'title', String(t.promptTokens));
    setText(c.completion, countText(t.completionTokens));
    setAttr(c.completion, 'title', String(t.completionTokens));
    setText(c.rps, rate ? rateText(rate.requests) : '–');
    setText(c.tps, rate ? rateText(rate.tokens) : '–');
    const lat = mergedLatency(rows);
    setText(c.p50, msText(lat.p50Ms));
    setText(c.p99, msText(lat.p99Ms));
  }

  // One point per poll that has a rate, over the last CHART_WINDOW_S.
  renderChart(rate) {
    if (!rate) return;
    const t = Date.now() / 1000;
    this.series.push({ t, rps: rate.requests, eps: rate.errors, tps: rate.tokens });
    while (this.series.length && this.series[0].t < t - CHART_WINDOW_S) this.series.shift();
    this.chart.setData([this.series.map((p) => p.t), this.series.map((p) => p.rps), this.series.map((p) => p.eps),
      this.series.map((p) => p.tps)]);
  }
}
