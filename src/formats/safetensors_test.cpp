#include "formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace lucid {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A raw safetensors file: u64 little-endian header length, header text, `data_bytes` data bytes.
std::string RawFile(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)));
  return out + header + std::string(data_bytes, '\x5a');
}

std::string Bytes(const Tensor& t) { return std::string(t.data<const char>(), t.nbytes()); }

Tensor Pattern(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::Zeros(dtype, std::move(shape));
  for (size_t i = 0; i < t.nbytes(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(seed + 7 * i);
  return t;
}

template <typename T>
Tensor Make(DType dtype, Shape shape, std::vector<T> values) {
  Tensor t = Tensor::Zeros(dtype, std::move(shape));
  EXPECT_EQ(t.nbytes(), values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
  return t;
}

// Mirrors interop_set() in tools/reference/check_safetensors_interop.py.
std::vector<std::pair<std::string, Tensor>> InteropSet() {
  std::vector<double> f64;
  std::vector<float> f32;
  for (int i = 0; i < 6; ++i) {
    f64.push_back(i * 0.25 - 0.5);
    f32.push_back(static_cast<float>(i) * 1.5f - 2.0f);
  }
  using u8 = std::vector<uint8_t>;
  return {
      {"f64", Make(DType::kF64, {2, 3}, f64)},
      {"f32", Make(DType::kF32, {3, 2}, f32)},
      {"f16", Make<uint16_t>(DType::kF16, {4}, {0x3C00, 0xC000, 0x3800, 0x7BFF})},
      {"bf16", Make<uint16_t>(DType::kBF16, {2, 2}, {0x3F80, 0xC000, 0x4049, 0x0000})},
      {"i64", Make<int64_t>(DType::kI64, {3}, {-1, int64_t{1} << 40, 7})},
      {"i32", Make<int32_t>(DType::kI32, {2, 2}, {-5, 0, 5, 2147483647})},
      {"i16", Make<int16_t>(DType::kI16, {3}, {-32768, 1, 32767})},
      {"i8", Make<int8_t>(DType::kI8, {4}, {-128, -1, 0, 127})},
      {"u8", Make(DType::kU8, {2, 3}, u8{0, 1, 2, 253, 254, 255})},
      {"bool", Make(DType::kBool, {3}, u8{1, 0, 1})},
      {"f8_e4m3", Make(DType::kF8E4M3, {4}, u8{0x38, 0xB8, 0x7E, 0x01})},
      {"f8_e5m2", Make(DType::kF8E5M2, {2}, u8{0x3C, 0x7C})},
      {"ue8m0", Make(DType::kUE8M0, {2}, u8{127, 130})},
      {"f4", Make(DType::kF4E2M1, {2, 4}, u8{0x21, 0x43, 0x65, 0xF7})},
      {"empty", Make(DType::kF32, {0, 3}, std::vector<float>{})},
  };
}
const std::map<std::string, std::string> kInteropMetadata = {
    {"format", "interop"}, {"writer", "check_safetensors_interop.py"}};

void ExpectSameTensors(const SafetensorsFile& f,
                       const std::vector<std::pair<std::string, Tensor>>& want) {
  EXPECT_EQ(f.tensors().size(), want.size());
  for (const auto& [name, t] : want) {
    SCOPED_TRACE(name);
    auto got = f.Get(name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->dtype(), t.dtype());
    EXPECT_EQ(got->shape(), t.shape());
    EXPECT_EQ(Bytes(*got), Bytes(t));
  }
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "lucid_st_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& ts) {
    Status s = WriteSafetensors(Path(name), ts);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::string dir_;
};

void ExpectError(const Status& s, StatusCode code, const std::vector<std::string>& needles) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const std::string& n : needles) EXPECT_THAT(s.message(), HasSubstr(n));
}

TEST_F(SafetensorsTest, RoundTripsEveryDTypeInOrderWithPaddedHeader) {
  std::vector<std::pair<std::string, Tensor>> ts;
  const DType all[] = {DType::kF64,    DType::kF32,    DType::kF16,   DType::kBF16, DType::kF8E4M3,
                       DType::kF8E5M2, DType::kF4E2M1, DType::kUE8M0, DType::kI64,  DType::kI32,
                       DType::kI16,    DType::kI8,     DType::kU8,    DType::kBool};
  int seed = 1;
  for (DType d : all) ts.emplace_back(std::string("t.") + DTypeName(d), Pattern(d, {3, 2}, seed++));
  ts.emplace_back("scalar", Pattern(DType::kF32, {}, 9));
  ts.emplace_back("zero", Pattern(DType::kBF16, {4, 0}, 0));
  ts.emplace_back("one_dim", Pattern(DType::kI8, {5}, 3));
  ts.emplace_back("quote\"back\\slash \xc3\xa9", Pattern(DType::kU8, {2}, 4));
  ASSERT_TRUE(WriteSafetensors(Path("all.safetensors"), ts, {{"k", "v"}, {"e", ""}}).ok());

  auto f = SafetensorsFile::Open(Path("all.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ExpectSameTensors(**f, ts);
  EXPECT_EQ((*f)->metadata(), (std::map<std::string, std::string>{{"k", "v"}, {"e", ""}}));
  EXPECT_EQ((*f)->path(), Path("all.safetensors"));
  // None of these sizes is a multiple of 64 but the empty one: data packed contiguously in the
  // given order after it; the data section starts at a multiple of 64 of the file.
  uint64_t offset = 0;
  EXPECT_EQ((*f)->tensors().at("zero").data_begin, 0u);
  for (const auto& [name, t] : ts) {
    if (name == "zero") continue;
    const TensorInfo& info = (*f)->tensors().at(name);
    EXPECT_EQ(info.data_begin, offset) << name;
    EXPECT_EQ(info.file, Path("all.safetensors"));
    offset = info.data_end;
  }
  const std::string raw = ReadAll(Path("all.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 64, 0u);
  EXPECT_EQ(raw.size(), 8 + n + offset);
  EXPECT_EQ(raw.substr(8, 16), "{\"__metadata__\":");
}

// Tensors whose size is a multiple of 64 bytes come first in the data, so each starts on a cache
// line of the mapping (the kernels' 64-byte loads then never span two lines), whatever odd-sized
// tensors are given between them; the header keeps the given order.
TEST_F(SafetensorsTest, WholeLineTensorsStartOnCacheLines) {
  const std::vector<std::pair<std::string, Tensor>> ts = {
      {"norm", Pattern(DType::kF32, {3}, 1)},       // 12 bytes
      {"w1", Pattern(DType::kBF16, {4, 32}, 2)},    // 256
      {"scale", Pattern(DType::kF32, {5}, 3)},      // 20
      {"w2", Pattern(DType::kF8E4M3, {2, 96}, 4)},  // 192
      {"bias", Pattern(DType::kBF16, {7}, 5)},      // 14
      {"w3", Pattern(DType::kF4E2M1, {2, 64}, 6)},  // 64
  };
  Write("a.safetensors", ts);
  auto f = SafetensorsFile::Open(Path("a.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ExpectSameTensors(**f, ts);
  const auto& info = (*f)->tensors();
  EXPECT_EQ(info.at("w1").data_begin, 0u);
  EXPECT_EQ(info.at("w2").data_begin, 256u);
  EXPECT_EQ(info.at("w3").data_begin, 448u);
  EXPECT_EQ(info.at("norm").data_begin, 512u);
  EXPECT_EQ(info.at("scale").data_begin, 524u);
  EXPECT_EQ(info.at("bias").data_begin, 544u);
  for (const char* name : {"w1", "w2", "w3"}) {
    auto t = (*f)->Get(name);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw()) % 64, 0u) << name;
  }
  const std::string raw = ReadAll(Path("a.safetensors"));
  EXPECT_LT(raw.find("\"norm\""), raw.find("\"w1\""));  // header in the given order
}

TEST_F(SafetensorsTest, EmptyHeaderAndMissingTensor) {
  WriteAll(Path("e.safetensors"), RawFile("{}      ", 0));
  auto f = SafetensorsFile::Open(Path("e.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE((*f)->tensors().empty());
  ExpectError((*f)->Get("nope").status(), StatusCode::kNotFound, {"e.safetensors", "\"nope\""});
}

struct BadCase {
  std::string header;
  StatusCode code;
  std::string needle;
  std::string tensor;  // empty: the message need not name one
};

TEST_F(SafetensorsTest, CorruptHeadersYieldClearErrors) {
  const std::string ok_entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const auto DL = StatusCode::kDataLoss;
  const std::vector<BadCase> cases = {
      {R"({"w": )", DL, "not valid JSON", ""},
      {"[1, 2]", DL, "must be a JSON object", ""},
      {R"({"w": 5})", DL, "entry must be an object", "w"},
      {R"({"w": {"shape":[2],"data_offsets":[0,8]}})", DL, "missing \"dtype\"", "w"},
      {R"({"w": {"dtype":"F32","data_offsets":[0,8]}})", DL, "missing \"shape\"", "w"},
      {R"({"w": {"dtype":"F32","shape":[2]}})", DL, "missing \"data_offsets\"", "w"},
      {R"({"w": {"dtype":32,"shape":[2],"data_offsets":[0,8]}})", DL, "must be a string", "w"},
      {R"({"w": {"dtype":"F32","shape":"2","data_offsets":[0,8]}})", DL, "must be a list", "w"},
      {R"({"w": {"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", DL, "integer", "w"},
      {R"({"w": {"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", DL, "negative", "w"},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[0]}})", DL, "[begin, end]", "w"},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":{"a":1}}})", DL, "[begin, end]", "w"},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", DL, "negative", "w"},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":["0","8"]}})", DL, "integer", "w"},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", DL, "end before begin", "w"},
      {R"({"w": {"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", StatusCode::kUnimplemented,
       "unknown safetensors dtype \"F7\"", "w"},
      {R"({"w": {"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", DL, "needs 12", "w"},
      {R"({"w": {"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", DL, "whole bytes", "w"},
      {R"({"w": {"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", DL, "past the end", "w"},
      {R"({"w": {"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", DL,
       "too large", "w"},
      {R"({"w": {"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,8]}})", DL,
       "too large", "w"},
      {R"({"w": {"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]}})", DL,
       "too large", "w"},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", DL,
       "needs 8", "w"},
      {R"({"w": {"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", DL,
       "end before begin", "w"},
      {R"({"a": )" + ok_entry + R"(, "b": {"dtype":"I32","shape":[2],"data_offsets":[4,12]}})", DL,
       "\"a\" [0, 8) and \"b\" [4, 12) overlap", ""},
      {R"({"__metadata__": [1]})", DL, "\"__metadata__\" must be an object", ""},
      {R"({"__metadata__": {"k": 1}})", DL, "\"k\" must be a string", ""},
      {R"({"w": )" + ok_entry + R"(, "w": )" + ok_entry + "}", DL, "\"w\" twice", ""},
      {R"({"w": {"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", DL,
       "\"dtype\" twice", ""},
      {"{\"w\xff\": 1}", DL, "not valid JSON", ""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const BadCase& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.header);
    const std::string name = "bad" + std::to_string(i) + ".safetensors";
    WriteAll(Path(name), RawFile(c.header, 16));
    auto f = SafetensorsFile::Open(Path(name));
    ASSERT_FALSE(f.ok());
    std::vector<std::string> needles = {Path(name), c.needle};
    if (!c.tensor.empty()) needles.push_back("tensor \"" + c.tensor + "\"");
    ExpectError(f.status(), c.code, needles);
  }
}

