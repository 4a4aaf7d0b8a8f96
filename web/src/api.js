// Talking to the server: JSON requests and the live event stream.

// The server's error body is {code, status, message}; callers show message.
export class ApiError extends Error {
  constructor(message, httpStatus) {
    super(message);
    this.httpStatus = httpStatus;
  }
}

export async function api(path, { method = 'GET', body } = {}) {
  const init = { method, headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
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
    throw new ApiError(message, response.status);
  }
  return json;
}

// Keeps one EventSource to /api/v1/events open and reopens it when it dies.
//
// The browser retries a dropped stream by itself, but gives up for good when
// the server answers with an error status; and a stream can also stall
// without an error (a proxy holding it). So: a new EventSource after a
// growing back-off when the old one closed, and when nothing arrived for
// `staleMs` (the server sends every ~2 s).
export class LiveStream {
  constructor(url, { onEvent, onState, staleMs = 10000 }) {
    this.url = url;
    this.onEvent = onEvent;
    this.onState = onState;
    this.staleMs = staleMs;
    this.source = null;
    this.retryMs = 1000;
    this.lastEventAt = 0;
    this.retryTimer = 0;
    this.watchdog = setInterval(() => this.checkStale(), 2000);
  }

  start() {
    this.open();
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
    source.addEventListener('fleet', handle('fleet'));
    source.addEventListener('scheduler', handle('scheduler'));
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
    this.retryTimer = setTimeout(() => this.open(), this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, 15000);
  }

  checkStale() {
    if (this.source && performance.now() - this.lastEventAt > this.staleMs) this.scheduleReopen();
  }
}
