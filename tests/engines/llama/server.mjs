#!/usr/bin/env node
// An OpenAI-compatible HTTP server around llama.cpp, through node-llama-cpp's
// prebuilt CPU binaries: a real inference engine for Drover's gateway tests
// and a `custom` engine for deployments. See README.md.
//
//   node server.mjs --model-file FILE.gguf [--port N] [--host ADDR]
//                   [--model-name NAME] [--context-size N] [--parallel N]
//                   [--threads N] [--max-body BYTES] [--api-key KEY]
//
// --port defaults to $DROVER_PORT (then 8080); 0 picks a free port. The
// server prints "listening on http://HOST:PORT" on stdout once it listens,
// then loads the model: /health answers 503 while it loads, 200 after.
// --model-name defaults to $DROVER_SERVED_MODEL_NAME, then the file's name
// without ".gguf". A model that fails to load ends the process (exit 1).
//
// Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions,
// POST /v1/completions, POST /v1/embeddings, and like llama.cpp's own
// server POST /tokenize and GET /metrics (llamacpp:* load metrics).
//
// A key (--api-key, else $LLAMA_API_KEY as llama-server reads it, else
// $DROVER_ENGINE_API_KEY, the replica's secret a `custom` deployment gets):
// every request without "Authorization: Bearer KEY" gets 401, but for
// llama-server's public ones (/health, /v1/health, /models, /v1/models).
// No key: it answers anyone.
import http from "node:http";
import path from "node:path";
import { randomBytes, timingSafeEqual } from "node:crypto";
import { parseArgs } from "node:util";
import { Template } from "@huggingface/jinja";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const USAGE = `usage: node server.mjs --model-file FILE.gguf [options]
  --model-file FILE   the GGUF model to serve (or $DROVER_MODEL_FILE)
  --port N            TCP port (default $DROVER_PORT, else 8080; 0: any free port)
  --host ADDR         address to listen on (default 0.0.0.0)
  --model-name NAME   the model's name in the API (default $DROVER_SERVED_MODEL_NAME,
                      else the file name without .gguf)
  --context-size N    tokens of context per request slot (default: the model's, at most 4096)
  --parallel N        requests generated at once, each in its own slot (default 2);
                      more wait in a queue
  --threads N         CPU threads for evaluation (default 1)
  --max-body BYTES    largest request body accepted (default 1048576)
  --api-key KEY       answer only requests with "Authorization: Bearer KEY" (default
                      $LLAMA_API_KEY, else $DROVER_ENGINE_API_KEY; none: anyone)`;

function fatal(msg) {
  console.error(`server.mjs: ${msg}`);
  process.exit(2);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      "model-file": { type: "string" },
      port: { type: "string" },
      host: { type: "string", default: "0.0.0.0" },
      "model-name": { type: "string" },
      "context-size": { type: "string" },
      parallel: { type: "string", default: "2" },
      threads: { type: "string", default: "1" },
      "max-body": { type: "string", default: String(1 << 20) },
      "api-key": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (e) {
  fatal(`${e.message}\n${USAGE}`);
}
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}

function intArg(name, value, min) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) fatal(`--${name} must be an integer >= ${min}, not '${value}'`);
  return n;
}
const modelFile = args["model-file"] ?? process.env.DROVER_MODEL_FILE;
if (!modelFile) fatal(`--model-file is required\n${USAGE}`);
const port = intArg("port", args.port ?? process.env.DROVER_PORT ?? "8080", 0);
const modelName =
  args["model-name"] || process.env.DROVER_SERVED_MODEL_NAME || path.basename(modelFile).replace(/\.gguf$/i, "");
const contextSizeArg = args["context-size"] != null ? intArg("context-size", args["context-size"], 16) : null;
const parallel = intArg("parallel", args.parallel, 1);
const threads = intArg("threads", args.threads, 0);
const maxBody = intArg("max-body", args["max-body"], 1);
const apiKey = args["api-key"] || process.env.LLAMA_API_KEY || process.env.DROVER_ENGINE_API_KEY || "";
// As llama-server's middleware_validate_api_key: these answer without a key.
const PUBLIC_PATHS = new Set(["/health", "/v1/health", "/models", "/v1/models"]);