TEST_F(SafetensorsTest, BadFilesAndLengths) {
  WriteAll(Path("short.safetensors"), "abcde");
  ExpectError(SafetensorsFile::Open(Path("short.safetensors")).status(), StatusCode::kDataLoss,
              {"short.safetensors", "shorter than"});
  std::string big = RawFile("{}", 0);
  big[0] = '\x10';  // header length 16 > 2 bytes present
  WriteAll(Path("len.safetensors"), big);
  ExpectError(SafetensorsFile::Open(Path("len.safetensors")).status(), StatusCode::kDataLoss,
              {"len.safetensors", "exceeds the file"});
  WriteAll(Path("huge.safetensors"), std::string(8, '\xff') + "{}");
  ExpectError(SafetensorsFile::Open(Path("huge.safetensors")).status(), StatusCode::kDataLoss,
              {"huge.safetensors", "exceeds the file"});
  ExpectError(SafetensorsFile::Open(Path("missing.safetensors")).status(), StatusCode::kNotFound,
              {"missing.safetensors"});
  fs::create_directory(Path("adir.safetensors"));
  EXPECT_FALSE(SafetensorsFile::Open(Path("adir.safetensors")).ok());
}

TEST_F(SafetensorsTest, TruncationAtEveryLengthFailsCleanly) {
  Write("full.safetensors", {{"a", Pattern(DType::kF32, {4}, 1)},
                             {"b", Pattern(DType::kI8, {3}, 2)},
                             {"c", Pattern(DType::kBF16, {2, 2}, 3)}});
  const std::string raw = ReadAll(Path("full.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  ASSERT_TRUE(SafetensorsFile::Open(Path("full.safetensors")).ok());
  for (size_t cut = 0; cut < raw.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    WriteAll(Path("cut.safetensors"), raw.substr(0, cut));
    auto f = SafetensorsFile::Open(Path("cut.safetensors"));
    ASSERT_FALSE(f.ok());
    ExpectError(f.status(), StatusCode::kDataLoss, {"cut.safetensors"});
    if (cut >= 8 + n) {
      EXPECT_THAT(f.status().message(), HasSubstr("past the end"));
    }
  }
}

volatile unsigned sink_ = 0;

// Random byte corruption of a valid file: Open must succeed or fail cleanly, and every tensor
// handed out must lie inside the file (reading all of it must not fault).
TEST_F(SafetensorsTest, RandomCorruptionNeverCrashes) {
  Write("ok.safetensors", {{"weight", Pattern(DType::kF32, {4, 2}, 1)},
                           {"bias", Pattern(DType::kF16, {2}, 5)},
                           {"packed", Pattern(DType::kF4E2M1, {2, 2}, 7)}});
  const std::string raw = ReadAll(Path("ok.safetensors"));
  std::mt19937 rng(1234);
  int opened = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string mutated = raw;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % std::min<size_t>(mutated.size(), 8 + 200);
      mutated[pos] = static_cast<char>(rng() % 4 == 0 ? "0123456789[]{},-\""[rng() % 17] : rng());
    }
    WriteAll(Path("m.safetensors"), mutated);
    auto f = SafetensorsFile::Open(Path("m.safetensors"));
    if (!f.ok()) {
      EXPECT_THAT(f.status().message(), HasSubstr("m.safetensors"));
      continue;
    }
    ++opened;
    for (const auto& [name, info] : (*f)->tensors()) {
      auto t = (*f)->Get(name);
      if (!t.ok()) continue;
      const auto* p = t->data<const uint8_t>();
      unsigned sum = 0;
      for (size_t i = 0; i < t->nbytes(); ++i) sum += p[i];
      sink_ = sink_ + sum;
      EXPECT_LE(info.data_end, (*f)->file_size());
    }
  }
  EXPECT_GT(opened, 0);  // some mutations (e.g. in data or whitespace) stay valid
}

