#pragma once
// Seeded randomness only: the same seed gives the same sequence, so a failing
// property test or simulation can be replayed.

#include <cstdint>
#include <random>

namespace drover {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform in [lo, hi].
  int64_t Uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  double UniformReal() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
  bool Bernoulli(double p) { return UniformReal() < p; }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace drover