// The request carries "Authorization: Bearer <apiKey>" (or no key is asked).
function authorized(req) {
  if (!apiKey) return true;
  const got = Buffer.from(String(req.headers.authorization ?? ""));
  const want = Buffer.from(`Bearer ${apiKey}`);
  return got.length === want.length && timingSafeEqual(got, want);
}

// ---------------------------------------------------------------------------
// OpenAI-shaped errors

class ApiError extends Error {
  constructor(status, message, { type, param = null, code = null } = {}) {
    super(message);
    this.status = status;
    this.type = type ?? (status >= 500 ? "server_error" : "invalid_request_error");
    this.param = param;
    this.code = code;
  }
  body() {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}
const bad = (message, param = null, code = null) => new ApiError(400, message, { param, code });

// ---------------------------------------------------------------------------
// The engine: loaded after the server listens

const engine = {
  ready: false,
  model: null,
  context: null,
  contextSize: 0, // per slot
  template: null,
  freeSlots: [],
  waiters: [], // {resolve, reject, signal}
  embedding: null, // Promise<LlamaEmbeddingContext> once first asked
  embeddingLock: Promise.resolve(),
  metrics: {
    processing: 0,
    deferred: 0,
    promptTokens: 0,
    predictedTokens: 0,
    requests: 0,
  },
};

async function loadEngine() {
  const t0 = performance.now();
  // CPU only, the prebuilt binaries of @node-llama-cpp/linux-x64 (from the
  // npm registry): never build from source, never download anything.
  const llama = await getLlama({
    gpu: false,
    build: "never",
    skipDownload: true,
    usePrebuiltBinaries: true,
    maxThreads: threads,
    logLevel: LlamaLogLevel.error,
    progressLogs: false,
  });
  const model = await llama.loadModel({ modelPath: modelFile, gpuLayers: 0, useMmap: true });
  const trained = model.trainContextSize || 4096;
  const perSlot = Math.min(contextSizeArg ?? Math.min(trained, 4096), trained);
  const context = await model.createContext({
    contextSize: perSlot,
    sequences: parallel,
    threads,
    batchSize: Math.min(perSlot, 512),
  });
  engine.model = model;
  engine.context = context;
  for (let i = 0; i < parallel; i++) engine.freeSlots.push(context.getSequence());
  engine.contextSize = engine.freeSlots[0].contextSize;
  const vocab = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens;
  engine.nVocab = Array.isArray(vocab) ? vocab.length : Infinity;
  const src = model.fileInfo?.metadata?.tokenizer?.chat_template;
  if (typeof src === "string" && src.length > 0) engine.template = new Template(src);
  engine.ready = true;
  const ms = performance.now() - t0;
  console.log(
    `model ${modelName} loaded from ${modelFile} in ${ms.toFixed(0)} ms ` +
      `(llama.cpp ${llama.buildType} ${llama.gpu || "cpu"}, ${parallel} slots of ${engine.contextSize} tokens, ` +
      `${threads} threads, chat template: ${engine.template ? "the model's" : "built-in"})`,
  );
}

// A slot (a context sequence); waits in FIFO order when all are busy.
function acquireSlot(signal) {
  if (engine.freeSlots.length > 0) return Promise.resolve(engine.freeSlots.pop());
  engine.metrics.deferred++;
  return new Promise((resolve, reject) => {
    const waiter = { resolve, reject };
    const onAbort = () => {
      const i = engine.waiters.indexOf(waiter);
      if (i >= 0) engine.waiters.splice(i, 1);
      engine.metrics.deferred--;
      reject(new ApiError(499, "client closed the request", { code: "cancelled" }));
    };
    waiter.resolve = (slot) => {
      signal.removeEventListener("abort", onAbort);
      engine.metrics.deferred--;
      resolve(slot);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    engine.waiters.push(waiter);
  });
}

async function releaseSlot(slot) {
  try {
    await slot.clearHistory();
  } catch (e) {
    console.error(`server.mjs: clearing a slot: ${e.message}`);
  }
  const next = engine.waiters.shift();
  if (next) next.resolve(slot);
  else engine.freeSlots.push(slot);
}

// ---------------------------------------------------------------------------
// Prompts

function bosPrefix(tokens) {
  const t = engine.model.tokens;
  if (t.bos != null && t.shouldPrependBosToken && tokens[0] !== t.bos) return [t.bos, ...tokens];
  return tokens;
}

function messageText(m, i) {
  if (typeof m.content === "string") return m.content;
  if (m.content == null) return "";
  if (Array.isArray(m.content)) {
    return m.content
      .map((part, j) => {
        if (part && part.type === "text" && typeof part.text === "string") return part.text;
        throw bad(`messages[${i}].content[${j}]: only text parts are supported`, `messages[${i}].content`);
      })
      .join("");
  }
  throw bad(`messages[${i}].content must be a string or an array of text parts`, `messages[${i}].content`);
}

function chatPromptTokens(messages) {
  if (!Array.isArray(messages) || messages.length === 0)
    throw bad("messages must be a non-empty array", "messages");
  const msgs = messages.map((m, i) => {
    if (!m || typeof m !== "object") throw bad(`messages[${i}] must be an object`, "messages");
    if (!["system", "developer", "user", "assistant", "tool"].includes(m.role))
      throw bad(`messages[${i}].role must be system, developer, user, assistant or tool`, `messages[${i}].role`);
    return { role: m.role === "developer" ? "system" : m.role, content: messageText(m, i) };
  });
  const model = engine.model;
  let text;
  if (engine.template) {
    try {
      text = engine.template.render({
        messages: msgs,
        add_generation_prompt: true,
        bos_token: model.tokens.bosString ?? "",
        eos_token: model.tokens.eosString ?? "",
      });
    } catch (e) {
      throw bad(`the model's chat template failed on these messages: ${e.message}`, "messages");
    }
  } else {
    text = msgs.map((m) => `${m.role}: ${m.content}\n`).join("") + "assistant: ";
  }
  // The template's text may hold the model's special tokens (<|im_start|>...).
  return bosPrefix(model.tokenize(text, true));
}

function completionPromptTokens(prompt) {
  if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === "string") prompt = prompt[0];
  if (typeof prompt === "string") return bosPrefix(engine.model.tokenize(prompt, false));
  const nVocab = engine.nVocab;
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => Number.isInteger(t) && t >= 0 && t < nVocab))
    return prompt.slice();
  throw bad("prompt must be a string, an array of one string or an array of token ids (one prompt per request)", "prompt");
}

