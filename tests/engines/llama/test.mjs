// llama_engine_test: a real llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU
// binaries) behind server.mjs, driven by the official `openai` client.
// Run by run.sh (node --test). The model is a GGUF that make_gguf.mjs writes
// into a temporary directory: random weights, a byte-level vocabulary in
// which every generated token is one printable character.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { buildGguf } from "./make_gguf.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const MODEL = "tiny-llama";
const START_DEADLINE_MS = 60_000;

let dir;
let server;
let serverLog = "";
let base;
let client;

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name.replace(/[:]/g, "\\$&")} (\\S+)$`, "m"));
  assert.ok(m, `metric ${name} in\n${text}`);
  return Number(m[1]);
}

// Polls fn until it returns a truthy value or the deadline passes.
async function until(what, fn, deadlineMs = 10_000) {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) assert.fail(`timed out after ${deadlineMs} ms waiting for ${what}\nserver log:\n${serverLog}`);
    await sleep(20);
  }
}

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "drover-llama-"));
  const modelFile = path.join(dir, "tiny.gguf");
  writeFileSync(modelFile, buildGguf({ seed: 1234 }));

  const t0 = Date.now();
  server = spawn(
    process.execPath,
    [path.join(here, "server.mjs"), "--model-file", modelFile, "--host", "127.0.0.1", "--parallel", "2"],
    // DROVER_PORT=0: the kernel picks the port, the server prints it.
    { env: { ...process.env, DROVER_PORT: "0", DROVER_SERVED_MODEL_NAME: MODEL }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let exited = null;
  server.on("exit", (code, sig) => (exited = `exited with ${code ?? sig}`));
  server.stdout.on("data", (d) => (serverLog += d));
  server.stderr.on("data", (d) => (serverLog += d));

  const port = await until(
    "the server's 'listening on' line",
    () => {
      if (exited) assert.fail(`server.mjs ${exited} before listening:\n${serverLog}`);
      return serverLog.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/)?.[1];
    },
    START_DEADLINE_MS,
  );
  base = `http://127.0.0.1:${port}`;
  // /health is 503 while the model loads, 200 after: poll it with a deadline.
  const codes = new Set();
  await until(
    "/health 200",
    async () => {
      if (exited) assert.fail(`server.mjs ${exited} while loading:\n${serverLog}`);
      const r = await fetch(`${base}/health`).catch(() => null);
      if (r) codes.add(r.status);
      return r?.status === 200;
    },
    START_DEADLINE_MS,
  );
  for (const c of codes) assert.ok(c === 200 || c === 503, `/health answered ${c}`);
  console.log(`# server ready in ${Date.now() - t0} ms (/health answered ${[...codes].join(", ")})`);
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30_000 });
});

after(() => {
  server?.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("models.list names the served model", async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.deepEqual(
    models.map((m) => m.id),
    [MODEL],
  );
  assert.equal(models[0].object, "model");
});

test("chat completion: real tokens and real usage", async () => {
  const t0 = performance.now();
  const r = await client.chat.completions.create({
    model: MODEL,
    messages: [
      { role: "system", content: "You are tiny." },
      { role: "user", content: "Hello there" },
    ],
    max_tokens: 24,
    temperature: 0.8,
    seed: 7,
  });
  const ms = performance.now() - t0;
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, "assistant");
  assert.ok(c.message.content.length > 0, "content is not empty");
  assert.equal(c.finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 24);
  // Every token of this vocabulary that the model emits is one character.
  assert.equal(c.message.content.length, r.usage.completion_tokens);
  // The prompt as the model's chat template renders it, by the server's
  // tokenizer: BOS, the SentencePiece space prefix, one token a character.
  const rendered = "### system:\nYou are tiny.\n### user:\nHello there\n### assistant:\n";
  assert.equal(r.usage.prompt_tokens, 2 + rendered.length);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  console.log(`# chat: ${JSON.stringify(c.message.content)} in ${ms.toFixed(0)} ms`);

  // The same seed gives the same text; temperature 0 is greedy and repeatable.
  const again = await client.chat.completions.create({
    model: MODEL,
    messages: [
      { role: "system", content: "You are tiny." },
      { role: "user", content: "Hello there" },
    ],
    max_tokens: 24,
    temperature: 0.8,
    seed: 7,
  });
  assert.equal(again.choices[0].message.content, c.message.content);
  const g1 = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 8, temperature: 0 });
  const g2 = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 8, temperature: 0 });
  assert.equal(g1.choices[0].message.content, g2.choices[0].message.content);
});

test("completion: prompt_tokens match the tokenizer", async () => {
  const r = await client.completions.create({ model: MODEL, prompt: "Hello world", max_tokens: 10, seed: 3 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].text.length, 10);
  assert.equal(r.usage.completion_tokens, 10);
  const tok = await (
    await fetch(`${base}/tokenize`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ content: "Hello world", add_special: true }) })
  ).json();
  assert.equal(tok.tokens.length, 13); // BOS, "\u2581", then one token per byte
  assert.equal(r.usage.prompt_tokens, tok.tokens.length);
  // Without max_tokens a completion stops at OpenAI's default of 16.
  const d = await client.completions.create({ model: MODEL, prompt: "Hi", seed: 3 });
  assert.equal(d.usage.completion_tokens, 16);
});

