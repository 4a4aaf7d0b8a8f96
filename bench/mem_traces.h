#pragma once
// Allocation traces for mem_bench --fragmentation: deterministic (a seed and
// std::mt19937_64, whose output the standard fixes, with the distributions
// written out here), generated without any allocator in the loop, so every
// allocator replays exactly the same requests. Sizes model one 80 GiB GPU.
//
// training  A transformer trained with Adam: h = 4096, 16 layers, vocab 50304,
//           bf16 parameters (3.2 B, 6.0 GiB). Before the first iteration the
//           parameters are allocated (one tensor per weight, bias and norm).
//           Each iteration: forward allocates each layer's saved activations
//           in order (embedding out; per layer ln1 out, qkv, attention out and
//           its fp32 log-sum-exp, projection out, ln2 out, fc1, gelu, fc2 out,
//           and two fp32 norm statistics) plus a workspace freed at the end of
//           the layer, then the logits (bf16) and a fp32 softmax freed after
//           the loss. Backward walks the layers in reverse: a new input
//           gradient per layer, fc1 and qkv gradient temporaries, the layer's
//           activations freed in reverse order, and (first iteration only)
//           the layer's gradients, which stay (long-lived, bf16). The first
//           optimizer step allocates Adam's two fp32 moments per parameter
//           (long-lived); every step allocates and frees one fp32 temporary
//           per parameter. Tokens per batch (batch x sequence) change every
//           25 iterations: sequence 512, 1024, 2048 or 4096, batch chosen so
//           tokens are 2048 .. 14336 (a multiple of 2048), 300 iterations.
// kv-contig-16  LLM serving, KV cache as one contiguous buffer per request
//           that is reallocated (allocate the larger one, copy, free the old)
//           each time it fills, growing by 16 tokens.
// kv-contig-1   The same, growing by one token: a reallocation per request
//           per generated token (Hugging Face's DynamicCache, torch.cat).
// kv-paged  The same requests with the cache in 16-token blocks, one
//           allocation per block (8 MiB), all freed when the request ends.
//           Serving model for both: 7 B-class, 32 layers, h = 4096, bf16
//           weights (12.5 GiB, allocated first, long-lived), KV 512 KiB per
//           token. 3000 requests always waiting; prompts log-uniform 16 ..
//           4096 tokens, outputs log-uniform 16 .. 1024 tokens. A request is
//           admitted (at most 256 running) while the tokens in cache plus its
//           prompt stay under 75 % of the KV budget (capacity - weights - 2 GiB),
//           so growth can take the cache past it, as in an engine without
//           preemption. Admission allocates the prompt's cache and frees two
//           prefill temporaries (hidden states and the MLP intermediate);
//           each decode step allocates and frees the fp32 logits of the
//           batch, and every running request gains one token.

#include <cstdint>
#include <string>
#include <vector>

namespace drover::bench {

// size > 0: allocate size bytes as allocation `id` (ids count up from 0);
// size == 0: free allocation `id`.
struct TraceEvent {
  uint32_t id;
  uint64_t size;
};

struct Trace {
  std::string name;
  std::vector<TraceEvent> events;
  uint32_t allocations = 0;  // ids are 0 .. allocations-1
  uint64_t peak_live = 0;    // most requested bytes live at once
  size_t peak_event = 0;     // the event after which peak_live was first reached
};

Trace TrainingTrace(uint64_t seed);
enum class KvLayout { kContiguous, kPaged };
// grow_tokens: what a contiguous buffer grows by (a paged block is 16 tokens).
Trace KvCacheTrace(uint64_t seed, KvLayout layout, uint64_t grow_tokens, uint64_t capacity);

}  // namespace drover::bench