// ---------------------------------------------------------------------------
// Sampling parameters

function num(body, key, min, max, dflt) {
  const v = body[key];
  if (v == null) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max)
    throw bad(`${key} must be a number between ${min} and ${max}`, key);
  return v;
}

function sampling(body, promptLen, defaultMax) {
  if (body.n != null && body.n !== 1) throw bad("only n=1 is supported", "n");
  // Not implemented here: said so rather than ignored.
  for (const key of ["logprobs", "top_logprobs", "tools", "functions", "echo", "suffix", "best_of"]) {
    const v = body[key];
    if (v != null && v !== false && !(Array.isArray(v) && v.length === 0) && !(key === "best_of" && v === 1))
      throw bad(`${key} is not supported by this engine`, key);
  }
  if (body.response_format != null && body.response_format?.type !== "text")
    throw bad("response_format other than text is not supported by this engine", "response_format");
  if (body.stream != null && typeof body.stream !== "boolean") throw bad("stream must be a boolean", "stream");
  const room = engine.contextSize - promptLen;
  if (room < 1)
    throw bad(
      `this model's context is ${engine.contextSize} tokens and the prompt has ${promptLen}`,
      "messages",
      "context_length_exceeded",
    );
  let maxTokens = body.max_completion_tokens ?? body.max_tokens;
  const maxKey = body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
  if (maxTokens == null) maxTokens = Math.min(defaultMax ?? room, room);
  else if (!Number.isInteger(maxTokens) || maxTokens < 1) throw bad(`${maxKey} must be an integer >= 1`, maxKey);
  else if (promptLen + maxTokens > engine.contextSize)
    throw bad(
      `this model's context is ${engine.contextSize} tokens: the prompt's ${promptLen} and ${maxKey} ${maxTokens} do not fit`,
      maxKey,
      "context_length_exceeded",
    );
  const seed = body.seed;
  if (seed != null && !Number.isInteger(seed)) throw bad("seed must be an integer", "seed");
  let stop = body.stop ?? [];
  if (typeof stop === "string") stop = [stop];
  if (!Array.isArray(stop) || stop.length > 4 || !stop.every((s) => typeof s === "string" && s.length > 0))
    throw bad("stop must be a string or an array of up to 4 non-empty strings", "stop");
  const opts = {
    temperature: num(body, "temperature", 0, 2, 1),
    seed: seed == null ? undefined : ((seed % 2 ** 32) + 2 ** 32) % 2 ** 32,
  };
  const topP = num(body, "top_p", 0, 1, 1);
  if (topP < 1) opts.topP = topP;
  const freq = num(body, "frequency_penalty", -2, 2, 0);
  const pres = num(body, "presence_penalty", -2, 2, 0);
  if (freq !== 0 || pres !== 0)
    opts.repeatPenalty = { penalty: 1, frequencyPenalty: freq, presencePenalty: pres, lastTokens: 64 };
  return { maxTokens, opts, stop };
}