TEST_F(SafetensorsTest, OddPackedFp4LastDimIsUnimplementedOnGet) {
  WriteAll(Path("fp4.safetensors"),
           RawFile(R"({"q": {"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}})", 3));
  auto f = SafetensorsFile::Open(Path("fp4.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ExpectError((*f)->Get("q").status(), StatusCode::kUnimplemented,
              {"fp4.safetensors", "\"q\"", "even last dimension"});
}

TEST_F(SafetensorsTest, WriteFailuresLeaveExistingFileAndNoTempFile) {
  Write("keep.safetensors", {{"a", Pattern(DType::kF32, {2}, 1)}});
  const std::string before = ReadAll(Path("keep.safetensors"));
  const Tensor a = Pattern(DType::kF32, {2}, 2);
  ExpectError(WriteSafetensors(Path("keep.safetensors"), {{"a", a}, {"a", a}}),
              StatusCode::kInvalidArgument, {"keep.safetensors", "\"a\"", "twice"});
  ExpectError(WriteSafetensors(Path("keep.safetensors"), {{"x", Tensor()}}),
              StatusCode::kInvalidArgument, {"keep.safetensors", "\"x\""});
  ExpectError(WriteSafetensors(Path("keep.safetensors"), {{"__metadata__", a}}),
              StatusCode::kInvalidArgument, {"reserved"});
  ExpectError(
      WriteSafetensors(Path("keep.safetensors"), {{"odd", Tensor::Zeros(DType::kF4E2M1, {3})}}),
      StatusCode::kInvalidArgument, {"\"odd\"", "whole bytes"});
  ExpectError(WriteSafetensors(Path("keep.safetensors"), {{"bad\xff", a}}),
              StatusCode::kInvalidArgument, {"UTF-8"});
  EXPECT_EQ(ReadAll(Path("keep.safetensors")), before);
  // Rename onto a non-empty directory fails after the temp file was written.
  fs::create_directories(Path("occupied/inner"));
  EXPECT_FALSE(WriteSafetensors(Path("occupied"), {{"a", a}}).ok());
  ExpectError(WriteSafetensors(Path("no/such/dir/x.safetensors"), {{"a", a}}),
              StatusCode::kNotFound, {"no/such/dir/x.safetensors"});
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

// ---- Checkpoint ----

TEST_F(SafetensorsTest, ShardedCheckpointWithIndex) {
  const Tensor a = Pattern(DType::kF32, {2, 3}, 1), b = Pattern(DType::kI8, {4}, 2);
  const Tensor c = Pattern(DType::kBF16, {3}, 3);
  Write("model-00001-of-00002.safetensors", {{"a", a}, {"b", b}});
  Write("model-00002-of-00002.safetensors", {{"c", c}});
  Write("stray.safetensors", {{"z", c}});  // not in the index: ignored
  WriteAll(
      Path("model.safetensors.index.json"),
      R"({"metadata": {"total_size": 42}, "weight_map": {"a": "model-00001-of-00002.safetensors",
               "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(ck->Has("c"));
  EXPECT_FALSE(ck->Has("z"));
  EXPECT_EQ(ck->dir(), dir_);
  EXPECT_EQ(ck->TotalTensorBytes(), a.nbytes() + b.nbytes() + c.nbytes());
  auto info = ck->Info("c");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->file, Path("model-00002-of-00002.safetensors"));
  EXPECT_EQ(info->dtype, DType::kBF16);
  auto got = ck->GetWithShape("a", {2, 3});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Bytes(*got), Bytes(a));
  EXPECT_EQ(Bytes(*ck->Get("c")), Bytes(c));
  ExpectError(ck->GetWithShape("a", {3, 2}).status(), StatusCode::kInvalidArgument,
              {"\"a\"", "model-00001-of-00002.safetensors", "[2, 3]", "[3, 2]"});
  ExpectError(ck->Get("nope").status(), StatusCode::kNotFound, {"\"nope\"", dir_});
  ExpectError(ck->Info("nope").status(), StatusCode::kNotFound, {"\"nope\"", dir_});
}

