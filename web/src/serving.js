// The gateway's usage counters and the rates the Models tab derives from
// them. No DOM here.
//
// GET /api/v1/serving/usage answers the gateway's usage snapshot
// (Gateway::UsageJson, src/drover/gateway/): cumulative counters since the
// gateway started, one row per tenant, model and key. parseUsage is the one
// place that knows its shape.
//
// The server sends no rates: the page polls every 2 s and RateWindow turns
// successive snapshots into requests, tokens and errors per second over the
// last few seconds (it says how many).

import { num } from './format.js';

// Either spelling: the gateway writes snake_case; a proto message printed
// as JSON would be lowerCamelCase.
function field(row, snake, camel) {
  if (row[snake] !== undefined) return row[snake];
  return row[camel];
}

// A latency in milliseconds, or null when the row has none (absent or < 0).
function latency(v) {
  if (v === undefined || v === null || v === '') return null;
  const n = num(v);
  return Number.isFinite(n) && n >= 0 ? n : null;
}

// {usage: [{tenant, model, key, requests, errors, prompt_tokens,
// completion_tokens, latency_p50_ms?, latency_p99_ms?}]} (numbers or int64
// strings) -> [{tenant, model, key, requests, errors, promptTokens,
// completionTokens, p50Ms, p99Ms}]. Anything else -> [].
export function parseUsage(json) {
  const rows = json && Array.isArray(json.usage) ? json.usage : [];
  return rows.filter((r) => r && typeof r === 'object').map((r) => ({
    tenant: String(r.tenant ?? ''),
    model: String(r.model ?? ''),
    key: String(r.key ?? ''),
    requests: num(r.requests),
    errors: num(r.errors),
    promptTokens: num(field(r, 'prompt_tokens', 'promptTokens')),
    completionTokens: num(field(r, 'completion_tokens', 'completionTokens')),
    p50Ms: latency(field(r, 'latency_p50_ms', 'latencyP50Ms')),
    p99Ms: latency(field(r, 'latency_p99_ms', 'latencyP99Ms')),
  }));
}

export const rowKey = (r) => `${r.tenant}\u0000${r.model}\u0000${r.key}`;

// Sums of rows (those `pick` accepts).
export function totals(rows, pick = () => true) {
  const t = { requests: 0, errors: 0, promptTokens: 0, completionTokens: 0 };
  for (const r of rows) {
    if (!pick(r)) continue;
    t.requests += r.requests;
    t.errors += r.errors;
    t.promptTokens += r.promptTokens;
    t.completionTokens += r.completionTokens;
  }
  return t;
}

// Latency over several rows, which the snapshot gives per row as
// percentiles (they cannot be merged exactly): p50 as the request-weighted
// mean of the rows' p50s, p99 as the largest p99. `exact` when one row
// with requests is all there is.
export function mergedLatency(rows) {
  let weight = 0;
  let p50Sum = 0;
  let p99 = null;
  let withData = 0;
  for (const r of rows) {
    if (r.p50Ms !== null && r.requests > 0) {
      p50Sum += r.p50Ms * r.requests;
      weight += r.requests;
      withData++;
    }
    if (r.p99Ms !== null && r.requests > 0) p99 = p99 === null ? r.p99Ms : Math.max(p99, r.p99Ms);
  }
  return { p50Ms: weight > 0 ? p50Sum / weight : null, p99Ms: p99, exact: withData <= 1 };
}

// Snapshots of the usage rows over the last `windowMs`; rates are the
// difference between the newest and the oldest one kept, over the time
// between them. A counter that went down (the gateway restarted) starts the
// window again.
export class RateWindow {
  constructor(windowMs = 10000) {
    this.windowMs = windowMs;
    this.samples = [];  // [{t (ms), rows: Map(rowKey -> row)}], oldest first
  }

  // `t`: when the snapshot was taken (ms, monotonic).
  add(t, rows) {
    const map = new Map(rows.map((r) => [rowKey(r), r]));
    const last = this.samples[this.samples.length - 1];
    if (last) {
      let reset = false;
      for (const [k, old] of last.rows) {
        const now = map.get(k);
        if (!now || now.requests < old.requests || now.errors < old.errors ||
            now.promptTokens < old.promptTokens || now.completionTokens < old.completionTokens) {
          reset = true;
          break;
        }
      }
      if (reset) this.samples = [];
    }
    this.samples.push({ t, rows: map });
    while (this.samples.length > 1 && this.samples[0].t < t - this.windowMs) this.samples.shift();
  }

  clear() {
    this.samples = [];
  }

  // Seconds between the oldest and newest snapshot (0 with fewer than two).
  seconds() {
    if (this.samples.length < 2) return 0;
    return (this.samples[this.samples.length - 1].t - this.samples[0].t) / 1000;
  }

  // {requests, errors, tokens, promptTokens, completionTokens} per second
  // over the rows `pick` accepts; null before there are two snapshots.
  rate(pick = () => true) {
    const dt = this.seconds();
    if (!(dt > 0)) return null;
    const first = this.samples[0].rows;
    const last = this.samples[this.samples.length - 1].rows;
    const d = { requests: 0, errors: 0, promptTokens: 0, completionTokens: 0 };
    for (const [k, r] of last) {
      if (!pick(r)) continue;
      // A row that appeared within the window counted from zero.
      const o = first.get(k) || { requests: 0, errors: 0, promptTokens: 0, completionTokens: 0 };
      d.requests += r.requests - o.requests;
      d.errors += r.errors - o.errors;
      d.promptTokens += r.promptTokens - o.promptTokens;
      d.completionTokens += r.completionTokens - o.completionTokens;
    }
    return {
      requests: d.requests / dt,
      errors: d.errors / dt,
      promptTokens: d.promptTokens / dt,
      completionTokens: d.completionTokens / dt,
      tokens: (d.promptTokens + d.completionTokens) / dt,
    };
  }
}