// ---------------------------------------------------------------------------
// Generation

// Generates up to maxTokens tokens after promptTokens in a slot. onText gets
// each piece of text as soon as it is complete (whole UTF-8 characters, no
// partial stop string). Resolves to {text, completionTokens, finishReason}.
async function generate(promptTokens, { maxTokens, opts, stop }, signal, onText) {
  const model = engine.model;
  const slot = await acquireSlot(signal);
  engine.metrics.processing++;
  engine.metrics.requests++;
  engine.metrics.promptTokens += promptTokens.length;
  const textTokens = [];
  let completionTokens = 0;
  let finishReason = "length";
  let text = "";
  let emitted = 0;
  const tail = promptTokens.slice(-8);
  const maxStop = stop.reduce((a, s) => Math.max(a, s.length), 0);
  const emitUpTo = (end) => {
    if (end > emitted) {
      onText?.(text.slice(emitted, end));
      emitted = end;
    }
  };
  try {
    if (signal.aborted) throw new ApiError(499, "client closed the request", { code: "cancelled" });
    for await (const token of slot.evaluate(promptTokens, opts)) {
      completionTokens++;
      engine.metrics.predictedTokens++;
      if (model.isEogToken(token)) {
        finishReason = "stop";
        break;
      }
      textTokens.push(token);
      text = model.detokenize(textTokens, false, tail);
      let safe = text.length;
      if (text.endsWith("\uFFFD")) safe = text.length - 1; // maybe a partial UTF-8 character
      if (maxStop > 0) {
        let hit = -1;
        for (const s of stop) {
          const i = text.indexOf(s, Math.max(0, emitted - s.length + 1));
          if (i >= 0 && (hit < 0 || i < hit)) hit = i;
        }
        if (hit >= 0) {
          text = text.slice(0, hit);
          finishReason = "stop";
          break;
        }
        // hold back a suffix that may begin a stop string
        for (let k = Math.min(maxStop - 1, safe - emitted); k > 0; k--) {
          const suffix = text.slice(safe - k, safe);
          if (stop.some((s) => s.startsWith(suffix))) {
            safe -= k;
            break;
          }
        }
      }
      emitUpTo(safe);
      if (signal.aborted) {
        finishReason = "cancelled";
        break;
      }
      if (completionTokens >= maxTokens) break;
    }
    emitUpTo(text.length);
    return { text, completionTokens, finishReason, promptTokens: promptTokens.length };
  } finally {
    engine.metrics.processing--;
    await releaseSlot(slot);
  }
}

// ---------------------------------------------------------------------------
// HTTP plumbing

function send(res, status, obj, headers = {}) {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify(obj);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    ...headers,
  });
  res.end(body);
}

