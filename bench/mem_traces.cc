#include "mem_traces.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>

namespace drover::bench {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Distributions written out, so a trace does not depend on the standard
// library's (implementation-defined) ones.
uint64_t UniformInt(std::mt19937_64& rng, uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); }
double Unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
uint64_t LogUniform(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  const double l = std::log2(static_cast<double>(lo));
  const double h = std::log2(static_cast<double>(hi));
  return std::clamp<uint64_t>(static_cast<uint64_t>(std::exp2(l + (h - l) * Unit(rng))), lo, hi);
}

class Builder {
 public:
  explicit Builder(std::string name) { trace_.name = std::move(name); }
  uint32_t Alloc(uint64_t size) {
    const uint32_t id = trace_.allocations++;
    sizes_.push_back(size);
    trace_.events.push_back(TraceEvent{id, size});
    live_ += size;
    if (live_ > trace_.peak_live) {
      trace_.peak_live = live_;
      trace_.peak_event = trace_.events.size() - 1;
    }
    return id;
  }
  void Free(uint32_t id) {
    trace_.events.push_back(TraceEvent{id, 0});
    live_ -= sizes_[id];
  }
  Trace Take() { return std::move(trace_); }

 private:
  Trace trace_;
  std::vector<uint64_t> sizes_;
  uint64_t live_ = 0;
};

}  // namespace

Trace TrainingTrace(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Builder b("training");
  constexpr uint64_t h = 4096, layers = 16, vocab = 50304, heads = 32, bf16 = 2, fp32 = 4;
  // Parameter shapes in elements: embedding, per layer 12 tensors, final norm.
  std::vector<uint64_t> param_elems;
  param_elems.push_back(vocab * h);
  for (uint64_t l = 0; l < layers; ++l) {
    // ln1 weight, bias; qkv weight, bias; proj weight, bias; ln2 weight, bias; fc1 weight, bias; fc2 weight, bias.
    for (uint64_t e : {h, h, 3 * h * h, 3 * h, h * h, h, h, h, 4 * h * h, 4 * h, 4 * h * h, h}) {
      param_elems.push_back(e);
    }
  }
  param_elems.push_back(h);
  param_elems.push_back(h);
  for (uint64_t e : param_elems) b.Alloc(e * bf16);
  const size_t per_layer = 12;

  uint64_t tokens = 0, seq = 0;
  for (int iter = 0; iter < 300; ++iter) {
    if (iter % 25 == 0) {
      const uint64_t seqs[] = {512, 1024, 2048, 4096};
      seq = seqs[UniformInt(rng, 0, 3)];
      tokens = 2048 * UniformInt(rng, 1, 7);
      tokens = std::max(seq, tokens / seq * seq);
    }
    const uint64_t batch = tokens / seq;
    // Forward.
    const uint32_t embed_out = b.Alloc(tokens * h * bf16);
    std::vector<std::vector<uint32_t>> saved(layers);
    for (uint64_t l = 0; l < layers; ++l) {
      std::vector<uint32_t>& s = saved[l];
      s.push_back(b.Alloc(tokens * fp32 * 2));  // ln1 mean and rstd
      s.push_back(b.Alloc(tokens * h * bf16));  // ln1 out
      s.push_back(b.Alloc(tokens * 3 * h * bf16));
      const uint32_t workspace = b.Alloc(batch * heads * seq * fp32 + tokens * h * bf16);
      s.push_back(b.Alloc(tokens * h * bf16));           // attention out
      s.push_back(b.Alloc(batch * heads * seq * fp32));  // log-sum-exp
      b.Free(workspace);
      s.push_back(b.Alloc(tokens * h * bf16));      // projection out (residual)
      s.push_back(b.Alloc(tokens * fp32 * 2));      // ln2 statistics
      s.push_back(b.Alloc(tokens * h * bf16));      // ln2 out
      s.push_back(b.Alloc(tokens * 4 * h * bf16));  // fc1
      s.push_back(b.Alloc(tokens * 4 * h * bf16));  // gelu
      s.push_back(b.Alloc(tokens * h * bf16));      // fc2 out (residual)
    }
    const uint32_t final_norm = b.Alloc(tokens * h * bf16);
    const uint32_t logits = b.Alloc(tokens * vocab * bf16);
    const uint32_t softmax = b.Alloc(tokens * vocab * fp32);
    b.Free(softmax);
    // Backward.
    const uint32_t dlogits = b.Alloc(tokens * vocab * bf16);
    b.Free(logits);
    uint32_t dx = b.Alloc(tokens * h * bf16);
    b.Free(dlogits);
    b.Free(final_norm);
    if (iter == 0) {
      b.Alloc(param_elems[param_elems.size() - 2] * bf16);
      b.Alloc(param_elems.back() * bf16);
    }
    for (uint64_t l = layers; l-- > 0;) {
      const uint32_t dfc1 = b.Alloc(tokens * 4 * h * bf16);
      const uint32_t dx_new = b.Alloc(tokens * h * bf16);
      const uint32_t dqkv = b.Alloc(tokens * 3 * h * bf16);
      b.Free(dfc1);
      b.Free(dqkv);
      for (auto it = saved[l].rbegin(); it != saved[l].rend(); ++it) b.Free(*it);
      if (iter == 0) {
        for (size_t p = 0; p < per_layer; ++p) b.Alloc(param_elems[1 + l * per_layer + p] * bf16);
      }
      b.Free(dx);
      dx = dx_new;
    }
    if (iter == 0) b.Alloc(param_elems[0] * bf16);  // embedding gradient
    b.Free(dx);
    b.Free(embed_out);
    // Optimizer step: Adam's moments on the first step, a temporary per parameter.
    for (uint64_t e : param_elems) {
      if (iter == 0) {
        b.Alloc(e * fp32);
        b.Alloc(e * fp32);
      }
      b.Free(b.Alloc(e * fp32));
    }
  }
  return b.Take();
}

