// The Models tab's actions on one deployment: scale it
// (POST /api/v1/deployments/{name}/scale?tenant=T {"replicas": N}) and
// undeploy it (DELETE /api/v1/deployments/{name}?tenant=T, after a
// confirmation in the page). Names are per tenant: the tenant says whose
// (the server heeds another tenant's for an admin only).
//
// Shown only to a session that may change the deployment (canChange); the
// server checks again, and whatever it refuses (403, 404, a count outside
// 0..256) is shown under the deployment, never swallowed. The calls go
// through api() like every change the dashboard makes: the session cookie,
// the CSRF token in X-CSRF-Token and Content-Type: application/json.
//
// One DeploymentActions per deployment shown, owned by Models (models.js),
// which hands it each poll's deployment (fill) and is told what a call
// changed (onChanged) so the table shows it before the next poll.

import { api } from './api.js';
import { el, num, setAttr, setText } from './format.js';

// The most replicas a deployment may have (kMaxDeploymentReplicas, server/deployments.h).
export const MAX_REPLICAS = 256;

// May `principal` scale and undeploy a deployment of `tenant`? As the
// server's Principal::CanChange (src/drover/auth/token.h): an admin any
// tenant's, a user or tenant-admin its own tenant's; a viewer none.
export function canChange(principal, tenant) {
  if (!principal) return false;
  if (principal.role === 'admin') return true;
  return (principal.role === 'user' || principal.role === 'tenant-admin') && principal.tenant === (tenant || 'default');
}

// The replica count typed into the box: a whole number, or an error message.
// Range is the server's to check (its message names the limits).
export function parseReplicas(text) {
  const t = String(text ?? '').trim();
  if (!/^-?\d+$/.test(t)) return { error: `replicas must be a whole number, not '${t.slice(0, 20)}'` };
  return { replicas: Number(t) };
}

// What a refused call shows: 'cannot scale echo to 300: replicas 300 is
// outside 0..256 (HTTP 400)'; a 403 says first that it is not allowed.
export function failureText(what, err) {
  const status = err && err.httpStatus;
  const message = err ? err.message : 'unknown error';
  if (status === 403) return `${what}: not allowed (HTTP 403): ${message}`;
  return status ? `${what}: ${message} (HTTP ${status})` : `${what}: ${message}`;
}

export class DeploymentActions {
  // onChanged(name, deployment): a call succeeded; deployment is the
  // server's answer for a scale, null after an undeploy.
  constructor(name, { tenant = '', onChanged }) {
    this.name = name;
    this.path = `/api/v1/deployments/${encodeURIComponent(name)}`;
    this.query = tenant ? `?tenant=${encodeURIComponent(tenant)}` : '';
    this.onChanged = onChanged;
    this.busy = false;
    this.dirty = false;  // the box holds what the operator typed: polls leave it alone

    this.input = el('input', {
      type: 'number', min: '0', max: String(MAX_REPLICAS), step: '1', class: 'replicas-input',
      'data-testid': 'deployment-scale-input', 'aria-label': `replicas of ${name}`,
    });
    this.scaleButton = el('button', { type: 'button', class: 'btn-small', 'data-testid': 'deployment-scale' }, 'Scale');
    this.autoscale = el('span', { class: 'muted autoscale', 'data-testid': 'deployment-autoscale' });
    this.undeployButton = el('button', { type: 'button', class: 'btn-small danger', 'data-testid': 'deployment-undeploy' },
      'Undeploy');
    this.confirmYes = el('button', { type: 'button', class: 'btn-small danger', 'data-testid': 'deployment-undeploy-confirm' },
      `Yes, undeploy ${name}`);
    this.confirmNo = el('button', { type: 'button', class: 'btn-small secondary', 'data-testid': 'deployment-undeploy-cancel' },
      'Keep it');
    this.confirm = el('span', { class: 'confirm', 'data-testid': 'deployment-undeploy-confirmation', hidden: true },
      `Undeploy ${name}? Its replicas stop and clients can no longer call it.`, this.confirmYes, this.confirmNo);
    this.error = el('div', { class: 'error action-error', 'data-testid': 'deployment-action-error', role: 'alert', hidden: true });
    this.root = el('div', { class: 'deployment-actions', 'data-testid': 'deployment-actions', 'data-deployment': name },
      el('label', { class: 'field-inline' }, 'Replicas', this.input), this.scaleButton, this.autoscale,
      this.undeployButton, this.confirm, this.error);

    this.input.addEventListener('input', () => {
      this.dirty = true;
    });
    this.input.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') this.scale();
      if (ev.key === 'Escape') {
        this.dirty = false;
        this.input.value = String(this.current);
      }
    });
    this.scaleButton.addEventListener('click', () => this.scale());
    this.undeployButton.addEventListener('click', () => this.showConfirm(true));
    this.confirmNo.addEventListener('click', () => this.showConfirm(false));
    this.confirmYes.addEventListener('click', () => this.undeploy());
    this.current = 0;
  }

  // The deployment as the last poll (or call) saw it.
  fill(d) {
    const spec = d.spec || {};
    const s = d.status || {};
    this.current = num(s.desiredReplicas);
    if (!this.dirty && document.activeElement !== this.input) this.input.value = String(this.current);
    const max = num(spec.maxReplicas);
    if (max > 0) {
      const min = num(spec.minReplicas);
      setText(this.autoscale, `auto-scaled: min ${min}, max ${max}`);
      setAttr(this.autoscale, 'title', `a count set here is held to ${min}..${max}, and the gateways' load moves it on from there`);
    } else {
      setText(this.autoscale, '');
      setAttr(this.autoscale, 'title', '');
    }
    this.autoscale.hidden = max <= 0;
  }

  showConfirm(on) {
    this.confirm.hidden = !on;
    this.undeployButton.hidden = on;
    if (on) this.confirmNo.focus();
  }

  showError(message) {
    setText(this.error, message || '');
    this.error.hidden = !message;
  }

  setBusy(on) {
    this.busy = on;
    for (const b of [this.scaleButton, this.undeployButton, this.confirmYes, this.confirmNo]) b.disabled = on;
    this.input.disabled = on;
  }

  async scale() {
    if (this.busy) return;
    const parsed = parseReplicas(this.input.value);
    if (parsed.error) {
      this.showError(`cannot scale ${this.name}: ${parsed.error}`);
      return;
    }
    this.setBusy(true);
    this.showError('');
    try {
      const d = await api(`${this.path}/scale${this.query}`,
        { method: 'POST', body: { replicas: parsed.replicas } });
      this.dirty = false;
      this.onChanged(this.name, d);
    } catch (err) {
      this.showError(failureText(`cannot scale ${this.name} to ${parsed.replicas}`, err));
    } finally {
      this.setBusy(false);
    }
  }

  async undeploy() {
    if (this.busy) return;
    this.setBusy(true);
    this.showError('');
    try {
      await api(`${this.path}${this.query}`, { method: 'DELETE' });
      this.onChanged(this.name, null);
    } catch (err) {
      this.showConfirm(false);
      this.showError(failureText(`cannot undeploy ${this.name}`, err));
    } finally {
      this.setBusy(false);
    }
  }
}