// The body as a JSON object. A body over --max-body is read to its end and
// dropped (so that the client, still sending, gets the 413 rather than a
// reset connection), up to 16 times the limit; past that the 413 goes at once
// and the connection closes.
function readJson(req) {
  return new Promise((resolve, reject) => {
    const tooLarge = () => new ApiError(413, `the request body is larger than ${maxBody} bytes`, { code: "body_too_large" });
    const type = req.headers["content-type"] || "";
    if (type && !/^application\/json\b/i.test(type)) {
      req.resume();
      req.on("end", () => reject(new ApiError(415, `content-type must be application/json, not ${type}`)));
      return;
    }
    const chunks = [];
    let size = 0;
    let settled = false;
    const settle = (fn, v) => {
      if (!settled) {
        settled = true;
        fn(v);
      }
    };
    req.on("data", (c) => {
      size += c.length;
      if (size > 16 * maxBody) settle(reject, tooLarge());
      else if (size <= maxBody) chunks.push(c);
    });
    req.on("end", () => {
      if (size > maxBody) return settle(reject, tooLarge());
      let body;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch (e) {
        return settle(reject, bad(`the body is not valid JSON: ${e.message}`));
      }
      if (!body || typeof body !== "object" || Array.isArray(body)) settle(reject, bad("the body must be a JSON object"));
      else settle(resolve, body);
    });
    req.on("error", (e) => settle(reject, new ApiError(400, `reading the body: ${e.message}`)));
  });
}

function checkModel(body) {
  if (typeof body.model !== "string" || body.model === "") throw bad("model is required", "model");
  if (body.model !== modelName)
    throw new ApiError(404, `The model \`${body.model}\` does not exist (this server serves ${modelName})`, {
      param: "model",
      code: "model_not_found",
    });
}

function requireReady() {
  if (!engine.ready) throw new ApiError(503, "the model is still loading", { type: "server_error", code: "loading" });
}

const newId = (prefix) => `${prefix}-${randomBytes(12).toString("hex")}`;
const now = () => Math.floor(Date.now() / 1000);

function usageOf(r) {
  return { prompt_tokens: r.promptTokens, completion_tokens: r.completionTokens, total_tokens: r.promptTokens + r.completionTokens };
}

// An AbortSignal that fires when the client goes away before the answer ends.
function clientGone(res) {
  const ac = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) ac.abort();
  });
  return ac.signal;
}

function sseStart(res) {
  res.writeHead(200, {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  });
  res.flushHeaders();
}
const sse = (res, obj) => {
  if (!res.destroyed) res.write(`data: ${JSON.stringify(obj)}\n\n`);
};

async function completions(req, res, chat) {
  const body = await readJson(req);
  checkModel(body);
  requireReady();
  const promptTokens = chat ? chatPromptTokens(body.messages) : completionPromptTokens(body.prompt);
  const params = sampling(body, promptTokens.length, chat ? undefined : 16);
  const includeUsage = body.stream_options?.include_usage === true;
  if (body.stream_options != null && (typeof body.stream_options !== "object" || !body.stream))
    throw bad("stream_options is only allowed with stream: true", "stream_options");
  const signal = clientGone(res);
  const id = newId(chat ? "chatcmpl" : "cmpl");
  const created = now();
  const object = chat ? "chat.completion" : "text_completion";

  if (!body.stream) {
    const r = await generate(promptTokens, params, signal);
    if (signal.aborted) return;
    const choice = chat
      ? { index: 0, message: { role: "assistant", content: r.text, refusal: null }, logprobs: null, finish_reason: r.finishReason }
      : { index: 0, text: r.text, logprobs: null, finish_reason: r.finishReason };
    send(res, 200, { id, object, created, model: modelName, system_fingerprint: null, choices: [choice], usage: usageOf(r) });
    return;
  }

  const chunkObject = chat ? "chat.completion.chunk" : "text_completion";
  const chunk = (choice, extra = {}) => ({
    id,
    object: chunkObject,
    created,
    model: modelName,
    system_fingerprint: null,
    choices: choice ? [choice] : [],
    ...(includeUsage ? { usage: null } : {}),
    ...extra,
  });
  const piece = (text, finish = null) =>
    chat
      ? { index: 0, delta: text == null ? {} : { content: text }, logprobs: null, finish_reason: finish }
      : { index: 0, text: text ?? "", logprobs: null, finish_reason: finish };
  // Headers go now, also while the request waits for a free slot; from here
  // on an error is an event of the stream ({"error": {...}}).
  sseStart(res);
  if (chat) sse(res, chunk({ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }));
  let r;
  try {
    r = await generate(promptTokens, params, signal, (text) => sse(res, chunk(piece(text))));
  } catch (e) {
    if (!signal.aborted) {
      const err = e instanceof ApiError ? e : new ApiError(500, e.message);
      sse(res, err.body());
      res.end();
    }
    return;
  }
  if (signal.aborted) return;
  sse(res, chunk(piece(null, r.finishReason)));
  if (includeUsage) sse(res, chunk(null, { usage: usageOf(r) }));
  res.end("data: [DONE]\n\n");
}

