#!/usr/bin/env node
// Writes a tiny GGUF v3 file of a llama-architecture model with random
// (seeded) F32 weights, which llama.cpp loads like any real model.
//
//   node make_gguf.mjs OUT.gguf [--seed N]
//
// The layout follows llama.cpp's docs/gguf.md (gguf-py/gguf/constants.py for
// the key and tensor names, src/llama-model.cpp's LLM_ARCH_LLAMA branch for
// the shapes). Dimensions are ggml's ne[] order: ne[0] is the row length.
//
// Model: 2 layers, embedding 64, 4 heads (4 KV heads), feed-forward 128,
// context 2048, RMS-norm epsilon 1e-5, rope base 10000.
// Vocabulary (tokenizer.ggml.model "llama", i.e. SentencePiece-style, 260
// tokens): 0 <unk>, 1 <s> (BOS), 2 </s> (EOS), then the 256 byte tokens
// <0x00>..<0xFF> (token type BYTE), so any text tokenizes by byte fallback
// and any generated token detokenizes to one byte, and last "\u2581" (the
// SentencePiece space, a NORMAL token): llama.cpp's SPM tokenizer turns each
// space into it, and detokenizes only NORMAL tokens' "\u2581" back to " ".
//
// Random weights produce random tokens. So that the output is readable and
// does not end early, only the printable ASCII bytes 0x20..0x7E and the space
// token can win: dimension 0 of the residual stream is a constant (4.0 in
// every token's embedding, and no layer writes to it: row 0 of each
// attn_output and ffn_down is zero), so after the final RMS norm h[0] is
// always positive (about 3). output.weight's rows for the printable tokens
// are random on dimensions 1..63 and 0 on dimension 0 (logits of standard
// deviation about 3); every other token's row is -10 on dimension 0 and 0
// elsewhere (a logit of about -30). Sampling then picks a printable
// character, even at temperature 2, and practically never EOS.
import { writeFileSync } from "node:fs";

const GGUF_MAGIC = 0x46554747; // "GGUF" little-endian
const GGUF_VERSION = 3;
const ALIGNMENT = 32;

// gguf value types (docs/gguf.md: enum gguf_metadata_value_type)
const T = {
  UINT8: 0, INT8: 1, UINT16: 2, INT16: 3, UINT32: 4, INT32: 5, FLOAT32: 6,
  BOOL: 7, STRING: 8, ARRAY: 9, UINT64: 10, INT64: 11, FLOAT64: 12,
};
const GGML_TYPE_F32 = 0;
// llama_token_type (tokenizer.ggml.token_type)
const TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_BYTE = 6;

export const MODEL = {
  nVocab: 260,
  nEmbd: 64,
  nLayer: 2,
  nHead: 4,
  nHeadKv: 4,
  nFf: 128,
  nCtx: 2048,
};

// A chat template in the style of ChatML but with plain-text markers (the
// vocabulary has no special tokens for them). The server renders it with
// jinja; any real GGUF's own template works the same way.
export const CHAT_TEMPLATE =
  "{% for message in messages %}" +
  "{{ '### ' + message['role'] + ':\\n' + message['content'] + '\\n' }}" +
  "{% endfor %}" +
  "{% if add_generation_prompt %}{{ '### assistant:\\n' }}{% endif %}";

// mulberry32: a small seeded PRNG; gaussian by Box-Muller.
function rng(seed) {
  let a = seed >>> 0;
  const uniform = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const gauss = () => {
    const u = Math.max(uniform(), 1e-12);
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * uniform());
  };
  return { uniform, gauss };
}

