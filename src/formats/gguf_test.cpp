// GgufFile and the ggml type decoders: the committed fixture made by the `gguf` Python package
// (tools/reference/gguf/make_fixtures.py) is the oracle for metadata and for dequantization (bit
// for bit); corrupt files are built here byte by byte.
#include "formats/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/ggml_types.h"

namespace lucid {
namespace {

std::string FixturePath() {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/gguf/types.gguf";
}

TEST(GgufFile, ReadsEveryMetadataTypeAsTheGgufPackageWroteIt) {
  auto f = GgufFile::Open(FixturePath());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(g.Find("test.u8")->type, GgufValueType::kU8);
  EXPECT_EQ(*g.GetUint("test.u8"), 200u);
  EXPECT_EQ(g.Find("test.i8")->i, -100);
  EXPECT_EQ(*g.GetUint("test.u16"), 60000u);
  EXPECT_EQ(g.Find("test.i16")->i, -30000);
  EXPECT_EQ(*g.GetUint("test.u32"), 4000000000u);
  EXPECT_EQ(g.Find("test.i32")->i, -2000000000);
  EXPECT_EQ(*g.GetFloat("test.f32"), static_cast<double>(0.1f));
  EXPECT_TRUE(*g.GetBool("test.bool"));
  EXPECT_EQ(*g.GetString("test.string"), "h\xc3\xa9llo\nworld");
  EXPECT_EQ(*g.GetUint("test.u64"), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(g.Find("test.i64")->i, -(int64_t{1} << 62));
  EXPECT_EQ(*g.GetFloat("test.f64"), 1e-300);
  EXPECT_EQ(*g.GetStringArray("test.arr_str"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*g.GetIntArray("test.arr_i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*g.GetFloatArray("test.arr_f32"), (std::vector<double>{0.5, -1.25}));
  const GgufValue* nested = g.Find("test.arr_nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elem_type, GgufValueType::kArray);
  ASSERT_EQ(nested->items.size(), 2u);
  ASSERT_EQ(nested->items[0].items.size(), 2u);
  EXPECT_EQ(nested->items[0].items[1].i, 2);
  EXPECT_EQ(nested->items[1].items[0].i, 3);
}

TEST(GgufFile, TypedGettersNameTheKeyAndTheTypeFound) {
  auto f = GgufFile::Open(FixturePath());
  ASSERT_TRUE(f.ok());
  auto s = (*f)->GetString("test.u32");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("test.u32 must be a string, got u32"), std::string::npos);
  EXPECT_EQ((*f)->GetUint("test.i8").status().code(), StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ((*f)->GetUint("no.such.key").status().code(), StatusCode::kNotFound);
}

struct TypeCase {
  const char* name;
  GgmlType type;
  int64_t cols;
};

class GgmlDequant : public ::testing::TestWithParam<TypeCase> {};

// Every decoded element equals gguf.quants.dequantize's, bit for bit, whole rows and odd spans.
TEST_P(GgmlDequant, EqualsTheGgufPackageBitForBit) {
  const TypeCase c = GetParam();
  auto f = GgufFile::Open(FixturePath());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto info = (*f)->Info(c.name);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ((*info)->type, c.type);
  EXPECT_EQ((*info)->shape, (Shape{3, c.cols}));
  auto expected = (*f)->Get(std::string(c.name) + ".expected");
  ASSERT_TRUE(expected.ok());
  const float* want = expected->data<float>();
  const uint8_t* data = (*f)->TensorData(**info);
  const int64_t row_bytes = GgmlRowBytes(c.type, c.cols);
  int64_t nonzero = 0;
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<float> got(c.cols);
    DequantizeGgmlRowSpan(c.type, data + r * row_bytes, 0, c.cols, got.data());
    for (int64_t i = 0; i < c.cols; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[r * c.cols + i], 4);
      ASSERT_EQ(a, b) << c.name << " row " << r << " col " << i << ": " << got[i] << " vs "
                      << want[r * c.cols + i];
      nonzero += got[i] != 0;
    }
    // A span that starts and ends inside blocks.
    const int64_t c0 = 5, n = c.cols - 12;
    std::vector<float> span(n);
    DequantizeGgmlRowSpan(c.type, data + r * row_bytes, c0, n, span.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&span[i], &want[r * c.cols + c0 + i], 4), 0) << c.name << " span " << i;
    }
  }
  EXPECT_GT(nonzero, c.cols);  // the fixture is not trivially zero
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, GgmlDequant,
    ::testing::Values(TypeCase{"F32", GgmlType::kF32, 64}, TypeCase{"F16", GgmlType::kF16, 64},
                      TypeCase{"BF16", GgmlType::kBF16, 64}, TypeCase{"Q8_0", GgmlType::kQ8_0, 96},
                      TypeCase{"Q4_0", GgmlType::kQ4_0, 96}, TypeCase{"Q4_1", GgmlType::kQ4_1, 96},
                      TypeCase{"Q4_K", GgmlType::kQ4_K, 512},
                      TypeCase{"Q5_K", GgmlType::kQ5_K, 512},
                      TypeCase{"Q6_K", GgmlType::kQ6_K, 512}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(GgufFile, GetGivesTypedViewsAndRawRowsForQuantizedTypes) {
  auto f = GgufFile::Open(FixturePath());
  ASSERT_TRUE(f.ok());
  auto t = (*f)->Get("F16");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype(), DType::kF16);
  EXPECT_EQ(t->shape(), (Shape{3, 64}));
  auto q = (*f)->Get("Q4_K");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->dtype(), DType::kU8);
  EXPECT_EQ(q->shape(), (Shape{3, 2 * 144}));
  EXPECT_EQ((*f)->Get("nope").status().code(), StatusCode::kNotFound);
}

// ---- corrupt files, built byte by byte -------------------------------------------------------

class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& PadTo(size_t a) {
    while (b_.size() % a) b_.push_back(0);
    return *this;
  }
  Bytes& Zeros(size_t n) {
    b_.insert(b_.end(), n, 0);
    return *this;
  }
  std::vector<uint8_t>& v() { return b_; }

 private:
  std::vector<uint8_t> b_;
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  uint64_t offset;
};

// A valid file: magic, version, one u32 metadata key, the given tensors, `data` zero bytes.
std::vector<uint8_t> MakeFile(const std::vector<TensorSpec>& tensors, size_t data,
                              uint32_t version = 3) {
  Bytes b;
  b.Put<uint32_t>(0x46554747).Put<uint32_t>(version).Put<uint64_t>(tensors.size()).Put<uint64_t>(1);
  b.Str("general.architecture").Put<uint32_t>(8).Str("llama");
  for (const auto& t : tensors) {
    b.Str(t.name).Put<uint32_t>(t.dims.size());
    for (auto d : t.dims) b.Put<uint64_t>(d);
    b.Put<uint32_t>(t.type).Put<uint64_t>(t.offset);
  }
  b.PadTo(32).Zeros(data);
  return b.v();
}

Status ParseBytes(const std::vector<uint8_t>& bytes) {
  auto f = GgufFile::Parse("mem.gguf", bytes.data(), bytes.size(), nullptr);
  return f.status();
}

void ExpectError(const std::vector<uint8_t>& bytes, StatusCode code, const std::string& needle) {
  Status s = ParseBytes(bytes);
  ASSERT_FALSE(s.ok()) << "expected an error containing " << needle;
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.ToString();
  EXPECT_EQ(s.message().rfind("mem.gguf", 0), 0u) << "names the file: " << s.ToString();
}

TEST(GgufFile, ParsesAHandBuiltFile) {
  auto bytes = MakeFile({{"a", {32, 2}, 8, 0}, {"b", {4}, 0, 96}}, 112);
  auto f = GgufFile::Parse("mem.gguf", bytes.data(), bytes.size(), nullptr);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->tensors().at("a").bytes, 68u);
  EXPECT_EQ((*f)->tensors().at("a").shape, (Shape{2, 32}));
  EXPECT_EQ((*f)->tensor_order(), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(ParseBytes(MakeFile({{"a", {4}, 0, 0}}, 16, /*version=*/2)).ok());
}

TEST(GgufFile, RefusesCorruptHeadersWithOneLineErrors) {
  auto good = MakeFile({{"a", {32, 2}, 8, 0}}, 68);
  ASSERT_TRUE(ParseBytes(good).ok());
  auto bad_magic = good;
  bad_magic[0] = 'X';
  ExpectError(bad_magic, StatusCode::kDataLoss, "not a GGUF file");
  ExpectError(MakeFile({}, 0, 1), StatusCode::kUnimplemented, "version 1");
  ExpectError(MakeFile({}, 0, 0x03000000), StatusCode::kUnimplemented, "big-endian");
  ExpectError(MakeFile({}, 0, 7), StatusCode::kUnimplemented, "version 7");
  ExpectError(MakeFile({{"a", {32, 2}, 99, 0}}, 68), StatusCode::kDataLoss,
              "unknown ggml type id 99");
  ExpectError(MakeFile({{"a", {33, 2}, 8, 0}}, 68), StatusCode::kDataLoss,
              "not a multiple of Q8_0's block");
  ExpectError(MakeFile({{"a", {32, 2}, 8, 8}}, 68), StatusCode::kDataLoss,
              "not a multiple of the alignment");
  ExpectError(MakeFile({{"a", {32, 2}, 8, 0}}, 67), StatusCode::kDataLoss, "runs past the end");
  ExpectError(MakeFile({{"a", {32, 2}, 8, 0}, {"b", {4}, 0, 64}}, 200), StatusCode::kDataLoss,
              "overlap");
  ExpectError(MakeFile({{"a", {4}, 0, 0}, {"a", {4}, 0, 32}}, 64), StatusCode::kDataLoss,
              "appears twice");
  ExpectError(MakeFile({{"a", {}, 0, 0}}, 64), StatusCode::kDataLoss, "rank 0");
  ExpectError(MakeFile({{"a", {1, 2, 3, 4, 5}, 0, 0}}, 64), StatusCode::kDataLoss, "rank 5");
  ExpectError(MakeFile({{"a", {0}, 0, 0}}, 64), StatusCode::kDataLoss, "zero or too large");
  ExpectError(MakeFile({{"a", {1u << 30, 1u << 30, 1u << 30}, 0, 0}}, 64), StatusCode::kDataLoss,
              "too large");
}

TEST(GgufFile, EveryTruncationIsAnErrorNotACrash) {
  auto good = MakeFile({{"a", {32, 2}, 8, 0}}, 68);
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    Status s = ParseBytes(cut);
    ASSERT_FALSE(s.ok()) << "length " << n;
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  }
}

std::vector<uint8_t> OneKey(const std::function<void(Bytes&)>& kv, uint64_t n_kv = 1) {
  Bytes b;
  b.Put<uint32_t>(0x46554747).Put<uint32_t>(3).Put<uint64_t>(0).Put<uint64_t>(n_kv);
  kv(b);
  return b.v();
}

TEST(GgufFile, RefusesCorruptMetadata) {
  ExpectError(OneKey([](Bytes& b) { b.Str("k").Put<uint32_t>(13); }), StatusCode::kDataLoss,
              "unknown value type 13");
  ExpectError(OneKey([](Bytes& b) { b.Str("k").Put<uint32_t>(7).Put<uint8_t>(2); }),
              StatusCode::kDataLoss, "bool value 2");
  ExpectError(OneKey([](Bytes& b) { b.Str("k").Put<uint32_t>(8).Put<uint64_t>(1000); }),
              StatusCode::kDataLoss, "exceeds the");
  ExpectError(OneKey([](Bytes& b) {
                b.Str("k").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(uint64_t{1} << 60);
              }),
              StatusCode::kDataLoss, "cannot fit");
  ExpectError(
      OneKey(
          [](Bytes& b) {
            b.Str("k").Put<uint32_t>(4).Put<uint32_t>(1).Str("k").Put<uint32_t>(4).Put<uint32_t>(2);
          },
          2),
      StatusCode::kDataLoss, "appears twice");
  ExpectError(OneKey([](Bytes& b) {
                b.Str("k").Put<uint32_t>(9);  // an array of arrays of arrays ...
                for (int d = 0; d < 10; ++d) b.Put<uint32_t>(9).Put<uint64_t>(1);
              }),
              StatusCode::kDataLoss, "nest deeper");
  ExpectError(
      OneKey([](Bytes& b) { b.Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(48); }),
      StatusCode::kDataLoss, "not a power of two");
  ExpectError(OneKey([](Bytes& b) { b.Str("general.alignment").Put<uint32_t>(8).Str("x"); }),
              StatusCode::kDataLoss, "must be an unsigned integer");
  ExpectError(OneKey([](Bytes& b) {}, uint64_t{1} << 40), StatusCode::kDataLoss, "metadata count");
  // The alignment is honoured: 64 puts the data section on a multiple of 64.
  auto ok = OneKey([](Bytes& b) { b.Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(64); });
  auto f = GgufFile::Parse("mem.gguf", ok.data(), ok.size(), nullptr);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->alignment(), 64u);
}

