#include "formats/align_checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace lucid {
namespace {
namespace fs = std::filesystem;

const std::string kRoot = LUCID_SOURCE_DIR;
// Written by transformers' save_pretrained (tests/fixtures/models/README.md): a hub layout, with
// the data section 40 bytes past a line.
const std::string kTinyGlm = kRoot + "/tests/fixtures/models/tiny_glm_moe_dsa";

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// MisalignedWeightBytes computed from the file's own header length, not through the reader's
// mapping: tensors of a whole number of lines whose file offset is off a line.
uint64_t MisalignedFromHeader(const Checkpoint& ckpt) {
  uint64_t bytes = 0;
  for (const std::string& name : ckpt.Names()) {
    const TensorInfo info = *ckpt.Info(name);
    const std::string raw = ReadAll(info.file);
    uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    const uint64_t size = info.data_end - info.data_begin;
    if (size > 0 && size % 64 == 0 && (8 + n + info.data_begin) % 64 != 0) bytes += size;
  }
  return bytes;
}

class AlignCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "lucid_align_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(AlignCheckpointTest, CopyHasTheSameTensorsAndFilesWithEveryWholeLineTensorOnALine) {
  auto in = Checkpoint::Open(kTinyGlm);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  const uint64_t misaligned = MisalignedFromHeader(*in);
  ASSERT_GT(misaligned, 500000u);  // the fixture's every weight is off a line
  EXPECT_EQ(MisalignedWeightBytes(*in), misaligned);
  const std::string before = ReadAll(kTinyGlm + "/model.safetensors");

  int calls = 0;
  auto r = AlignCheckpoint(kTinyGlm, (dir_ / "out").string(),
                           [&](size_t done, size_t total, const std::string& file) {
                             ++calls;
                             EXPECT_EQ(done, 1u);
                             EXPECT_EQ(total, 1u);
                             EXPECT_EQ(file, "model.safetensors");
                           });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files, 1u);
  EXPECT_EQ(r->misaligned_before, misaligned);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ReadAll(kTinyGlm + "/model.safetensors"), before);  // input untouched

  auto out = Checkpoint::Open((dir_ / "out").string());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(MisalignedFromHeader(*out), 0u);
  EXPECT_EQ(MisalignedWeightBytes(*out), 0u);
  ASSERT_EQ(out->Names(), in->Names());
  for (const std::string& name : in->Names()) {
    SCOPED_TRACE(name);
    const Tensor a = *in->Get(name), b = *out->Get(name);
    EXPECT_EQ(a.dtype(), b.dtype());
    EXPECT_EQ(a.shape(), b.shape());
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  }
  auto fa = SafetensorsFile::Open(kTinyGlm + "/model.safetensors");
  auto fb = SafetensorsFile::Open((dir_ / "out" / "model.safetensors").string());
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_EQ((*fa)->metadata(), (*fb)->metadata());
  size_t others = 0;
  for (const auto& e : fs::directory_iterator(kTinyGlm)) {
    if (e.path().extension() == ".safetensors") continue;
    SCOPED_TRACE(e.path().filename().string());
    EXPECT_EQ(ReadAll(dir_ / "out" / e.path().filename()), ReadAll(e.path()));
    ++others;
  }
  EXPECT_GE(others, 2u);  // config.json, generation_config.json
  EXPECT_EQ(static_cast<size_t>(std::distance(fs::directory_iterator(dir_ / "out"), {})),
            others + 1);
}

TEST_F(AlignCheckpointTest, RefusesAnOccupiedOutputTheInputItselfAndAMissingInput) {
  fs::create_directories(dir_ / "busy");
  std::ofstream(dir_ / "busy" / "x") << "keep";
  auto r = AlignCheckpoint(kTinyGlm, (dir_ / "busy").string());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("not an empty directory"), std::string::npos);
  EXPECT_EQ(ReadAll(dir_ / "busy" / "x"), "keep");

  fs::copy(kTinyGlm, dir_ / "self");
  const std::string before = ReadAll(dir_ / "self" / "model.safetensors");
  r = AlignCheckpoint((dir_ / "self").string(), (dir_ / "self").string());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("is the input directory"), std::string::npos);
  EXPECT_EQ(ReadAll(dir_ / "self" / "model.safetensors"), before);

  r = AlignCheckpoint((dir_ / "nothing").string(), (dir_ / "out").string());
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST(MisalignedWeightsMessageTest, SizeInMegabytesThenGigabytesAndTheCure) {
  EXPECT_EQ(MisalignedWeightsMessage(554944).rfind("0.6 MB of weights start off a 64-byte line", 0),
            0u);
  EXPECT_EQ(MisalignedWeightsMessage(999949999).rfind("999.9 MB of weights", 0), 0u);
  EXPECT_EQ(MisalignedWeightsMessage(1470841596).rfind("1.47 GB of weights", 0), 0u);
  EXPECT_NE(MisalignedWeightsMessage(1).find("`lucid align --model-path DIR --out OUT`"),
            std::string::npos);
}

}  // namespace
}  // namespace lucid