// Prefetch walks every tensor of every shard once, in name order, reporting cumulative bytes, and
// stops with Cancelled (before any tensor) when asked to.
TEST_F(SafetensorsTest, PrefetchVisitsEveryTensorAndCancels) {
  const Tensor a = Pattern(DType::kF32, {3000, 5}, 1), b = Pattern(DType::kI8, {4}, 2);
  const Tensor c = Pattern(DType::kBF16, {3}, 3);
  Write("model-00001-of-00002.safetensors", {{"a", a}, {"b", b}});
  Write("model-00002-of-00002.safetensors", {{"c", c}});
  WriteAll(Path("model.safetensors.index.json"),
           R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
               "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  std::vector<std::pair<uint64_t, size_t>> calls;
  ASSERT_TRUE(ck->Prefetch(nullptr, [&](uint64_t bytes, size_t n) {
                  calls.push_back({bytes, n});
                }).ok());
  const std::vector<std::pair<uint64_t, size_t>> want = {
      {a.nbytes(), 1}, {a.nbytes() + b.nbytes(), 2}, {a.nbytes() + b.nbytes() + c.nbytes(), 3}};
  EXPECT_EQ(calls, want);
  std::atomic<bool> cancel{true};
  calls.clear();
  ExpectError(ck->Prefetch(&cancel,
                           [&](uint64_t bytes, size_t n) {
                             calls.push_back({bytes, n});
                           }),
              StatusCode::kCancelled, {"interrupted"});
  EXPECT_TRUE(calls.empty());
}

TEST_F(SafetensorsTest, IndexErrors) {
  Write("s1.safetensors", {{"a", Pattern(DType::kF32, {2}, 1)}});
  WriteAll(Path("model.safetensors.index.json"),
           R"({"weight_map": {"a": "s1.safetensors", "c": "s2.safetensors"}})");
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kNotFound,
              {"s2.safetensors", "\"c\"", dir_});
  WriteAll(Path("model.safetensors.index.json"),
           R"({"weight_map": {"a": "s1.safetensors", "ghost": "s1.safetensors"}})");
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kDataLoss,
              {"\"ghost\"", "s1.safetensors"});
  Write("s2.safetensors", {{"a", Pattern(DType::kF32, {2}, 1)}});
  WriteAll(Path("model.safetensors.index.json"),
           R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kDataLoss,
              {"\"a\"", "s1.safetensors", "s2.safetensors"});
  WriteAll(Path("model.safetensors.index.json"), R"({"weight_map": )");
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kDataLoss,
              {"model.safetensors.index.json", "not valid JSON"});
  WriteAll(Path("model.safetensors.index.json"), R"({"weights": {}})");
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kDataLoss, {"weight_map"});
  WriteAll(Path("model.safetensors.index.json"), R"({"weight_map": {"a": 1}})");
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kDataLoss, {"\"a\""});
  WriteAll(Path("bad.safetensors"), "0123");
  WriteAll(Path("model.safetensors.index.json"), R"({"weight_map": {"a": "bad.safetensors"}})");
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kDataLoss, {"bad.safetensors"});
}