TEST(GgufFile, UnsupportedTypesOpenButGetSaysWhichType) {
  auto bytes = MakeFile({{"w", {32}, 6, 0}}, 32);  // Q5_0: known to ggml, not decoded by lucid
  auto f = GgufFile::Parse("mem.gguf", bytes.data(), bytes.size(), nullptr);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto t = (*f)->Get("w");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("Q5_0"), std::string::npos);
}

TEST(GgufFile, OpenNamesMissingAndEmptyFiles) {
  EXPECT_EQ(GgufFile::Open("/nonexistent/x.gguf").status().code(), StatusCode::kNotFound);
  const std::string p = ::testing::TempDir() + "/empty_" + std::to_string(getpid()) + ".gguf";
  std::ofstream(p).close();
  auto e = GgufFile::Open(p);
  EXPECT_EQ(e.status().code(), StatusCode::kDataLoss);
}

// The real SmolLM2 GGUF (installed by scripts/setup.sh into .cache/models, never committed):
// its header as the gguf package reads it, and rows of its Q8_0 / Q4_1 / F32 tensors decoded
// bit for bit as gguf.quants.dequantize does (tests/fixtures/gguf/smollm2_rows.gguf, written by
// tools/reference/gguf/smollm2_rows.py).
std::string SmolLm2Path() {
  const char* env = std::getenv("LUCID_MODEL_CACHE");
  const std::string dir = env ? env : std::string(LUCID_SOURCE_DIR) + "/.cache/models";
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(GgufFile, ReadsTheSmolLm2FileAndDecodesItsRowsAsTheGgufPackage) {
  if (!std::filesystem::exists(SmolLm2Path())) {
    GTEST_SKIP() << SmolLm2Path() << " is not installed (scripts/setup.sh installs it)";
  }
  auto f = GgufFile::Open(SmolLm2Path());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(g.tensors().size(), 272u);
  EXPECT_EQ(*g.GetUint("llama.block_count"), 30u);
  EXPECT_EQ(*g.GetUint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(*g.GetFloat("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(g.GetStringArray("tokenizer.ggml.tokens")->size(), 49152u);
  const auto& emb = g.tensors().at("token_embd.weight");
  EXPECT_EQ(emb.type, GgmlType::kQ8_0);
  EXPECT_EQ(emb.shape, (Shape{49152, 576}));
  EXPECT_EQ(g.tensors().at("blk.0.attn_k.weight").shape, (Shape{192, 576}));
  auto rows =
      GgufFile::Open(std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/gguf/smollm2_rows.gguf");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  int checked = 0;
  for (const auto& [key, ti] : (*rows)->tensors()) {
    const std::string name = key.substr(0, key.find('#'));
    const int64_t row = std::stoll(key.substr(key.find('#') + 1));
    const GgufTensorInfo& src = g.tensors().at(name);
    const int64_t cols = src.dims[0];
    std::vector<float> got(cols);
    DequantizeGgmlRowSpan(src.type, g.TensorData(src) + row * GgmlRowBytes(src.type, cols), 0, cols,
                          got.data());
    ASSERT_EQ(ti.dims[0], cols);
    EXPECT_EQ(std::memcmp(got.data(), (*rows)->TensorData(ti), cols * 4), 0) << key;
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

}  // namespace
}  // namespace lucid
