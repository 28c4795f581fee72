#include "formats/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
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

std::string Bytes(const Tensor& t) { return std::string(t.data<const char>(), t.nbytes()); }

Tensor Pattern(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::Zeros(dtype, std::move(shape));
  for (size_t i = 0; i < t.nbytes(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(seed + 5 * i);
  return t;
}

// A v1.0 (u16 length) or v2.0 (u32 length) file with `dict` as header text, unpadded.
std::string NpyFile(int major, const std::string& dict, const std::string& data) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>(dict.size() >> (8 * i)));
  return out + dict + data;
}

void ExpectError(const Status& s, StatusCode code, const std::vector<std::string>& needles) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const std::string& n : needles) EXPECT_THAT(s.message(), HasSubstr(n));
}

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "lucid_npy_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(NpyTest, RoundTripsEverySupportedDType) {
  const DType types[] = {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kU8};
  const Shape shapes[] = {{}, {5}, {2, 3}, {2, 1, 3}, {0, 4}, {1}};
  int seed = 0;
  for (DType d : types) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(DTypeName(d)) + ShapeToString(s));
      const Tensor t = Pattern(d, s, ++seed);
      const std::string path = Path("t.npy");
      ASSERT_TRUE(WriteNpy(path, t).ok());
      const std::string raw = ReadAll(path);
      ASSERT_GE(raw.size(), 10u);
      EXPECT_EQ(raw.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
      const size_t hlen = static_cast<uint8_t>(raw[8]) | (static_cast<uint8_t>(raw[9]) << 8);
      EXPECT_EQ((10 + hlen) % 64, 0u);
      EXPECT_EQ(raw[10 + hlen - 1], '\n');
      EXPECT_EQ(raw.size(), 10 + hlen + t.nbytes());
      auto back = ReadNpy(path);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->dtype(), d);
      EXPECT_EQ(back->shape(), s);
      EXPECT_EQ(Bytes(*back), Bytes(t));
    }
  }
}

// Byte-for-byte what numpy 2.4 np.save writes for these arrays.
TEST_F(NpyTest, HeaderMatchesNumpy) {
  const std::string pad(58, ' ');
  const std::pair<Tensor, std::string> cases[] = {
      {Tensor::Zeros(DType::kF32, {3, 4}),
       "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" + pad},
      {Tensor::Zeros(DType::kF64, {}),
       "{'descr': '<f8', 'fortran_order': False, 'shape': (), }" + std::string(62, ' ')},
      {Tensor::Zeros(DType::kU8, {5}),
       "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }" + std::string(60, ' ')},
      {Tensor::Zeros(DType::kI64, {0, 2}),
       "{'descr': '<i8', 'fortran_order': False, 'shape': (0, 2), }" + pad},
  };
  for (const auto& [t, dict] : cases) {
    ASSERT_TRUE(WriteNpy(Path("h.npy"), t).ok());
    const std::string raw = ReadAll(Path("h.npy"));
    EXPECT_EQ(raw.substr(0, 128), std::string("\x93NUMPY\x01\x00v\x00", 10) + dict + "\n");
  }
}

TEST_F(NpyTest, ReadsVersion2AndPython2StyleHeaders) {
  const float vals[3] = {1.5f, -2.0f, 0.25f};
  const std::string data(reinterpret_cast<const char*>(vals), sizeof(vals));
  WriteAll(Path("v2.npy"),
           NpyFile(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", data));
  auto t = ReadNpy(Path("v2.npy"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape(), (Shape{3}));
  EXPECT_EQ(t->data<float>()[1], -2.0f);
  WriteAll(Path("py2.npy"),
           NpyFile(1, "{\"shape\": (1L, 3L), \"fortran_order\": False, \"descr\": \"<f4\"}", data));
  t = ReadNpy(Path("py2.npy"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape(), (Shape{1, 3}));
  EXPECT_EQ(Bytes(*t), data);
}

TEST_F(NpyTest, WriteErrorsNameThePath) {
  ExpectError(WriteNpy(Path("bf.npy"), Tensor::Zeros(DType::kBF16, {2})),
              StatusCode::kInvalidArgument, {"bf.npy", "bf16"});
  ExpectError(WriteNpy(Path("none.npy"), Tensor()), StatusCode::kInvalidArgument, {"none.npy"});
  ExpectError(WriteNpy(Path("no/dir/x.npy"), Tensor::Zeros(DType::kF32, {2})),
              StatusCode::kNotFound, {"no/dir/x.npy"});
  EXPECT_FALSE(fs::exists(Path("bf.npy")));
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST_F(NpyTest, ReadErrorsNameThePathAndTheProblem) {
  const std::string f8(8, '\0');
  struct Case {
    std::string bytes;
    StatusCode code;
    std::string needle;
  };
  const auto DL = StatusCode::kDataLoss;
  const auto UN = StatusCode::kUnimplemented;
  const std::string hdr = "'fortran_order': False, ";
  const std::vector<Case> cases = {
      {"", DL, "too short"},
      {"PK\x03\x04 not numpy at all", DL, "not a .npy file"},
      {NpyFile(4, "{}", ""), UN, "version 4.0"},
      {NpyFile(1, "{'descr': '>f4', " + hdr + "'shape': (2,), }", f8), UN, "'>f4'"},
      {NpyFile(1, "{'descr': '<f2', " + hdr + "'shape': (4,), }", f8), UN, "'<f2'"},
      {NpyFile(1, "{'descr': [('a', '<f4')], " + hdr + "'shape': (2,), }", f8), UN, "structured"},
      {NpyFile(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f8), UN, "Fortran"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (3,), }", f8), DL, "needs 12"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (1,), }", f8), DL, "needs 4"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (-2,), }", f8), DL, "non-negative"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (99999999999999999999,), }", f8), DL,
       "too large"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (4294967296, 4294967296, 4), }", f8), DL,
       "too large"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "}", f8), DL, "'shape'"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (2,), 'extra': 1}", f8), DL, "'extra'"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (2,) ", f8), DL, "bad .npy header"},
      {NpyFile(1, "{'descr': '<f4, " + hdr + "'shape': (2,)}", f8), DL, "bad .npy header"},
      {NpyFile(1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", f8), DL, "True"},
      {NpyFile(1, "{'descr': '<f4', " + hdr + "'shape': (2,)} x", f8), DL, "trailing"},
      {std::string("\x93NUMPY\x01\x00\xff\xff{}", 12), DL, "exceeds the file"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const std::string path = Path("bad" + std::to_string(i) + ".npy");
    WriteAll(path, cases[i].bytes);
    auto t = ReadNpy(path);
    ASSERT_FALSE(t.ok());
    ExpectError(t.status(), cases[i].code, {path, cases[i].needle});
  }
  ExpectError(ReadNpy(Path("missing.npy")).status(), StatusCode::kNotFound, {"missing.npy"});
}

TEST_F(NpyTest, TruncationAtEveryLengthFailsCleanly) {
  ASSERT_TRUE(WriteNpy(Path("full.npy"), Pattern(DType::kI32, {3, 2}, 1)).ok());
  const std::string raw = ReadAll(Path("full.npy"));
  for (size_t cut = 0; cut < raw.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    WriteAll(Path("cut.npy"), raw.substr(0, cut));
    auto t = ReadNpy(Path("cut.npy"));
    ASSERT_FALSE(t.ok());
    ExpectError(t.status(), StatusCode::kDataLoss, {"cut.npy"});
  }
}

}  // namespace
}  // namespace lucid
