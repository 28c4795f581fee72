// Shared helpers of the runtime's model-based tests (header only; tests link CpuOps through
// lucid_models). Not part of the library.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/parallel.h"
#include "models/registry.h"
#include "models/step_test_util.h"
#include "runtime/engine_core.h"
#include "runtime/engine_driver.h"

namespace lucid::testing_util {

// These tests exercise scheduling, not kernel threading, and their forwards are tiny: OpenMP
// barriers around microsecond kernels cost far more than the work on a loaded machine (minutes
// instead of seconds). So the calling thread runs kernels on one thread unless OMP_NUM_THREADS
// says otherwise. (The threaded engine's thread inherits the count of the thread that created it.)
inline const bool kSingleKernelThread = [] {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) SetNumThreads(1);
  return true;
}();

inline const CpuOps& RefOps() {
  static const CpuOps ops;
  return ops;
}

inline std::string ModelDir(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

inline std::unique_ptr<Model> LoadTiny(const std::string& name, const Ops& ops = RefOps()) {
  auto m = LoadModel(ModelDir(name), ops);
  LUCID_CHECK(m.ok(), m.status().ToString());
  return std::move(m).value();
}

inline std::unique_ptr<EngineCore> MakeCore(std::unique_ptr<Model> model, EngineOptions o,
                                            std::shared_ptr<const tok::Tokenizer> tok = nullptr) {
  auto core = EngineCore::Create(std::move(model), std::move(tok), o);
  LUCID_CHECK(core.ok(), core.status().ToString());
  return std::move(core).value();
}

// `n` random prompts with lengths in [min_len, max_len], token ids in [lo, hi).
inline std::vector<std::vector<int32_t>> RandomPrompts(int n, int min_len, int max_len,
                                                       uint32_t seed, int32_t lo = 2,
                                                       int32_t hi = 250) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(min_len + rng() % (max_len - min_len + 1));
    for (auto& t : p) t = lo + static_cast<int32_t>(rng() % (hi - lo));
    out.push_back(std::move(p));
  }
  return out;
}

inline GenerationRequest Greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;  // GreedyGenerate does not stop at EOS
  return r;
}

inline std::vector<int32_t> Alone(Model& m, const std::vector<int32_t>& prompt, int64_t n) {
  auto out = GreedyGenerate(m, prompt, n, nullptr, 16);
  LUCID_CHECK(out.ok(), out.status().ToString());
  return *out;
}

}  // namespace lucid::testing_util