TEST_F(SafetensorsTest, CheckpointWithoutIndex) {
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kNotFound, {dir_, "no safetensors"});
  ExpectError(Checkpoint::Open(Path("absent")).status(), StatusCode::kNotFound, {"absent"});
  // Every *.safetensors, sorted; a name in two files is an error naming both.
  Write("b.safetensors", {{"w", Pattern(DType::kF32, {2}, 1)}});
  Write("a.safetensors", {{"v", Pattern(DType::kF32, {2}, 2)}});
  auto ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"v", "w"}));
  EXPECT_EQ(ck->Info("w")->file, Path("b.safetensors"));
  Write("c.safetensors", {{"w", Pattern(DType::kF32, {2}, 3)}});
  ExpectError(Checkpoint::Open(dir_).status(), StatusCode::kDataLoss,
              {"\"w\"", "b.safetensors", "c.safetensors"});
  // model.safetensors wins over the glob.
  Write("model.safetensors", {{"only", Pattern(DType::kU8, {1}, 4)}});
  ck = Checkpoint::Open(dir_);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"only"}));
}

int MappingsOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(path) != std::string::npos;
  return n;
}

TEST_F(SafetensorsTest, TensorOutlivesCheckpointAndMappingIsReleased) {
  const Tensor w = Pattern(DType::kF32, {16, 4}, 5);
  Write("model.safetensors", {{"w", w}});
  Tensor kept;
  {
    auto ck = Checkpoint::Open(dir_);
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    kept = *ck->Get("w");
  }
  fs::remove(Path("model.safetensors"));  // the mapping stays valid without the name
  EXPECT_EQ(Bytes(kept), Bytes(w));
  EXPECT_EQ(MappingsOf(Path("model.safetensors")), 1);
  kept = Tensor();
  EXPECT_EQ(MappingsOf(Path("model.safetensors")), 0);
}

// ---- Interop with the Python reference (tools/reference/check_safetensors_interop.py) ----

TEST(SafetensorsInterop, ReadsPythonWrittenFixture) {
  auto f = SafetensorsFile::Open(std::string(LUCID_SOURCE_DIR) +
                                 "/tests/fixtures/safetensors/py_written.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ExpectSameTensors(**f, InteropSet());
  EXPECT_EQ((*f)->metadata(), kInteropMetadata);
  const Tensor f32 = *(*f)->Get("f32");
  EXPECT_EQ(f32.data<const float>()[5], 5.5f);
}

// Leaves <build>/formats_test_out/cpp_written.safetensors for the Python script's `check` mode.
TEST(SafetensorsInterop, WritesCppFile) {
  const std::string dir = std::string(LUCID_BINARY_DIR) + "/formats_test_out";
  fs::create_directories(dir);
  const std::string path = dir + "/cpp_written.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, InteropSet(), kInteropMetadata).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ExpectSameTensors(**f, InteropSet());
  EXPECT_EQ((*f)->metadata(), kInteropMetadata);
}

}  // namespace
}  // namespace lucid
