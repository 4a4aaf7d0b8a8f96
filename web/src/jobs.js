// The Jobs tab: the job table (filtered by state and tenant), cancel
// buttons and the submit form.
//
// The list is fetched when the tab opens (GET /api/v1/jobs) and then kept
// current by the server's pushes (the /api/v1/watch stream, main.js): each
// committed change of a job replaces it (apply), and the table is redrawn
// at most once per frame. Rows are keyed by job id and updated in place, so
// an update does not rebuild the table or lose a hovered button.

import { api, apiText } from './api.js';
import { dateFromNanos, duration, el, enumLabel, msFromNanos, num, setAttr, setText, when } from './format.js';

const $ = (id) => document.getElementById(id);

const ENDED = new Set(['JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED']);
// "running" in the filter: every state in which the job holds GPUs.
const ACTIVE = new Set(['JOB_STATE_BOUND', 'JOB_STATE_RUNNING', 'JOB_STATE_CANCELLING', 'JOB_STATE_PREEMPTING']);
const MAX_ROWS = 500;

export function stateGroup(state) {
  if (ENDED.has(state)) return 'finished';
  if (ACTIVE.has(state)) return 'running';
  return 'pending';
}

function gpusText(spec) {
  const milli = num(spec.gpuMilli);
  if (milli > 0 && milli < 1000) return `${milli / 1000}`;
  const replicas = Math.max(1, num(spec.replicas));
  const gpus = num(spec.gpus);
  return replicas > 1 ? `${replicas}×${gpus}` : String(gpus);
}

function allocationText(a) {
  if (!a || !a.node) return '';
  const idx = (a.gpuIndices || []).join(',');
  const milli = num(a.gpuMilli);
  const share = milli > 0 && milli < 1000 ? ` (${milli / 1000} share)` : '';
  return `${a.node} GPU ${idx || '–'}${share}`;
}

export function whereText(job, nowMs) {
  const s = job.status || {};
  const group = stateGroup(s.state);
  if (group === 'pending') {
    const submitted = dateFromNanos(s.submitTimeUnixNanos);
    const parts = [submitted ? `queued ${when(submitted)} (${duration(nowMs - submitted.getTime())} ago)` : 'queued'];
    if (num(s.preemptions) > 0) parts.push(`preempted ${num(s.preemptions)}×`);
    return parts.join(' · ');
  }
  if (group === 'running') {
    const where = allocationText(s.allocation);
    const extra = (s.replicas || []).length > 1 ? ` +${s.replicas.length - 1} replicas` : '';
    const since = dateFromNanos(s.startTimeUnixNanos) || dateFromNanos(s.bindTimeUnixNanos);
    const sinceText = since ? ` since ${when(since)} (${duration(nowMs - since.getTime())})` : '';
    return `${where || 'placed'}${extra}${sinceText}`;
  }
  const end = dateFromNanos(s.endTimeUnixNanos);
  const parts = [end ? `ended ${when(end)}` : 'ended'];
  if (s.state !== 'JOB_STATE_CANCELLED' || num(s.exitCode) !== 0) {
    parts.push(num(s.signal) > 0 ? `signal ${num(s.signal)}` : `exit ${num(s.exitCode)}`);
  }
  const start = msFromNanos(s.startTimeUnixNanos);
  if (end && start > 0) parts.push(`ran ${duration(end.getTime() - start)}`);
  const where = allocationText(s.allocation);
  if (where) parts.push(`on ${where}`);
  return parts.join(' · ');
}

// The image cell of a container job: its reference, the digest it resolved
// to (short), and while it is pulled, the progress; '' for a bare process.
export function imageText(job) {
  const c = (job.spec || {}).container;
  if (!c || !c.image) return '';
  const s = job.status || {};
  const digest = s.imageDigest ? ` @ ${String(s.imageDigest).slice(0, 19)}` : '';
  return s.imagePull ? `${c.image}${digest} (${s.imagePull})` : `${c.image}${digest}`;
}

