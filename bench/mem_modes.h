#pragma once
// The plain-table modes of mem_bench (its main picks one by its first flag;
// without one it runs the Google Benchmark functions of mem_bench.cc):
//
//   mem_bench --latency [--rounds=N]     per-call allocate / free percentiles
//   mem_bench --fragmentation [--seed=N] [--trace=NAME] [--no-sweep]
//                                        trace replay: waste, fragmentation, failures
//
// Both print markdown tables (docs/performance.md).

namespace drover::bench {

int LatencyMain(int argc, char** argv);        // mem_latency.cc
int FragmentationMain(int argc, char** argv);  // mem_fragmentation.cc

}  // namespace drover::bench