class Writer {
  constructor() { this.chunks = []; this.length = 0; }
  push(buf) { this.chunks.push(buf); this.length += buf.length; }
  u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); this.push(b); }
  i32(v) { const b = Buffer.alloc(4); b.writeInt32LE(v); this.push(b); }
  u64(v) { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); this.push(b); }
  f32(v) { const b = Buffer.alloc(4); b.writeFloatLE(v); this.push(b); }
  bool(v) { this.push(Buffer.from([v ? 1 : 0])); }
  str(s) { const b = Buffer.from(s, "utf8"); this.u64(b.length); this.push(b); }
  pad(align) {
    const rem = this.length % align;
    if (rem) this.push(Buffer.alloc(align - rem));
  }
  value(type, v) {
    switch (type) {
      case T.UINT32: return this.u32(v);
      case T.INT32: return this.i32(v);
      case T.FLOAT32: return this.f32(v);
      case T.BOOL: return this.bool(v);
      case T.STRING: return this.str(v);
      case T.UINT64: return this.u64(v);
      default: throw new Error(`unsupported gguf type ${type}`);
    }
  }
  buffer() { return Buffer.concat(this.chunks, this.length); }
}

export function buildGguf({ seed = 1234 } = {}) {
  const m = MODEL;
  const headDim = m.nEmbd / m.nHead;
  const nEmbdKv = headDim * m.nHeadKv;
  const r = rng(seed);

  // --- vocabulary -----------------------------------------------------------
  const tokens = ["<unk>", "<s>", "</s>"];
  const scores = [0, 0, 0];
  const types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    scores.push(0);
    types.push(TOKEN_BYTE);
  }
  tokens.push("\u2581");
  scores.push(0);
  types.push(TOKEN_NORMAL);
  const spaceToken = tokens.length - 1;
  if (tokens.length !== m.nVocab) throw new Error("vocabulary size mismatch");
  const byteToken = (b) => 3 + b;

  // --- metadata (key, type, value) or (key, ARRAY, [elemType, values]) ------
  const kv = [
    ["general.architecture", T.STRING, "llama"],
    ["general.name", T.STRING, "drover-tiny-random-llama"],
    ["general.alignment", T.UINT32, ALIGNMENT],
    ["general.file_type", T.UINT32, 0], // LLAMA_FTYPE_ALL_F32
    ["llama.vocab_size", T.UINT32, m.nVocab],
    ["llama.context_length", T.UINT32, m.nCtx],
    ["llama.embedding_length", T.UINT32, m.nEmbd],
    ["llama.block_count", T.UINT32, m.nLayer],
    ["llama.feed_forward_length", T.UINT32, m.nFf],
    ["llama.attention.head_count", T.UINT32, m.nHead],
    ["llama.attention.head_count_kv", T.UINT32, m.nHeadKv],
    ["llama.rope.dimension_count", T.UINT32, headDim],
    ["llama.rope.freq_base", T.FLOAT32, 10000],
    ["llama.attention.layer_norm_rms_epsilon", T.FLOAT32, 1e-5],
    ["tokenizer.ggml.model", T.STRING, "llama"],
    ["tokenizer.ggml.tokens", T.ARRAY, [T.STRING, tokens]],
    ["tokenizer.ggml.scores", T.ARRAY, [T.FLOAT32, scores]],
    ["tokenizer.ggml.token_type", T.ARRAY, [T.INT32, types]],
    ["tokenizer.ggml.unknown_token_id", T.UINT32, 0],
    ["tokenizer.ggml.bos_token_id", T.UINT32, 1],
    ["tokenizer.ggml.eos_token_id", T.UINT32, 2],
    ["tokenizer.ggml.add_bos_token", T.BOOL, true],
    ["tokenizer.ggml.add_eos_token", T.BOOL, false],
    ["tokenizer.chat_template", T.STRING, CHAT_TEMPLATE],
  ];

  // --- tensors: name, ne[] (ggml order), data -------------------------------
  const tensors = [];
  const gaussTensor = (name, ne, std) => {
    const n = ne.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = r.gauss() * std;
    tensors.push({ name, ne, data });
  };
  const onesTensor = (name, ne) => {
    const n = ne.reduce((a, b) => a * b, 1);
    tensors.push({ name, ne, data: new Float32Array(n).fill(1) });
  };

  gaussTensor("token_embd.weight", [m.nEmbd, m.nVocab], 1.0);
  const CONST_DIM_VALUE = 4.0;
  const lastData = () => tensors[tensors.length - 1].data;
  for (let t = 0; t < m.nVocab; t++) lastData()[t * m.nEmbd] = CONST_DIM_VALUE;
  const proj = 1 / Math.sqrt(m.nEmbd);
  for (let i = 0; i < m.nLayer; i++) {
    onesTensor(`blk.${i}.attn_norm.weight`, [m.nEmbd]);
    gaussTensor(`blk.${i}.attn_q.weight`, [m.nEmbd, m.nEmbd], proj);
    gaussTensor(`blk.${i}.attn_k.weight`, [m.nEmbd, nEmbdKv], proj);
    gaussTensor(`blk.${i}.attn_v.weight`, [m.nEmbd, nEmbdKv], proj);
    gaussTensor(`blk.${i}.attn_output.weight`, [m.nEmbd, m.nEmbd], proj);
    lastData().fill(0, 0, m.nEmbd); // output row 0: nothing written to dimension 0
    onesTensor(`blk.${i}.ffn_norm.weight`, [m.nEmbd]);
    gaussTensor(`blk.${i}.ffn_gate.weight`, [m.nEmbd, m.nFf], proj);
    gaussTensor(`blk.${i}.ffn_up.weight`, [m.nEmbd, m.nFf], proj);
    gaussTensor(`blk.${i}.ffn_down.weight`, [m.nFf, m.nEmbd], 1 / Math.sqrt(m.nFf));
    lastData().fill(0, 0, m.nFf); // output row 0 likewise
  }
  onesTensor("output_norm.weight", [m.nEmbd]);
  // output.weight: row t (m.nEmbd floats) gives token t's logit (see the
  // comment at the top).
  const out = new Float32Array(m.nEmbd * m.nVocab);
  for (let t = 0; t < m.nVocab; t++) {
    const printable = (t >= byteToken(0x20) && t <= byteToken(0x7e)) || t === spaceToken;
    out[t * m.nEmbd] = printable ? 0 : -10;
    for (let j = 1; j < m.nEmbd; j++) out[t * m.nEmbd + j] = printable ? r.gauss() * 0.4 : 0;
  }
  tensors.push({ name: "output.weight", ne: [m.nEmbd, m.nVocab], data: out });

  // --- serialize ------------------------------------------------------------
  const w = new Writer();
  w.u32(GGUF_MAGIC);
  w.u32(GGUF_VERSION);
  w.u64(tensors.length);
  w.u64(kv.length);
  for (const [key, type, value] of kv) {
    w.str(key);
    w.u32(type);
    if (type === T.ARRAY) {
      const [elemType, values] = value;
      w.u32(elemType);
      w.u64(values.length);
      for (const v of values) w.value(elemType, v);
    } else {
      w.value(type, value);
    }
  }
  let offset = 0;
  for (const t of tensors) {
    t.offset = offset;
    w.str(t.name);
    w.u32(t.ne.length);
    for (const d of t.ne) w.u64(d);
    w.u32(GGML_TYPE_F32);
    w.u64(offset);
    const bytes = t.data.byteLength;
    offset += Math.ceil(bytes / ALIGNMENT) * ALIGNMENT;
  }
  w.pad(ALIGNMENT);
  for (const t of tensors) {
    w.push(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    w.pad(ALIGNMENT);
  }
  return w.buffer();
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  let outPath = null;
  let seed = 1234;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--seed") seed = Number(args[++i]);
    else if (args[i] === "-h" || args[i] === "--help") {
      console.log("usage: node make_gguf.mjs OUT.gguf [--seed N]");
      process.exit(0);
    } else outPath = args[i];
  }
  if (!outPath || !Number.isInteger(seed)) {
    console.error("usage: node make_gguf.mjs OUT.gguf [--seed N]");
    process.exit(2);
  }
  const buf = buildGguf({ seed });
  writeFileSync(outPath, buf);
  console.log(`wrote ${outPath}: ${buf.length} bytes (seed ${seed})`);
}
