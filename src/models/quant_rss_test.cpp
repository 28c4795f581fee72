// Measurement of the "weights stay packed" contract on a large checkpoint: resident memory after
// loading (and after a 64-token prefill) against the checkpoint's packed weight bytes. Skipped
// unless LUCID_RSS_MODEL names a model directory (the numbers in docs/QUANTIZATION.md were taken
// with it; the checkpoints are too big for CI). Run it alone, in a fresh process:
//   LUCID_RSS_MODEL=/path/model build/lucid_models_tests --gtest_filter='PackedResident*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/cpu/cpu_ops.h"
#include "models/registry.h"
#include "runtime/engine_driver.h"

namespace lucid {
namespace {

struct Rss {
  double anon_mb = 0, file_mb = 0;
};

Rss ReadRss() {
  std::ifstream f("/proc/self/status");
  std::string key;
  Rss r;
  while (f >> key) {
    double kb = 0;
    if (key == "RssAnon:" && (f >> kb)) r.anon_mb = kb / 1024;
    if (key == "RssFile:" && (f >> kb)) r.file_mb = kb / 1024;
  }
  return r;
}

TEST(PackedResidentMemoryTest, ResidentMemoryIsAboutThePackedSize) {
  const char* dir = std::getenv("LUCID_RSS_MODEL");
  if (dir == nullptr) GTEST_SKIP() << "set LUCID_RSS_MODEL=DIR to measure (docs/QUANTIZATION.md)";
  const CpuOps ops;
  const Rss r0 = ReadRss();
  auto m = LoadModel(dir, ops);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Rss r1 = ReadRss();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 64; ++i)
    prompt.push_back((i * 7919 + 13) % static_cast<int>((*m)->config().vocab_size));
  Tensor logits;
  ASSERT_TRUE(GreedyGenerate(**m, prompt, 1, &logits).ok());
  const Rss r2 = ReadRss();
  const double packed_mb = static_cast<double>((*m)->weight_bytes()) / (1 << 20);
  std::printf("  packed weight bytes %.1f MiB\n", packed_mb);
  std::printf("  after load:    +%.1f MiB anon, +%.1f MiB file-backed (ratio to packed %.3f)\n",
              r1.anon_mb - r0.anon_mb, r1.file_mb - r0.file_mb,
              (r1.anon_mb + r1.file_mb - r0.anon_mb - r0.file_mb) / packed_mb);
  std::printf("  after prefill: +%.1f MiB anon, +%.1f MiB file-backed (ratio to packed %.3f)\n",
              r2.anon_mb - r0.anon_mb, r2.file_mb - r0.file_mb,
              (r2.anon_mb + r2.file_mb - r0.anon_mb - r0.file_mb) / packed_mb);
  // No expansion: anonymous memory after load is a small fraction of the packed weights, and
  // everything resident after touching the weights is about their packed size.
  EXPECT_LT(r1.anon_mb - r0.anon_mb, 0.05 * packed_mb + 16);
  EXPECT_LT(r2.anon_mb + r2.file_mb - r0.anon_mb - r0.file_mb, 1.15 * packed_mb + 64);
}

}  // namespace
}  // namespace lucid
