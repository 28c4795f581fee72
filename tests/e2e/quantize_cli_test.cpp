// `lucid quantize` and `lucid generate --kv-cache-dtype` run as a user would: a quantized copy of
// a tiny fixture generates the transformers golden continuation of the lucid-quantized round-trip
// checkpoint, progress appears on a terminal (run under script(1) for a pty) and not in a pipe,
// and bad invocations exit with the documented codes and messages.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "e2e_util.h"
#include "formats/safetensors.h"

namespace lucid {
namespace {

namespace fs = std::filesystem;

using e2e::Lucid;
using e2e::Result;
using e2e::Shell;
using e2e::Src;

class QuantizeCliTest : public e2e::ScratchDirTest {};

TEST_F(QuantizeCliTest, QuantizedCopyGeneratesTheGoldenContinuation) {
  const std::string out = (dir_ / "nv").string();
  Result q =
      Shell(Lucid() + " quantize --model-path " + Src("tests/fixtures/models/tiny_deepseek_v3") +
            " --out " + out + " --scheme nvfp4");
  ASSERT_EQ(q.code, 0) << q.out;
  EXPECT_EQ(q.out.find('%'), std::string::npos) << "no progress bar into a pipe: " << q.out;
  for (const char* f : {"config.json", "hf_quant_config.json", "model.safetensors.index.json",
                        "model-00001-of-00001.safetensors", "generation_config.json"})
    EXPECT_TRUE(fs::exists(dir_ / "nv" / f)) << f;
  auto g = SafetensorsFile::Open(Src("tests/fixtures/quant/golden/roundtrip_nvfp4.safetensors"));
  ASSERT_TRUE(g.ok());
  const Tensor cont = (*g)->Get("continuation").value();
  for (const char* kv : {"auto", "bf16", "fp8_e4m3"}) {
    Result r = Shell(Lucid() + " generate --model-path " + out + " --prompt-ids " +
                     e2e::JoinIds((*g)->Get("prompt_ids").value()) +
                     " --max-new-tokens 16 --kv-cache-dtype " + kv);
    ASSERT_EQ(r.code, 0) << r.out;
    if (std::string(kv) == "auto") {
      EXPECT_EQ(r.out, e2e::JoinIds(cont) + "\n");
    }
  }
}

TEST_F(QuantizeCliTest, ProgressIsShownOnATerminal) {
  const std::string cmd = Lucid() + " quantize --model-path " +
                          Src("tests/fixtures/models/tiny_deepseek_v3") + " --out " +
                          (dir_ / "fp8").string() + " --scheme fp8-block";
  Result r = Shell("script -qec '" + cmd + "' /dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[100%]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.2.mlp.experts.7"), std::string::npos) << r.out;
}

TEST_F(QuantizeCliTest, BadInvocations) {
  Result ex =
      Shell(Lucid() + " quantize --model-path " + Src("tests/fixtures/models/tiny_deepseek_v3") +
            " --out " + (dir_ / "a").string() + " --scheme nvfp4 --exclude 'model.vision*'");
  EXPECT_EQ(ex.code, 2) << ex.out;
  EXPECT_NE(ex.out.find("--exclude \"model.vision*\" names no tensor"), std::string::npos)
      << ex.out;
  Result again =
      Shell(Lucid() + " quantize --model-path " + Src("tests/fixtures/quant/roundtrip_fp8") +
            " --out " + (dir_ / "b").string() + " --scheme nvfp4");
  EXPECT_EQ(again.code, 2) << again.out;  // a refusal of the user's input
  EXPECT_NE(again.out.find("already quantized"), std::string::npos) << again.out;
  Result scheme = Shell(Lucid() + " quantize --model-path x --out y --scheme int4");
  EXPECT_EQ(scheme.code, 2) << scheme.out;
  EXPECT_NE(scheme.out.find("--scheme: unknown value \"int4\" (valid: nvfp4, fp8-block)"),
            std::string::npos)
      << scheme.out;
  Result kv = Shell(Lucid() + " generate --model-path x --prompt-ids 1 --kv-cache-dtype int8");
  EXPECT_EQ(kv.code, 2) << kv.out;
  EXPECT_NE(kv.out.find("kv-cache-dtype"), std::string::npos) << kv.out;
}

}  // namespace
}  // namespace lucid
