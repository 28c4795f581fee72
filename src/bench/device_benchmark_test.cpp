// The device benchmark on GuardedDeviceBackend: every tiny fixture runs prefill and decode with
// the host touching no device memory (the guard's violations), and its accounting is held to
// bounds read from the checkpoint's own headers: a decode step reads at least every weight but the
// routed experts and the embedding table, at most all of them plus the KV pool; a prefill does at
// least 2 FLOPs per prompt token per parameter of the attention and dense projections.
#include "bench/device_benchmark.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/guarded_device.h"
#include "formats/safetensors.h"

namespace lucid {
namespace {

bool Has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

class DeviceBenchTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeviceBenchTest, RunsOnDeviceMemoryAndCountsWhatTheCheckpointHolds) {
  const std::string dir = std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + GetParam();
  const CpuOps ops;
  GuardedDeviceBackend dev(ops);
  DeviceProbes probes;
  probes.device = "guarded host memory";
  probes.read_gbs = 10;
  probes.peak_gbs = 20;
  probes.bf16_tflops = 1;
  probes.f32_tflops = 0.5;
  DeviceBenchOptions o;
  o.model_path = dir;
  o.batches = {1, 3};
  o.prompt_len = 24;
  o.context = 70;  // past one page of 64, and past the tiny DSA's index_topk of 16
  o.gen_len = 2;
  o.repeats = 1;
  std::FILE* log = std::tmpfile();
  StatusOr<nlohmann::json> j = RunDeviceBench(dev, probes, o, log);
  std::fclose(log);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  for (const std::string& v : dev.violations()) ADD_FAILURE() << v;

  StatusOr<Checkpoint> ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok());
  double all = 0, always = 0, dense_params = 0;
  for (const std::string& name : ck->Names()) {
    const TensorInfo info = ck->Info(name).value();
    const double bytes = double(info.data_end - info.data_begin);
    all += bytes;
    const bool routed = Has(name, "mlp.experts.");
    if (!routed && !Has(name, "embed_tokens")) always += bytes;
    if (Has(name, "self_attn.") && !Has(name, "norm") && info.shape.size() == 2)
      dense_params += double(info.shape[0] * info.shape[1]);
  }
  ASSERT_EQ((*j)["decode"].size(), 2u);
  double previous = 0;
  for (const nlohmann::json& d : (*j)["decode"]) {
    const double b = d["bytes_per_step"], B = d["batch"];
    EXPECT_GE(b, always) << d.dump();
    const double kv_max = B * 2 * 128.0 * 4 * 1024 * 8;  // far above the tiny pool's bytes
    EXPECT_LE(b, all + kv_max) << d.dump();
    EXPECT_GE(b, previous) << "more sequences read no fewer bytes";
    previous = b;
    EXPECT_GT(d["experts_touched"].get<double>(), 0);
    EXPECT_NEAR(d["tok_s"].get<double>(), B / (d["step_ms"].get<double>() / 1e3),
                1e-6 * d["tok_s"].get<double>());
    EXPECT_NEAR(d["pct_bandwidth_probed"].get<double>(), 100 * d["gbs"].get<double>() / 10, 1e-9);
  }
  const nlohmann::json& p = (*j)["prefill"];
  EXPECT_GE(p["flops"].get<double>(), 2 * 24 * dense_params) << p.dump();
  EXPECT_NEAR(p["pct_bf16_tensor_peak"].get<double>(), 100 * p["tflops"].get<double>(), 1e-9);
  EXPECT_EQ((*j)["model"]["backend"], dev.name());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DeviceBenchTest,
                         ::testing::Values("tiny_deepseek_v3", "tiny_deepseek_v32",
                                           "tiny_glm_moe_dsa"));

}  // namespace
}  // namespace lucid
