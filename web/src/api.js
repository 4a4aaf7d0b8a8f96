// Talking to the server: JSON requests, the login session and the live
// event stream.
//
// Every /api/v1 call is authenticated by the session cookie (drover_session:
// HttpOnly, SameSite=Strict), which the browser sends by itself on these
// same-origin requests. A state-changing call (anything but GET and HEAD)
// also sends Content-Type: application/json, even without a body, and the
// session's CSRF token in X-CSRF-Token: the server refuses it otherwise (415,
// 403). The CSRF token is kept in memory only, never in storage: a reload
// gets it again from GET /api/v1/session.

// The server's error body is {code, status, message}; callers show message.
export class ApiError extends Error {
  constructor(message, httpStatus) {
    super(message);
    this.httpStatus = httpStatus;
  }
}

const SAFE_METHODS = new Set(['GET', 'HEAD']);

let csrfToken = '';
let onUnauthenticated = () => {};

// The CSRF token of the current session ('' when logged out).
export function setCsrfToken(token) {
  csrfToken = token || '';
}

// Called with the ApiError whenever a call is answered 401 (no session, or
// the session ended): session.js shows the login panel.
export function setUnauthenticatedHandler(fn) {
  onUnauthenticated = fn;
}

// `quiet401`: a 401 is the caller's to handle (the session probe and the
// login itself), not a reason to show the login panel.
export async function api(path, { method = 'GET', body, quiet401 = false } = {}) {
  const init = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store' };
  if (!SAFE_METHODS.has(method)) {
    init.headers['Content-Type'] = 'application/json';
    if (csrfToken) init.headers['X-CSRF-Token'] = csrfToken;
    if (body !== undefined) init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(`cannot reach the server: ${err.message}`, 0);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON (a proxy's error page, say): report the start of it.
  }
  if (!response.ok) {
    const message = (json && json.message) || text.slice(0, 200) || response.statusText;
    const err = new ApiError(message, response.status);
    if (response.status === 401 && !quiet401) onUnauthenticated(err);
    throw err;
  }
  return json;
}

// A GET whose answer is text (a job's output), not JSON; errors as api().
export async function apiText(path) {
  let response;
  try {
    response = await fetch(path, { headers: { Accept: 'text/plain' }, credentials: 'same-origin', cache: 'no-store' });
  } catch (err) {
    throw new ApiError(`cannot reach the server: ${err.message}`, 0);
  }
  const text = await response.text();
  if (!response.ok) {
    let message = text.slice(0, 200) || response.statusText;
    try {
      message = JSON.parse(text).message || message;
    } catch {
      // Not JSON: the start of the text stands.
    }
    const err = new ApiError(message, response.status);
    if (response.status === 401) onUnauthenticated(err);
    throw err;
  }
  return text;
}

// Keeps one EventSource open (/api/v1/events, /api/v1/watch) and reopens it
// when it dies; `events` names the server's event types to hand over.
//
// The browser retries a dropped stream by itself, but gives up for good when
// the server answers with an error status; and a stream can also stall
// without an error (a proxy holding it). So: a new EventSource after a
// growing back-off when the old one closed, and when nothing arrived for
// `staleMs` (/api/v1/events sends every ~2 s; 0 for a stream that may be
// quiet for long, such as job changes).
//
// The stream is authenticated by the session cookie like any same-origin
// request. An EventSource cannot tell a 401 from a network error, so before
// reopening it asks `canReopen` (main.js: is the session still valid?);
// false leaves it stopped until start() after the next login.
export class LiveStream {
  constructor(url, { onEvent, onState, staleMs = 10000, canReopen = async () => true, events = ['fleet', 'scheduler'] }) {
    this.url = url;
    this.events = events;
    this.onEvent = onEvent;
    this.onState = onState;
    this.staleMs = staleMs;
    this.canReopen = canReopen;
    this.source = null;
    this.stopped = true;
    this.retryMs = 1000;
    this.lastEventAt = 0;
    this.retryTimer = 0;
    this.watchdog = setInterval(() => this.checkStale(), 2000);
  }

  start() {
    this.stopped = false;
    this.retryMs = 1000;
    this.open();
  }

  // Closes the stream and does not reopen it (logged out).
  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    if (this.source) this.source.close();
    this.source = null;
    this.onState('signed-out');
  }

  open() {
    clearTimeout(this.retryTimer);
    if (this.source) this.source.close();
    this.onState('connecting');
    const source = new EventSource(this.url);
    this.source = source;
    this.lastEventAt = performance.now();
    const handle = (name) => (ev) => {
      if (source !== this.source) return;
      this.lastEventAt = performance.now();
      this.retryMs = 1000;
      this.onState('live');
      let data;
      try {
        data = JSON.parse(ev.data);
      } catch (err) {
        console.warn(`drover: bad ${name} event`, err);
        return;
      }
      this.onEvent(name, data);
    };
    for (const name of this.events) source.addEventListener(name, handle(name));
    source.onopen = () => {
      if (source === this.source) this.onState('live');
    };
    source.onerror = (ev) => {
      if (source !== this.source) return;
      // The server's own "event: error" (it could not read the fleet) also
      // lands here, as a message with data; the stream itself is fine.
      if (ev && typeof ev.data === 'string') {
        this.lastEventAt = performance.now();
        this.onState('error', ev.data);
        return;
      }
      if (source.readyState === EventSource.CLOSED) {
        this.scheduleReopen();
      } else {
        this.onState('reconnecting');  // the browser is retrying by itself
      }
    };
  }

  scheduleReopen() {
    this.onState('offline');
    if (this.source) this.source.close();
    this.source = null;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(async () => {
      if (this.stopped) return;
      let again = true;
      try {
        again = await this.canReopen();
      } catch {
        again = true;  // cannot tell (server down): keep trying
      }
      if (again && !this.stopped) this.open();
    }, this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, 15000);
  }

  checkStale() {
    if (this.staleMs > 0 && !this.stopped && this.source && performance.now() - this.lastEventAt > this.staleMs) {
      this.scheduleReopen();
    }
  }
}
