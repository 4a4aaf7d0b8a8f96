// Logging in and out: the session cookie, the one-time login link, the
// login panel and the "who am I" corner of the top bar.
//
// At start:
//   - a login link (`drover ui`, or <data-dir>/dashboard-url) opens the page
//     at /ui/#code=<one-time code>: the fragment is removed from the address
//     (and the history) at once, then the code is exchanged for a session
//     with POST /api/v1/session {"code": ...};
//   - otherwise GET /api/v1/session asks whether the cookie is still good.
// Either way the answer is {principal: {name, tenant, role}, csrfToken}: the
// server set the HttpOnly cookie; the CSRF token stays in memory (api.js).
// Without a session the login panel asks for an API token, which is POSTed
// once and never stored by the page. Any 401 later (the server restarted,
// the session expired) brings the panel back.

import { ApiError, api, setCsrfToken, setUnauthenticatedHandler } from './api.js';
import { setText } from './format.js';

const $ = (id) => document.getElementById(id);

// The one-time code of a login link in `hash` ('#code=...'), or ''.
export function loginCodeFrom(hash) {
  const h = String(hash || '').replace(/^#/, '');
  if (!h.includes('code=')) return '';
  return new URLSearchParams(h).get('code') || '';
}

export class Session {
  // onLogin(principal): a session began (at start or from the panel);
  // onLogout(): it ended (logged out, or a 401).
  constructor({ onLogin, onLogout }) {
    this.onLogin = onLogin;
    this.onLogout = onLogout;
    this.principal = null;
    this.busy = false;
    this.form = $('login-form');
    this.form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.loginWithToken(this.form.elements.token.value.trim());
    });
    $('logout').addEventListener('click', () => this.logout());
    setUnauthenticatedHandler(() => {
      if (this.principal) this.signedOut('Your session has ended: log in again.');
    });
  }

  get signedIn() {
    return this.principal !== null;
  }

  async start() {
    const code = loginCodeFrom(location.hash);
    if (code) {
      // Out of the address bar and the history before anything else: the
      // code is single-use, but it should not linger where it can be seen.
      history.replaceState(null, '', location.pathname + location.search);
      try {
        this.begin(await api('/api/v1/session', { method: 'POST', body: { code }, quiet401: true }));
        return;
      } catch (err) {
        if (err.httpStatus !== 401) {
          this.signedOut(`Cannot log in: ${err.message}`);
          return;
        }
      }
      // A used or expired link; the cookie may still hold a session.
      try {
        this.begin(await api('/api/v1/session', { quiet401: true }));
      } catch {
        this.signedOut('This login link was already used or has expired: run drover ui for a new one, or paste a token.');
      }
      return;
    }
    try {
      this.begin(await api('/api/v1/session', { quiet401: true }));
    } catch (err) {
      this.signedOut(err.httpStatus === 401 ? '' : `Cannot reach the server: ${err.message}`);
    }
  }

  // Is the session still valid? For the event stream before it reopens:
  // false (and the login panel) on a 401; true when it cannot tell.
  async check() {
    if (!this.signedIn) return false;
    try {
      const r = await api('/api/v1/session', { quiet401: true });
      if (r && r.csrfToken) setCsrfToken(r.csrfToken);
      return true;
    } catch (err) {
      if (err instanceof ApiError && err.httpStatus === 401) {
        this.signedOut('Your session has ended: log in again.');
        return false;
      }
      return true;
    }
  }

  async loginWithToken(token) {
    if (this.busy) return;
    if (!token) {
      this.showError('Paste an API token (drv_...).');
      return;
    }
    this.busy = true;
    const button = this.form.querySelector('[data-testid="login-button"]');
    button.disabled = true;
    this.showError('');
    try {
      const r = await api('/api/v1/session', { method: 'POST', body: { token }, quiet401: true });
      this.form.reset();
      this.begin(r);
    } catch (err) {
      this.showError(err.httpStatus === 401 ? `That token was not accepted: ${err.message}` : `Cannot log in: ${err.message}`);
    } finally {
      this.busy = false;
      button.disabled = false;
    }
  }

  async logout() {
    try {
      await api('/api/v1/session', { method: 'DELETE', quiet401: true });
    } catch (err) {
      // Ended already (401), or the server is away: the page forgets it anyway.
      if (err.httpStatus !== 401) console.warn('drover: logout:', err.message);
    }
    this.signedOut('You have logged out.');
  }

  begin(r) {
    const p = (r && r.principal) || {};
    this.principal = { name: p.name || '', tenant: p.tenant || '', role: p.role || '' };
    setCsrfToken(r && r.csrfToken);
    setText($('session-name'), this.principal.name || '(unnamed)');
    setText($('session-tenant'), this.principal.tenant || '–');
    setText($('session-role'), this.principal.role || '–');
    $('session').title = `logged in as ${this.principal.name}, tenant ${this.principal.tenant}, role ${this.principal.role}`;
    $('session').hidden = false;
    $('login').hidden = true;
    document.body.dataset.auth = 'signed-in';
    this.onLogin(this.principal);
  }

  signedOut(message) {
    const was = this.principal !== null;
    this.principal = null;
    setCsrfToken('');
    $('session').hidden = true;
    $('login').hidden = false;
    document.body.dataset.auth = 'signed-out';
    this.showError(message, 'note');
    if (was) this.onLogout();
    this.form.elements.token.focus();
  }

  showError(message, kind = 'error') {
    const box = $('login-error');
    box.className = kind === 'note' ? 'login-note' : 'error';
    setText(box, message || '');
    box.hidden = !message;
  }
}
