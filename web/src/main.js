// The Drover dashboard: one page, five tabs, fed by the server's event
// stream (GET /api/v1/events: "fleet" and "scheduler" every ~2 s) and by
// plain REST calls for jobs, deployments and usage (Models, polled every
// 2 s while shown), tenants and GPU history. Nothing is fetched
// before a session exists (session.js: login link, cookie or login panel).

import 'uplot/dist/uPlot.min.css';
import './style.css';

import { api, LiveStream } from './api.js';
import { clock, dateFromNanos, setAttr, setText } from './format.js';
import { Jobs } from './jobs.js';
import { Models } from './models.js';
import { Overview } from './overview.js';
import { Scheduler } from './scheduler.js';
import { Session, loginCodeFrom } from './session.js';
import { Tenants } from './tenants.js';

const VIEWS = ['overview', 'jobs', 'models', 'tenants', 'scheduler'];
const $ = (id) => document.getElementById(id);

// Read by the browser tests: the cost of applying one fleet update.
const stats = { lastUpdateMs: 0, maxUpdateMs: 0, updates: 0 };
window.__droverStats = stats;

const overview = new Overview();
const jobs = new Jobs();
const models = new Models();
const tenants = new Tenants();
const scheduler = new Scheduler();
let active = null;
let fleetEvents = 0;
let lastFleetAt = 0;

function currentView() {
  const name = location.hash.replace(/^#\/?/, '');
  return VIEWS.includes(name) ? name : 'overview';
}

function show(name) {
  active = name;
  for (const v of VIEWS) {
    const on = v === name;
    $(`view-${v}`).hidden = !on;
    const tab = document.querySelector(`[data-testid="tab-${v}"]`);
    tab.classList.toggle('active', on);
    tab.setAttribute('aria-selected', on ? 'true' : 'false');
  }
  if (name === 'overview') overview.show();
  if (name === 'jobs') jobs.refresh();
  if (name === 'models') models.refresh();
  if (name === 'tenants') tenants.refresh();
}

function renderFleet(fleet) {
  const t0 = performance.now();
  overview.render(fleet);
  scheduler.noteFleet(fleet);
  const ms = performance.now() - t0;
  stats.lastUpdateMs = ms;
  stats.maxUpdateMs = Math.max(stats.maxUpdateMs, ms);
  stats.updates++;
}

function onFleetEvent(fleet) {
  renderFleet(fleet);
  fleetEvents++;
  lastFleetAt = performance.now();
  const last = document.querySelector('[data-testid="last-update"]');
  last.setAttribute('data-updates', String(fleetEvents));
  const at = dateFromNanos(fleet.timeUnixNanos) || new Date();
  setText(last, `updated ${clock(at)}`);
  last.classList.remove('stale');
  if (active === 'tenants') tenants.refresh();
}

function onConnection(state, detail) {
  const conn = $('conn');
  setAttr(conn, 'data-state', state);
  const text = {
    live: 'live', connecting: 'connecting', reconnecting: 'reconnecting', offline: 'offline', error: 'server error',
    'signed-out': 'logged out',
  }[state] || state;
  setText(conn.querySelector('.conn-text'), text);
  setAttr(conn, 'title', `live updates: ${text}${detail ? `: ${detail}` : ''}`);
  if (state !== 'live') document.querySelector('[data-testid="last-update"]').classList.add('stale');
}

for (const v of VIEWS) {
  document.querySelector(`[data-testid="tab-${v}"]`).addEventListener('click', () => {
    if (currentView() !== v || active !== v) {
      history.replaceState(null, '', `#${v}`);
      show(v);
    }
  });
}
window.addEventListener('hashchange', () => {
  if (loginCodeFrom(location.hash)) session.start();  // a login link pasted into this tab
  else if (session.signedIn) show(currentView());
});

const stream = new LiveStream('/api/v1/events', {
  onEvent: (name, data) => {
    if (name === 'fleet') onFleetEvent(data);
    else if (name === 'scheduler') scheduler.render(data);
  },
  onState: onConnection,
  canReopen: () => session.check(),
});

// Job changes as the control loop commits them (every job the session may
// see): the Jobs tab applies each, no polling. Reopened after a drop with a
// fresh list, since changes in between were missed.
let jobsLive = false;
const jobStream = new LiveStream('/api/v1/watch', {
  events: ['job'],
  staleMs: 0,
  onEvent: (name, data) => jobs.apply(data),
  onState: (state) => {
    const live = state === 'live';
    if (live && !jobsLive && active === 'jobs') jobs.refresh();
    jobsLive = live;
  },
  canReopen: () => session.check(),
});

const session = new Session({
  onLogin: (principal) => {
    models.setPrincipal(principal);
    show(currentView());
    // The first picture without waiting for the stream; the stream repeats it.
    api('/api/v1/fleet').then((f) => { if (!fleetEvents) renderFleet(f); }).catch(() => {});
    api('/api/v1/scheduler').then((s) => scheduler.render(s)).catch(() => {});
    stream.start();
    jobStream.start();
  },
  onLogout: () => {
    models.reset();
    stream.stop();
    jobStream.stop();
  },
});
session.start();

// Without live events (a stream down), the job and tenant tables still poll;
// the Models tab always polls while shown (its rates come from the polls).
setInterval(() => {
  if (!session.signedIn) return;
  if (active === 'models') models.refresh();
  if (active === 'jobs' && !jobsLive) jobs.refresh();
  if (active === 'tenants' && performance.now() - lastFleetAt >= 2500) tenants.refresh();
}, 2000);