test("streaming chat: chunks arrive one by one, usage at the end", async () => {
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Stream please" }],
    max_tokens: 40,
    seed: 11,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let contentChunks = 0;
  let finish = null;
  let usage = null;
  let firstAt = null;
  const t0 = performance.now();
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) {
      assert.equal(chunk.choices.length, 0);
      usage = chunk.usage;
      continue;
    }
    const ch = chunk.choices[0];
    if (ch.delta?.content) {
      firstAt ??= performance.now() - t0;
      text += ch.delta.content;
      contentChunks++;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, "length");
  assert.ok(usage, "a final usage chunk");
  assert.equal(usage.completion_tokens, 40);
  assert.equal(contentChunks, 40, "one chunk a token");
  assert.equal(text.length, 40);
  console.log(`# stream: first token after ${firstAt.toFixed(1)} ms, 40 tokens in ${(performance.now() - t0).toFixed(0)} ms`);

  // The stream's text equals the non-streamed text for the same seed.
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Stream please" }], max_tokens: 40, seed: 11 });
  assert.equal(r.choices[0].message.content, text);
});

test("streaming completion with a stop string", async () => {
  const first = await client.completions.create({ model: MODEL, prompt: "abc", max_tokens: 30, seed: 5 });
  const full = first.choices[0].text;
  const stop = full.slice(10, 12);
  const cut = full.indexOf(stop);
  const stream = await client.completions.create({ model: MODEL, prompt: "abc", max_tokens: 30, seed: 5, stop: [stop], stream: true });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, "stop");
  assert.equal(text, full.slice(0, cut));
});

test("a stream cancelled by the client stops generation and frees its slot", async () => {
  const predictedBefore = await metric("llamacpp:tokens_predicted_total");
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Talk for a long time" }],
    max_tokens: 1900,
    seed: 1,
    stream: true,
  });
  let chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) chunks++;
    if (chunks === 5) {
      stream.controller.abort();
      break;
    }
  }
  await until("requests_processing back to 0", async () => (await metric("llamacpp:requests_processing")) === 0);
  const generated = (await metric("llamacpp:tokens_predicted_total")) - predictedBefore;
  assert.ok(generated >= 5, `generated ${generated}`);
  assert.ok(generated < 1900, `generation stopped early: ${generated} of 1900 tokens`);
  console.log(`# cancel: the engine generated ${generated} tokens of 1900 after the client left at 5`);
  // Both slots serve again.
  const rs = await Promise.all(
    [1, 2, 3].map((s) => client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "again" }], max_tokens: 4, seed: s })),
  );
  for (const r of rs) assert.equal(r.usage.completion_tokens, 4);
});

test("embeddings", async () => {
  const r = await client.embeddings.create({ model: MODEL, input: ["hello world", "goodbye", "hello world"] });
  assert.equal(r.object, "list");
  assert.equal(r.data.length, 3);
  for (const [i, d] of r.data.entries()) {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, 64, "the model's embedding width");
    assert.ok(d.embedding.every(Number.isFinite));
  }
  assert.deepEqual(r.data[0].embedding, r.data[2].embedding, "same input, same vector");
  assert.notDeepEqual(r.data[0].embedding, r.data[1].embedding);
  // BOS + "\u2581" + 11 bytes, BOS + "\u2581" + 7, and 13 again.
  assert.equal(r.usage.prompt_tokens, 13 + 9 + 13);
  const f = await client.embeddings.create({ model: MODEL, input: "hello world", encoding_format: "float" });
  assert.equal(f.data[0].embedding.length, 64);
  for (let i = 0; i < 64; i++) assert.ok(Math.abs(f.data[0].embedding[i] - r.data[0].embedding[i]) < 1e-6);
});

test("OpenAI-shaped errors", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found",
  );
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "messages",
  );
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "max_tokens",
  );
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 5000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded",
  );
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], temperature: 7 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
  );
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: ["a", "b"] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "prompt",
  );
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "x" }],
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tools",
  );
  // Malformed and oversized bodies, straight over HTTP.
  const post = (body, headers = {}) =>
    fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
  let r = await post("{not json");
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.type, "invalid_request_error");
  r = await post(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x".repeat(2 << 20) }] }));
  assert.equal(r.status, 413);
  assert.ok((await r.json()).error.message);
  r = await fetch(`${base}/v1/nothing`);
  assert.equal(r.status, 404);
  assert.ok((await r.json()).error);
  // The server still serves after all of that.
  const ok = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "still there?" }], max_tokens: 3 });
  assert.equal(ok.usage.completion_tokens, 3);
});

test("throughput (reported, not a goal)", async () => {
  const t0 = performance.now();
  const r = await client.completions.create({ model: MODEL, prompt: "Count", max_tokens: 256, seed: 9 });
  const s = (performance.now() - t0) / 1000;
  assert.equal(r.usage.completion_tokens, 256);
  console.log(`# throughput: 256 tokens in ${(s * 1000).toFixed(0)} ms, ${(256 / s).toFixed(0)} tokens/s (1 thread, one request)`);
});