function lockEmbedding(fn) {
  const run = engine.embeddingLock.then(fn, fn);
  engine.embeddingLock = run.catch(() => {});
  return run;
}

async function embeddings(req, res) {
  const body = await readJson(req);
  checkModel(body);
  requireReady();
  let input = body.input;
  if (typeof input === "string") input = [input];
  else if (Array.isArray(input) && input.length > 0 && input.every((t) => Number.isInteger(t))) input = [input];
  if (!Array.isArray(input) || input.length === 0 || input.length > 2048)
    throw bad("input must be a string, an array of up to 2048 strings, or token ids", "input");
  const format = body.encoding_format ?? "float";
  if (format !== "float" && format !== "base64") throw bad("encoding_format must be float or base64", "encoding_format");
  if (body.dimensions != null) throw bad("dimensions is not supported by this model", "dimensions");
  const tokenized = input.map((x, i) => {
    let toks;
    if (typeof x === "string") {
      if (x.length === 0) throw bad(`input[${i}] is empty`, "input");
      toks = engine.model.tokenize(x, false);
    } else if (Array.isArray(x) && x.length > 0 && x.every((t) => Number.isInteger(t) && t >= 0)) toks = x.slice();
    else throw bad(`input[${i}] must be a non-empty string or array of token ids`, "input");
    toks = bosPrefix(toks);
    if (toks.length >= engine.contextSize)
      throw bad(`input[${i}] has ${toks.length} tokens; this model's context is ${engine.contextSize}`, "input", "context_length_exceeded");
    return toks;
  });
  engine.embedding ??= engine.model.createEmbeddingContext({ contextSize: engine.contextSize, threads });
  let ctx;
  try {
    ctx = await engine.embedding;
  } catch (e) {
    engine.embedding = null;
    throw new ApiError(400, `this model does not support embeddings: ${e.message}`, { param: "model", code: "embeddings_unsupported" });
  }
  const signal = clientGone(res);
  const data = [];
  let promptTokens = 0;
  for (let i = 0; i < tokenized.length; i++) {
    if (signal.aborted) return;
    const e = await lockEmbedding(() => ctx.getEmbeddingFor(tokenized[i]));
    promptTokens += tokenized[i].length;
    const vec = Array.from(e.vector);
    data.push({
      object: "embedding",
      index: i,
      embedding: format === "float" ? vec : Buffer.from(new Float32Array(vec).buffer).toString("base64"),
    });
  }
  engine.metrics.promptTokens += promptTokens;
  send(res, 200, { object: "list", data, model: modelName, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } });
}

async function tokenize(req, res) {
  const body = await readJson(req);
  requireReady();
  if (typeof body.content !== "string") throw bad("content must be a string", "content");
  let tokens = engine.model.tokenize(body.content, body.parse_special === true);
  if (body.add_special === true) tokens = bosPrefix(tokens);
  send(res, 200, { tokens });
}