export class Jobs {
  constructor() {
    this.jobs = [];
    this.byId = new Map();  // id -> index in this.jobs
    this.pushedDuring = null;  // Map while a refresh is in flight
    this.renderQueued = false;
    this.rows = new Map();  // id -> {tr, cells..., button}
    this.inFlight = false;
    this.again = false;
    this.filterState = $('filter-state');
    this.filterTenant = $('filter-tenant');
    this.filterState.addEventListener('change', () => this.render());
    this.filterTenant.addEventListener('input', () => this.render());
    $('jobs-body').addEventListener('click', (ev) => {
      const button = ev.target.closest('[data-testid="job-cancel"]');
      if (button) this.cancel(button.closest('tr').dataset.job, button);
      const logs = ev.target.closest('[data-testid="job-logs"]');
      if (logs) this.showLog(logs.closest('tr').dataset.job, 0);
    });
    this.logJob = null;  // the job whose output the log panel shows
    $('log-replica').addEventListener('change', () => this.showLog(this.logJob, Number($('log-replica').value)));
    $('log-refresh').addEventListener('click', () => this.showLog(this.logJob, Number($('log-replica').value)));
    $('log-close').addEventListener('click', () => {
      this.logJob = null;
      $('log-panel').hidden = true;
    });
    $('submit-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.submit();
    });
  }

  // Fetches the job list; one request at a time, at most one more queued.
  async refresh() {
    if (this.inFlight) {
      this.again = true;
      return;
    }
    this.inFlight = true;
    this.pushedDuring = new Map();  // pushes that may be newer than the list on its way
    try {
      const r = await api('/api/v1/jobs');
      this.jobs = (r && r.jobs) || [];
      this.byId = new Map(this.jobs.map((j, i) => [j.id, i]));
      for (const job of this.pushedDuring.values()) this.apply(job);
      $('jobs-error').hidden = true;
      this.render();
    } catch (err) {
      setText($('jobs-error'), `cannot list jobs: ${err.message}`);
      $('jobs-error').hidden = false;
    } finally {
      this.inFlight = false;
      this.pushedDuring = null;
      if (this.again) {
        this.again = false;
        this.refresh();
      }
    }
  }

  // A job's committed change, pushed by the server: replaces the job (or
  // adds a new one) and redraws at the next frame.
  // A list fetched meanwhile may be older than a push: the pushes that came
  // during a refresh are applied again on top of its list. An ended job
  // never goes back to running in the same attempt (a late or old copy).
  apply(job) {
    if (!job || !job.id) return;
    if (this.pushedDuring) this.pushedDuring.set(job.id, job);
    const i = this.byId.get(job.id);
    if (i === undefined) {
      this.byId.set(job.id, this.jobs.length);
      this.jobs.push(job);
    } else {
      const now = this.jobs[i].status || {};
      const next = job.status || {};
      const older = num(next.attempt) < num(now.attempt) ||
        (num(next.attempt) === num(now.attempt) && ENDED.has(now.state) && !ENDED.has(next.state));
      if (older) return;
      this.jobs[i] = job;
    }
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      this.render();
    });
  }

  render() {
    const group = this.filterState.value;
    const tenant = this.filterTenant.value.trim().toLowerCase();
    const matching = this.jobs.filter((j) => {
      const s = j.status || {};
      if (group !== 'all' && stateGroup(s.state) !== group) return false;
      if (tenant && !String((j.spec || {}).tenant || 'default').toLowerCase().includes(tenant)) return false;
      return true;
    });
    // Newest first: by submit time, then by id.
    matching.sort((a, b) => {
      const d = num((b.status || {}).submitTimeUnixNanos) - num((a.status || {}).submitTimeUnixNanos);
      return d !== 0 ? d : String(b.id).localeCompare(String(a.id), undefined, { numeric: true });
    });
    const shown = matching.slice(0, MAX_ROWS);
    const body = $('jobs-body');
    const now = Date.now();
    const keep = new Set();
    let prev = null;
    for (const job of shown) {
      keep.add(job.id);
      let row = this.rows.get(job.id);
      if (!row) {
        row = this.makeRow(job.id);
        this.rows.set(job.id, row);
      }
      this.fillRow(row, job, now);
      // Keep DOM order equal to `shown` with as few moves as possible.
      const want = prev ? prev.tr.nextSibling : body.firstChild;
      if (want !== row.tr) body.insertBefore(row.tr, want);
      prev = row;
    }
    for (const [id, row] of this.rows) {
      if (!keep.has(id)) {
        row.tr.remove();
        this.rows.delete(id);
      }
    }
    $('jobs-empty').hidden = shown.length > 0;
    setText($('jobs-count'), matching.length > shown.length
      ? `showing the newest ${shown.length} of ${matching.length}`
      : `${matching.length} of ${this.jobs.length}`);
  }

  // The output of one replica of a job (a gang's each have their own), as
  // the server has it now; Refresh reads it again.
  async showLog(id, replica) {
    if (!id) return;
    const i = this.byId.get(id);
    const replicas = Math.max(1, num(((i === undefined ? {} : this.jobs[i]).spec || {}).replicas));
    this.logJob = id;
    const select = $('log-replica');
    if (select.dataset.job !== id || select.options.length !== replicas) {
      select.replaceChildren(...Array.from({ length: replicas }, (_, r) => el('option', { value: String(r) }, String(r))));
      select.dataset.job = id;
    }
    select.value = String(replica);
    select.disabled = replicas === 1;
    setText($('log-title'), `Output of ${id}`);
    $('log-panel').hidden = false;
    try {
      const text = await apiText(`/api/v1/jobs/${encodeURIComponent(id)}/logs?replica=${replica}`);
      if (this.logJob !== id || Number(select.value) !== replica) return;  // another was asked for meanwhile
      setText($('log-text'), text);
      $('log-error').hidden = true;
    } catch (err) {
      setText($('log-error'), `cannot read the output of ${id}: ${err.message}`);
      $('log-error').hidden = false;
    }
  }

  makeRow(id) {
    const row = {
      id: el('td', { class: 'mono', 'data-testid': 'job-id' }, id),
      name: el('td'),
      tenant: el('td'),
      gpus: el('td', { class: 'num' }),
      priority: el('td', { class: 'num' }),
      state: el('span', { class: 'state', 'data-testid': 'job-state' }),
      reason: el('td', { class: 'reason', 'data-testid': 'job-reason' }),
      where: el('td', { class: 'where', 'data-testid': 'job-where' }),
      image: el('td', { class: 'mono', 'data-testid': 'job-image' }),
      actions: el('td', { class: 'actions' }),
      button: null,
    };
    row.actions.append(el('button', { type: 'button', class: 'btn-small', 'data-testid': 'job-logs' }, 'Logs'));
    row.tr = el('tr', { 'data-testid': 'job-row', 'data-job': id },
      row.id, row.name, row.tenant, row.gpus, row.priority, el('td', {}, row.state), row.reason, row.where, row.image, row.actions);
    return row;
  }

  fillRow(row, job, now) {
    const spec = job.spec || {};
    const s = job.status || {};
    setText(row.name, spec.name || '');
    setText(row.tenant, spec.tenant || 'default');
    setText(row.gpus, gpusText(spec));
    setText(row.priority, String(num(spec.priority)));
    setText(row.state, enumLabel(s.state, 'JOB_STATE_'));
    setAttr(row.state, 'data-state', stateGroup(s.state) === 'running' ? 'running' : String(s.state || '').replace('JOB_STATE_', '').toLowerCase());
    setText(row.reason, s.message || '');
    setAttr(row.reason, 'title', s.message || '');
    setText(row.where, whereText(job, now));
    setText(row.image, imageText(job));
    setAttr(row.image, 'title', s.imageDigest || '');
    const ended = ENDED.has(s.state);
    if (!ended && !row.button) {
      row.button = el('button', { type: 'button', class: 'btn-small danger', 'data-testid': 'job-cancel' }, 'Cancel');
      row.actions.append(row.button);
    } else if (ended && row.button) {
      row.button.remove();
      row.button = null;
    }
    if (row.button && !row.button.dataset.busy) {
      const cancelling = s.state === 'JOB_STATE_CANCELLING';
      row.button.disabled = cancelling;
      setText(row.button, cancelling ? 'Cancelling…' : 'Cancel');
    }
  }

  async cancel(id, button) {
    button.disabled = true;
    button.dataset.busy = '1';
    try {
      await api(`/api/v1/jobs/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
    } catch (err) {
      setText($('jobs-error'), `cannot cancel ${id}: ${err.message}`);
      $('jobs-error').hidden = false;
    } finally {
      delete button.dataset.busy;
      button.disabled = false;
    }
    await this.refresh();
  }

  async submit() {
    const form = $('submit-form');
    const result = $('submit-result');
    const command = form.elements.command.value.trim();
    const gpus = Number(form.elements.gpus.value);
    const tenant = form.elements.tenant.value.trim();
    const priority = Number(form.elements.priority.value || 0);
    const image = form.elements.image.value.trim();
    const fail = (message) => {
      result.className = 'submit-result error';
      setText(result, message);
    };
    if (!command && !image) return fail('the command is empty (or give an image, whose own command runs)');
    if (!Number.isInteger(gpus)) return fail('GPUs must be a whole number');
    if (!Number.isInteger(priority)) return fail('priority must be a whole number');
    const spec = { command: command ? ['sh', '-c', command] : [], gpus, priority };
    if (tenant) spec.tenant = tenant;
    // The server checks the reference (and answers 400 naming it).
    if (image) spec.container = { image };
    const button = form.querySelector('[data-testid="submit-button"]');
    button.disabled = true;
    result.className = 'submit-result';
    setText(result, 'submitting…');
    try {
      const r = await api('/api/v1/jobs', { method: 'POST', body: { spec } });
      const id = r && (r.job ? r.job.id : r.id);
      result.className = 'submit-result ok';
      setText(result, `submitted ${id}`);
      result.dataset.jobId = id || '';
      this.refresh();
    } catch (err) {
      fail(err.message);
    } finally {
      button.disabled = false;
    }
  }
}
