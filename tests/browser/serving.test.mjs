// The Models tab's arithmetic (web/src/serving.js), without a browser: the
// usage snapshot's parsing and the rates taken from successive polls.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RateWindow, mergedLatency, parseUsage, totals } from '../../web/src/serving.js';

const row = (tenant, model, key, requests, errors = 0, prompt = 0, completion = 0) => ({
  tenant, model, key, requests, errors, prompt_tokens: prompt, completion_tokens: completion,
});

test('parseUsage reads the gateway\'s rows, numbers or int64 strings, either spelling', () => {
  const rows = parseUsage({
    usage: [
      row('prod', 'llama', 'k1', 3, 1, 30, 12),
      { tenant: 'lab', model: 'bge', key: 'k2', requests: '5', errors: '0', promptTokens: '40', completionTokens: '0', latencyP50Ms: 4, latencyP99Ms: 9 },
      { tenant: 'lab', model: 'x', key: 'k3', requests: 1, latency_p50_ms: -1 },
      null,
    ],
  });
  assert.equal(rows.length, 3);
  assert.deepEqual(rows[0], { tenant: 'prod', model: 'llama', key: 'k1', requests: 3, errors: 1, promptTokens: 30, completionTokens: 12, p50Ms: null, p99Ms: null });
  assert.deepEqual(rows[1], { tenant: 'lab', model: 'bge', key: 'k2', requests: 5, errors: 0, promptTokens: 40, completionTokens: 0, p50Ms: 4, p99Ms: 9 });
  assert.equal(rows[2].p50Ms, null, 'a negative latency is no latency');
  assert.deepEqual(parseUsage({}), []);
  assert.deepEqual(parseUsage(null), []);
  assert.deepEqual(totals(rows), { requests: 9, errors: 1, promptTokens: 70, completionTokens: 12 });
  assert.deepEqual(totals(rows, (r) => r.tenant === 'lab'), { requests: 6, errors: 0, promptTokens: 40, completionTokens: 0 });
});

test('RateWindow: rates between the oldest and newest poll of the window', () => {
  const w = new RateWindow(10000);
  assert.equal(w.rate(), null, 'no rate before two polls');
  w.add(0, parseUsage({ usage: [row('a', 'm', 'k', 10, 0, 100, 50)] }));
  assert.equal(w.rate(), null);
  assert.equal(w.seconds(), 0);
  w.add(2000, parseUsage({ usage: [row('a', 'm', 'k', 14, 2, 140, 90)] }));
  assert.equal(w.seconds(), 2);
  assert.deepEqual(w.rate(), { requests: 2, errors: 1, promptTokens: 20, completionTokens: 20, tokens: 40 });
  // A row that appears counts from zero; `pick` selects rows.
  w.add(4000, parseUsage({ usage: [row('a', 'm', 'k', 18, 2, 180, 130), row('b', 'n', 'k', 8, 0, 8, 8)] }));
  assert.equal(w.seconds(), 4);
  assert.equal(w.rate().requests, (8 + 8) / 4);
  assert.equal(w.rate((r) => r.tenant === 'b').requests, 2);
  assert.equal(w.rate((r) => r.tenant === 'nobody').requests, 0);
  // Polls older than the window drop out (the newest always stays).
  w.add(13000, parseUsage({ usage: [row('a', 'm', 'k', 18, 2, 180, 130), row('b', 'n', 'k', 8, 0, 8, 8)] }));
  assert.equal(w.seconds(), 13 - 4);
  assert.equal(w.rate().requests, 0);
  w.add(60000, parseUsage({ usage: [row('a', 'm', 'k', 18, 2, 180, 130), row('b', 'n', 'k', 8, 0, 8, 8)] }));
  assert.equal(w.seconds(), 0, 'after a long gap the window starts again');
  assert.equal(w.rate(), null);
});

test('RateWindow: a counter that goes down (a restarted gateway) starts the window again', () => {
  const w = new RateWindow(10000);
  w.add(0, parseUsage({ usage: [row('a', 'm', 'k', 100)] }));
  w.add(2000, parseUsage({ usage: [row('a', 'm', 'k', 110)] }));
  assert.equal(w.rate().requests, 5);
  w.add(4000, parseUsage({ usage: [row('a', 'm', 'k', 3)] }));
  assert.equal(w.rate(), null, 'no negative rate across a restart');
  w.add(6000, parseUsage({ usage: [row('a', 'm', 'k', 7)] }));
  assert.equal(w.rate().requests, 2);
  // A row that vanished is a restart too.
  w.add(8000, parseUsage({ usage: [] }));
  assert.equal(w.rate(), null);
});

test('mergedLatency: one row exactly, several as a weighted p50 and the largest p99', () => {
  const one = parseUsage({ usage: [{ ...row('a', 'm', 'k', 4), latency_p50_ms: 10, latency_p99_ms: 40 }] });
  assert.deepEqual(mergedLatency(one), { p50Ms: 10, p99Ms: 40, exact: true });
  const two = parseUsage({
    usage: [
      { ...row('a', 'm', 'k', 3), latency_p50_ms: 10, latency_p99_ms: 40 },
      { ...row('b', 'm', 'k', 1), latency_p50_ms: 30, latency_p99_ms: 90 },
      { ...row('c', 'm', 'k', 0), latency_p50_ms: 1000, latency_p99_ms: 5000 },
    ],
  });
  assert.deepEqual(mergedLatency(two), { p50Ms: 15, p99Ms: 90, exact: false });
  assert.deepEqual(mergedLatency(parseUsage({ usage: [row('a', 'm', 'k', 5)] })), { p50Ms: null, p99Ms: null, exact: true });
});