function metrics(res) {
  const m = engine.metrics;
  const lines = [
    "# HELP llamacpp:requests_processing Number of requests generating now.",
    "# TYPE llamacpp:requests_processing gauge",
    `llamacpp:requests_processing ${m.processing}`,
    "# HELP llamacpp:requests_deferred Number of requests waiting for a slot.",
    "# TYPE llamacpp:requests_deferred gauge",
    `llamacpp:requests_deferred ${m.deferred}`,
    "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
    "# TYPE llamacpp:prompt_tokens_total counter",
    `llamacpp:prompt_tokens_total ${m.promptTokens}`,
    "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
    "# TYPE llamacpp:tokens_predicted_total counter",
    `llamacpp:tokens_predicted_total ${m.predictedTokens}`,
    "# HELP drover_engine_requests_total Generation requests started.",
    "# TYPE drover_engine_requests_total counter",
    `drover_engine_requests_total ${m.requests}`,
    "",
  ];
  res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
  res.end(lines.join("\n"));
}

async function route(req, res) {
  const url = new URL(req.url, "http://x");
  const p = url.pathname.replace(/\/+$/, "") || "/";
  const method = req.method;
  const only = (m) => {
    if (method !== m) throw new ApiError(405, `${p} takes ${m}, not ${method}`, { code: "method_not_allowed" });
  };
  if (!PUBLIC_PATHS.has(p) && !authorized(req)) {
    throw new ApiError(401, "Invalid API Key", { type: "authentication_error", code: "invalid_api_key" });
  }
  switch (p) {
    case "/health":
      only("GET");
      if (engine.ready) return send(res, 200, { status: "ok" });
      return send(res, 503, { status: "loading", error: { message: "the model is still loading", type: "server_error", code: "loading" } });
    case "/v1/models":
      only("GET");
      return send(res, 200, {
        object: "list",
        data: [{ id: modelName, object: "model", created: startedAt, owned_by: "drover", max_model_len: engine.contextSize || null }],
      });
    case "/v1/chat/completions":
      only("POST");
      return completions(req, res, true);
    case "/v1/completions":
      only("POST");
      return completions(req, res, false);
    case "/v1/embeddings":
      only("POST");
      return embeddings(req, res);
    case "/tokenize":
      only("POST");
      return tokenize(req, res);
    case "/metrics":
      only("GET");
      return metrics(res);
    default:
      if (p.startsWith("/v1/models/")) {
        only("GET");
        const id = decodeURIComponent(p.slice("/v1/models/".length));
        if (id !== modelName)
          throw new ApiError(404, `The model \`${id}\` does not exist`, { param: "model", code: "model_not_found" });
        return send(res, 200, { id: modelName, object: "model", created: startedAt, owned_by: "drover" });
      }
      throw new ApiError(404, `no route ${method} ${p}`, { code: "not_found" });
  }
}

const startedAt = now();
const server = http.createServer((req, res) => {
  route(req, res).catch((e) => {
    const err = e instanceof ApiError ? e : new ApiError(500, e?.message ?? String(e));
    if (err.status === 499) return; // the client is gone
    if (err.status >= 500 && !(e instanceof ApiError)) console.error(`server.mjs: ${req.method} ${req.url}:`, e);
    if (res.headersSent) {
      if (!res.writableEnded) {
        sse(res, err.body());
        res.end();
      }
      return;
    }
    send(res, err.status, err.body(), req.complete ? {} : { connection: "close" });
  });
});
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;
server.requestTimeout = 0; // generations may be long; a slow client is cancelled on close

server.on("error", (e) => {
  console.error(`server.mjs: listening on ${args.host}:${port}: ${e.message}`);
  process.exit(1);
});
server.listen(port, args.host, () => {
  const a = server.address();
  const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
  console.log(`listening on http://${host}:${a.port} (model ${modelName})`);
  loadEngine().catch((e) => {
    console.error(`server.mjs: loading ${modelFile}: ${e?.stack ?? e}`);
    process.exit(1);
  });
});

let stopping = false;
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    if (stopping) process.exit(1);
    stopping = true;
    server.close();
    server.closeAllConnections?.();
    // llama.cpp's resources go with the process.
    setTimeout(() => process.exit(0), 50).unref();
  });
}
