// `lucid align` run as a user would: the aligned copy of a transformers-written fixture (its
// weights off 64-byte lines) generates the transformers golden continuation; the command reports
// what was off a line; `bench` warns about an unaligned checkpoint and not about the copy; an
// occupied output directory is refused and left as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "e2e_util.h"
#include "formats/safetensors.h"

namespace lucid {
namespace {

namespace fs = std::filesystem;

using e2e::Lucid;
using e2e::Result;
using e2e::Shell;
using e2e::Src;

class AlignCliTest : public e2e::ScratchDirTest {};

TEST_F(AlignCliTest, AlignedCopyGeneratesTheGoldenContinuationAndBenchStopsWarning) {
  const std::string in = Src("tests/fixtures/models/tiny_deepseek_v32");
  const std::string out = (dir_ / "al").string();
  Result a = Shell(Lucid() + " align --model-path " + in + " --out " + out);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_NE(a.out.find("1 safetensors files"), std::string::npos) << a.out;
  EXPECT_EQ(a.out.find(" 0.000 GB of weights were off a line"), std::string::npos) << a.out;

  auto g = SafetensorsFile::Open(Src("tests/fixtures/golden/tiny_deepseek_v32.safetensors"));
  ASSERT_TRUE(g.ok());
  Result r = Shell(Lucid() + " generate --model-path " + out + " --prompt-ids " +
                   e2e::JoinIds((*g)->Get("prompt_ids").value()) + " --max-new-tokens 16");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, e2e::JoinIds((*g)->Get("continuation").value()) + "\n");

  Result again =
      Shell(Lucid() + " align --model-path " + out + " --out " + (dir_ / "al2").string());
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find(" 0.000 GB of weights were off a line"), std::string::npos) << again.out;

  const char* kWarn = "of weights start off a 64-byte line";
  const std::string bench =
      " bench --batch 1 --gen-len 2 --prompt-len 16 --skip-prefill --model-path ";
  Result b0 = Shell(Lucid() + bench + in);
  ASSERT_EQ(b0.code, 0) << b0.out;
  EXPECT_NE(b0.out.find(kWarn), std::string::npos) << b0.out;
  Result b1 = Shell(Lucid() + bench + out);
  ASSERT_EQ(b1.code, 0) << b1.out;
  EXPECT_EQ(b1.out.find(kWarn), std::string::npos) << b1.out;
}

TEST_F(AlignCliTest, ProgressIsShownOnATerminalOnly) {
  const std::string cmd =
      Lucid() + " align --model-path " + Src("tests/fixtures/models/tiny_glm_moe_dsa") + " --out ";
  Result tty = Shell("script -qec '" + cmd + (dir_ / "t").string() + "' /dev/null");
  ASSERT_EQ(tty.code, 0) << tty.out;
  EXPECT_NE(tty.out.find("[1/1] model.safetensors"), std::string::npos) << tty.out;
  Result pipe = Shell(cmd + (dir_ / "p").string());
  ASSERT_EQ(pipe.code, 0) << pipe.out;
  EXPECT_EQ(pipe.out.find("[1/1]"), std::string::npos) << pipe.out;
}

TEST_F(AlignCliTest, AnOccupiedOutputIsRefusedAndKept) {
  fs::create_directories(dir_ / "busy");
  std::ofstream(dir_ / "busy" / "notes.txt") << "mine";
  Result r =
      Shell(Lucid() + " align --model-path " + Src("tests/fixtures/models/tiny_glm_moe_dsa") +
            " --out " + (dir_ / "busy").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("exists and is not an empty directory"), std::string::npos) << r.out;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "busy"), {}), 1);
  Result missing = Shell(Lucid() + " align --model-path " + (dir_ / "none").string() + " --out " +
                         (dir_ / "o").string());
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_FALSE(fs::exists(dir_ / "o"));
}

}  // namespace
}  // namespace lucid
