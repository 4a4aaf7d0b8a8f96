#!/usr/bin/env node
// Measures server.mjs on the tiny random GGUF: start to /health 200, the
// model's own load time (from the server's log), time to first token and
// tokens/s of one request, and tokens/s of several at once.
//
//   node bench.mjs [--threads N] [--parallel N] [--tokens N] [--runs N]
//
// Prints one JSON object. Numbers in README.md.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { buildGguf } from "./make_gguf.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: a } = parseArgs({
  options: {
    threads: { type: "string", default: "1" },
    parallel: { type: "string", default: "2" },
    tokens: { type: "string", default: "256" },
    runs: { type: "string", default: "5" },
  },
});
const tokens = Number(a.tokens);
const runs = Number(a.runs);
const parallel = Number(a.parallel);

const dir = mkdtempSync(path.join(tmpdir(), "drover-llama-bench-"));
const modelFile = path.join(dir, "tiny.gguf");
writeFileSync(modelFile, buildGguf({ seed: 1234 }));
const t0 = performance.now();
const server = spawn(
  process.execPath,
  [path.join(here, "server.mjs"), "--model-file", modelFile, "--host", "127.0.0.1", "--port", "0",
    "--model-name", "tiny", "--threads", a.threads, "--parallel", a.parallel],
  { stdio: ["ignore", "pipe", "inherit"] },
);
let log = "";
server.stdout.on("data", (d) => (log += d));
const cleanup = () => {
  server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
};
try {
  const deadline = Date.now() + 60_000;
  let base = null;
  for (;;) {
    if (Date.now() > deadline) throw new Error(`server not ready in 60 s:\n${log}`);
    const port = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/)?.[1];
    if (port) {
      base = `http://127.0.0.1:${port}`;
      const r = await fetch(`${base}/health`).catch(() => null);
      if (r?.status === 200) break;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  const readyMs = performance.now() - t0;
  const loadMs = Number(log.match(/loaded from .* in (\d+) ms/)?.[1]);

  async function one(seed) {
    const s = performance.now();
    const res = await fetch(`${base}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", prompt: "Once upon a time", max_tokens: tokens, seed, stream: true }),
    });
    const reader = res.body.getReader();
    let first = null;
    for (;;) {
      const { done } = await reader.read();
      first ??= performance.now() - s;
      if (done) break;
    }
    return { ttft: first, total: performance.now() - s };
  }
  await one(0); // warm-up
  const single = [];
  for (let i = 0; i < runs; i++) single.push(await one(i + 1));
  const med = (xs) => xs.slice().sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  const c0 = performance.now();
  await Promise.all(Array.from({ length: parallel }, (_, i) => one(100 + i)));
  const concMs = performance.now() - c0;
  console.log(
    JSON.stringify(
      {
        threads: Number(a.threads),
        parallel,
        tokens_per_request: tokens,
        start_to_health_ms: Math.round(readyMs),
        model_load_ms: loadMs,
        single_ttft_ms_median: Number(med(single.map((r) => r.ttft)).toFixed(2)),
        single_tokens_per_s_median: Math.round(tokens / (med(single.map((r) => r.total)) / 1000)),
        concurrent_requests: parallel,
        concurrent_tokens_per_s: Math.round((parallel * tokens) / (concMs / 1000)),
      },
      null,
      1,
    ),
  );
} finally {
  cleanup();
}