Trace KvCacheTrace(uint64_t seed, KvLayout layout, uint64_t grow_tokens, uint64_t capacity) {
  std::mt19937_64 rng(seed);
  Builder b(layout == KvLayout::kContiguous ? "kv-contig-" + std::to_string(grow_tokens) : "kv-paged");
  constexpr uint64_t h = 4096, inter = 11008, layers = 32, vocab = 32000, bf16 = 2, fp32 = 4;
  constexpr uint64_t kv_per_token = 2 * layers * h * bf16;  // 512 KiB
  constexpr uint64_t block_tokens = 16;
  uint64_t weights = 0;
  b.Alloc(vocab * h * bf16);
  for (uint64_t l = 0; l < layers; ++l) {
    for (uint64_t e : {h, 3 * h * h, h * h, h, inter * h, inter * h, h * inter}) {
      b.Alloc(e * bf16);
      weights += e * bf16;
    }
  }
  b.Alloc(h * bf16);
  b.Alloc(vocab * h * bf16);
  weights += 2 * vocab * h * bf16 + h * bf16;
  const uint64_t budget_tokens = (capacity - weights - 2 * kGiB) / kv_per_token * 3 / 4;

  struct Request {
    uint64_t tokens = 0;           // in cache
    uint64_t left = 0;             // tokens still to generate
    uint64_t cap = 0;              // contiguous: tokens the buffer holds
    uint32_t buffer = 0;           // contiguous
    std::vector<uint32_t> blocks;  // paged
  };
  // Grows r's cache to hold r.tokens.
  auto grow = [&](Request& r) {
    if (layout == KvLayout::kContiguous) {
      if (r.tokens <= r.cap) return;
      const uint64_t cap = (r.tokens + grow_tokens - 1) / grow_tokens * grow_tokens;
      const uint32_t next = b.Alloc(cap * kv_per_token);
      if (r.cap != 0) b.Free(r.buffer);
      r.buffer = next;
      r.cap = cap;
    } else {
      while (r.blocks.size() * block_tokens < r.tokens) r.blocks.push_back(b.Alloc(block_tokens * kv_per_token));
    }
  };
  int waiting = 3000;
  std::deque<std::pair<uint64_t, uint64_t>> pending;  // prompt, output
  std::vector<Request> running;
  uint64_t cached_tokens = 0;
  while (waiting > 0 || !pending.empty() || !running.empty()) {
    while (waiting > 0 && pending.size() < 8) {
      const uint64_t prompt = LogUniform(rng, 16, 4096);
      pending.emplace_back(prompt, LogUniform(rng, 16, 1024));
      --waiting;
    }
    while (!pending.empty() && running.size() < 256 && cached_tokens + pending.front().first <= budget_tokens) {
      Request r;
      r.tokens = pending.front().first;
      r.left = pending.front().second;
      pending.pop_front();
      const uint32_t hidden = b.Alloc(r.tokens * h * bf16);
      const uint32_t mlp = b.Alloc(r.tokens * inter * bf16);
      grow(r);
      b.Free(mlp);
      b.Free(hidden);
      cached_tokens += r.tokens;
      running.push_back(std::move(r));
    }
    b.Free(b.Alloc(running.size() * vocab * fp32));
    for (size_t i = 0; i < running.size();) {
      Request& r = running[i];
      ++r.tokens;
      ++cached_tokens;
      --r.left;
      grow(r);
      if (r.left > 0) {
        ++i;
        continue;
      }
      if (layout == KvLayout::kContiguous) {
        b.Free(r.buffer);
      } else {
        for (uint32_t blk : r.blocks) b.Free(blk);
      }
      cached_tokens -= r.tokens;
      running[i] = std::move(running.back());
      running.pop_back();
    }
  }
  return b.Take();
}

}  // namespace drover::bench
