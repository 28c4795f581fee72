// Conversions are checked bit for bit against golden fixtures written by
// tools/reference/gen_dtype_goldens.py (ml_dtypes / numpy; see tests/fixtures/dtypes/README.md).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace lucid {
namespace {

static_assert(std::endian::native == std::endian::little, "fixtures are little-endian");

uint32_t Bits(float v) { return std::bit_cast<uint32_t>(v); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

std::string FixturePath(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/dtypes/" + name;
}

std::vector<uint8_t> ReadFixture(const std::string& name) {
  std::ifstream f(FixturePath(name), std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << FixturePath(name)
                        << " (regenerate with tools/reference/gen_dtype_goldens.py)";
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

template <typename T>
T Load(const std::vector<uint8_t>& buf, size_t byte_offset) {
  T v;
  std::memcpy(&v, buf.data() + byte_offset, sizeof(T));
  return v;
}

std::string Hex(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof(s), "0x%X", v);
  return s;
}

// One narrow type under test: how wide its codes are and how to tell its NaN codes.
struct TypeCase {
  DType dtype;
  const char* name;  // DTypeName spelling, also the fixture suffix
  int code_bytes;    // 2 for f16/bf16, 1 otherwise
  int code_bits;     // 16, 8 or 4
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
  uint32_t (*saturate)(float);  // null when the type has no saturating variant
  bool (*is_nan)(uint32_t);     // null when the type has no NaN
  uint32_t sign_mask;           // 0 for unsigned types
  // numpy keeps (part of) a NaN's payload when narrowing to f16; we return the canonical quiet NaN
  // (like torch). Only there may an expected NaN and the actual NaN differ in payload.
  bool nan_payload_may_differ;
};

bool F16IsNaN(uint32_t c) { return (c & 0x7C00) == 0x7C00 && (c & 0x3FF) != 0; }
bool Bf16IsNaN(uint32_t c) { return (c & 0x7F80) == 0x7F80 && (c & 0x7F) != 0; }
bool E4M3IsNaN(uint32_t c) { return (c & 0x7F) == 0x7F; }
bool E5M2IsNaN(uint32_t c) { return (c & 0x7F) > 0x7C; }
bool Ue8m0IsNaN(uint32_t c) { return c == 0xFF; }

const std::vector<TypeCase>& Cases() {
  static const std::vector<TypeCase> cases = {
      {DType::kF16, "f16", 2, 16, [](uint32_t c) { return F16ToF32(static_cast<uint16_t>(c)); },
       [](float v) -> uint32_t { return F32ToF16(v); }, nullptr, F16IsNaN, 0x8000, true},
      {DType::kBF16, "bf16", 2, 16, [](uint32_t c) { return Bf16ToF32(static_cast<uint16_t>(c)); },
       [](float v) -> uint32_t { return F32ToBf16(v); }, nullptr, Bf16IsNaN, 0x8000, false},
      {DType::kF8E4M3, "f8_e4m3", 1, 8,
       [](uint32_t c) { return F8E4M3ToF32(static_cast<uint8_t>(c)); },
       [](float v) -> uint32_t { return F32ToF8E4M3(v); },
       [](float v) -> uint32_t { return F32ToF8E4M3Saturate(v); }, E4M3IsNaN, 0x80, false},
      {DType::kF8E5M2, "f8_e5m2", 1, 8,
       [](uint32_t c) { return F8E5M2ToF32(static_cast<uint8_t>(c)); },
       [](float v) -> uint32_t { return F32ToF8E5M2(v); },
       [](float v) -> uint32_t { return F32ToF8E5M2Saturate(v); }, E5M2IsNaN, 0x80, false},
      {DType::kF4E2M1, "f4_e2m1", 1, 4,
       [](uint32_t c) { return F4E2M1ToF32(static_cast<uint8_t>(c)); },
       [](float v) -> uint32_t { return F32ToF4E2M1(v); }, nullptr, nullptr, 0x8, false},
      {DType::kUE8M0, "ue8m0", 1, 8, [](uint32_t c) { return Ue8m0ToF32(static_cast<uint8_t>(c)); },
       [](float v) -> uint32_t { return F32ToUe8m0(v); }, nullptr, Ue8m0IsNaN, 0, false},
  };
  return cases;
}

// gtest prints parameters with this (instead of a byte dump).
void PrintTo(const TypeCase& tc, std::ostream* os) { *os << tc.name; }

std::vector<TypeCase> SaturatingCases() {
  std::vector<TypeCase> out;
  for (const TypeCase& tc : Cases())
    if (tc.saturate) out.push_back(tc);
  return out;
}

class DTypeGolden : public ::testing::TestWithParam<TypeCase> {};
class DTypeGoldenSaturating : public ::testing::TestWithParam<TypeCase> {};

std::string CaseName(const ::testing::TestParamInfo<TypeCase>& info) { return info.param.name; }

// Expected float32 decode bits of every code, from the fixture.
std::vector<uint32_t> ExpectedDecode(const TypeCase& tc) {
  const std::vector<uint8_t> buf = ReadFixture(std::string("decode_") + tc.name + ".bin");
  const size_t ncodes = size_t{1} << tc.code_bits;
  std::vector<uint32_t> out(ncodes);
  if (tc.code_bits == 16) {
    // Only codes 0..0x7FFF are stored; the negative half is the same with the sign bit set.
    const bool bf16 = std::string(tc.name) == "bf16";
    const size_t width = bf16 ? 2 : 4;
    EXPECT_EQ(buf.size(), width * 0x8000);
    if (buf.size() != width * 0x8000) return {};
    for (size_t c = 0; c < ncodes; ++c) {
      const size_t pos = (c & 0x7FFF) * width;
      uint32_t b =
          bf16 ? static_cast<uint32_t>(Load<uint16_t>(buf, pos)) << 16 : Load<uint32_t>(buf, pos);
      if (c & 0x8000) b |= 0x80000000u;
      out[c] = b;
    }
  } else {
    EXPECT_EQ(buf.size(), 4 * ncodes);
    if (buf.size() != 4 * ncodes) return {};
    for (size_t c = 0; c < ncodes; ++c) out[c] = Load<uint32_t>(buf, 4 * c);
  }
  return out;
}

struct EncodeGolden {
  std::vector<uint32_t> inputs;  // float32 bits
  std::vector<uint32_t> expected;
  std::vector<uint32_t> expected_saturate;  // empty when the type has no saturating variant
};

EncodeGolden ReadEncodeGolden(const TypeCase& tc) {
  EncodeGolden g;
  const std::vector<uint8_t> buf = ReadFixture(std::string("encode_") + tc.name + ".bin");
  if (buf.size() < 4) {
    ADD_FAILURE() << "encode fixture too short";
    return g;
  }
  const size_t n = Load<uint32_t>(buf, 0);
  const size_t outputs = tc.saturate ? 2 : 1;
  const size_t want = 4 + 4 * n + outputs * n * tc.code_bytes;
  EXPECT_EQ(buf.size(), want) << tc.name;
  if (buf.size() != want) return g;
  size_t pos = 4;
  for (size_t i = 0; i < n; ++i, pos += 4) g.inputs.push_back(Load<uint32_t>(buf, pos));
  auto read_codes = [&](std::vector<uint32_t>& out) {
    for (size_t i = 0; i < n; ++i, pos += tc.code_bytes) {
      out.push_back(tc.code_bytes == 2 ? Load<uint16_t>(buf, pos) : Load<uint8_t>(buf, pos));
    }
  };
  read_codes(g.expected);
  if (tc.saturate) read_codes(g.expected_saturate);
  return g;
}

// True when `actual` is an acceptable encoding given the oracle's `expected` code.
bool EncodeMatches(const TypeCase& tc, uint32_t expected, uint32_t actual) {
  if (expected == actual) return true;
  return tc.nan_payload_may_differ && tc.is_nan && tc.is_nan(expected) && tc.is_nan(actual) &&
         (expected & tc.sign_mask) == (actual & tc.sign_mask);
}

TEST_P(DTypeGolden, DecodeEveryCodeBitExact) {
  const TypeCase& tc = GetParam();
  const std::vector<uint32_t> expected = ExpectedDecode(tc);
  ASSERT_EQ(expected.size(), size_t{1} << tc.code_bits);
  int mismatches = 0;
  for (uint32_t c = 0; c < expected.size(); ++c) {
    const uint32_t got = Bits(tc.decode(c));
    if (got != expected[c] && ++mismatches <= 10) {
      ADD_FAILURE() << tc.name << " decode(" << Hex(c) << ") = " << Hex(got) << ", expected "
                    << Hex(expected[c]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(DTypeGolden, EncodeMatchesOracle) {
  const TypeCase& tc = GetParam();
  const EncodeGolden g = ReadEncodeGolden(tc);
  ASSERT_GT(g.inputs.size(), 3000u);
  int mismatches = 0;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const float x = FromBits(g.inputs[i]);
    const uint32_t got = tc.encode(x);
    if (!EncodeMatches(tc, g.expected[i], got) && ++mismatches <= 10) {
      ADD_FAILURE() << tc.name << " encode(" << x << " = " << Hex(g.inputs[i]) << ") = " << Hex(got)
                    << ", expected " << Hex(g.expected[i]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(DTypeGoldenSaturating, EncodeMatchesOracle) {
  const TypeCase& tc = GetParam();
  const EncodeGolden g = ReadEncodeGolden(tc);
  ASSERT_EQ(g.expected_saturate.size(), g.inputs.size());
  int mismatches = 0;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const float x = FromBits(g.inputs[i]);
    const uint32_t got = tc.saturate(x);
    if (got != g.expected_saturate[i] && ++mismatches <= 10) {
      ADD_FAILURE() << tc.name << " saturate(" << x << " = " << Hex(g.inputs[i])
                    << ") = " << Hex(got) << ", expected " << Hex(g.expected_saturate[i]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Decoding any code and encoding the value again gives the code back; NaN codes come back as the
// type's canonical NaN of the same sign. (e2m1 and ue8m0 have no NaN payloads and no -0 issues:
// all their codes round-trip exactly, -0 included.)
TEST_P(DTypeGolden, RoundTripEveryCode) {
  const TypeCase& tc = GetParam();
  int mismatches = 0;
  for (uint32_t c = 0; c < (1u << tc.code_bits); ++c) {
    const uint32_t back = tc.encode(tc.decode(c));
    const bool ok = (tc.is_nan && tc.is_nan(c))
                        ? tc.is_nan(back) && (back & tc.sign_mask) == (c & tc.sign_mask)
                        : back == c;
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << tc.name << " code " << Hex(c) << " -> " << tc.decode(c) << " -> "
                    << Hex(back);
    }
    if (tc.saturate && !(tc.is_nan && tc.is_nan(c))) {
      // Finite codes are in range: saturation changes nothing (e5m2 Inf clamps to max).
      const uint32_t sat = tc.saturate(tc.decode(c));
      const bool inf = std::isinf(tc.decode(c));
      EXPECT_EQ(sat, inf ? ((c & tc.sign_mask) | 0x7B) : c) << tc.name << " code " << Hex(c);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Bulk conversion agrees with the scalar functions on every code / every golden input.
TEST_P(DTypeGolden, BulkMatchesScalar) {
  const TypeCase& tc = GetParam();
  const DType t = tc.dtype;
  ASSERT_STREQ(DTypeName(t), tc.name);

  // Decode: every code, laid out the way the type is stored.
  const size_t ncodes = size_t{1} << tc.code_bits;
  std::vector<uint8_t> raw(ncodes * tc.code_bytes);
  for (size_t c = 0; c < ncodes; ++c) {
    if (tc.code_bits == 4) {
      raw[c / 2] |= static_cast<uint8_t>(c << (4 * (c % 2)));
    } else if (tc.code_bytes == 2) {
      const uint16_t v = static_cast<uint16_t>(c);
      std::memcpy(&raw[2 * c], &v, 2);
    } else {
      raw[c] = static_cast<uint8_t>(c);
    }
  }
  std::vector<float> decoded(ncodes);
  ConvertToF32(t, raw.data(), decoded.data(), ncodes);
  for (size_t c = 0; c < ncodes; ++c) {
    ASSERT_EQ(Bits(decoded[c]), Bits(tc.decode(static_cast<uint32_t>(c)))) << Hex(c);
  }

  // Encode: the golden inputs.
  const EncodeGolden g = ReadEncodeGolden(tc);
  std::vector<float> src(g.inputs.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = FromBits(g.inputs[i]);
  const size_t n = src.size() & ~size_t{1};  // even, so fp4 fills whole bytes
  std::vector<uint8_t> out(n * tc.code_bytes);
  ConvertFromF32(t, src.data(), out.data(), n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t got;
    if (tc.code_bits == 4) {
      got = (out[i / 2] >> (4 * (i % 2))) & 0xF;
    } else if (tc.code_bytes == 2) {
      got = Load<uint16_t>(out, 2 * i);
    } else {
      got = out[i];
    }
    ASSERT_EQ(got, tc.encode(src[i])) << tc.name << " input " << Hex(g.inputs[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(AllNarrowTypes, DTypeGolden, ::testing::ValuesIn(Cases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Fp8, DTypeGoldenSaturating, ::testing::ValuesIn(SaturatingCases()),
                         CaseName);

// ---- Readable spot checks of the documented rules (the goldens above are the real oracle). ----

TEST(DTypeConvert, CanonicalNaNEncodings) {
  const float pos_nan = FromBits(0x7FC00000), neg_nan = FromBits(0xFFC00000);
  const float snan_payload = FromBits(0x7F800001);
  EXPECT_EQ(F32ToBf16(pos_nan), 0x7FC0);
  EXPECT_EQ(F32ToBf16(neg_nan), 0xFFC0);
  EXPECT_EQ(F32ToBf16(snan_payload), 0x7FC0);
  EXPECT_EQ(F32ToF16(pos_nan), 0x7E00);
  EXPECT_EQ(F32ToF16(neg_nan), 0xFE00);
  EXPECT_EQ(F32ToF16(snan_payload), 0x7E00);
  EXPECT_EQ(F32ToF8E4M3(pos_nan), 0x7F);
  EXPECT_EQ(F32ToF8E4M3(neg_nan), 0xFF);
  EXPECT_EQ(F32ToF8E4M3Saturate(neg_nan), 0xFF);
  EXPECT_EQ(F32ToF8E5M2(pos_nan), 0x7E);
  EXPECT_EQ(F32ToF8E5M2(neg_nan), 0xFE);
  EXPECT_EQ(F32ToF8E5M2Saturate(pos_nan), 0x7E);
  EXPECT_EQ(F32ToUe8m0(pos_nan), 0xFF);
  EXPECT_EQ(F32ToUe8m0(neg_nan), 0xFF);
  // e2m1 has no NaN: ml_dtypes yields a zero with the sign flipped.
  EXPECT_EQ(F32ToF4E2M1(pos_nan), 0x8);
  EXPECT_EQ(F32ToF4E2M1(neg_nan), 0x0);
  // Decoding NaNs: bf16/f16 keep the payload (bit shift); fp8 give the quiet NaN with the sign.
  EXPECT_EQ(Bits(Bf16ToF32(0x7F81)), 0x7F810000u);
  EXPECT_EQ(Bits(F16ToF32(0xFC01)), 0xFF802000u);
  EXPECT_EQ(Bits(F8E4M3ToF32(0xFF)), 0xFFC00000u);
  EXPECT_EQ(Bits(F8E5M2ToF32(0x7D)), 0x7FC00000u);
  EXPECT_EQ(Bits(Ue8m0ToF32(0xFF)), 0x7FC00000u);
}

TEST(DTypeConvert, OverflowRules) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F32ToBf16(3.4e38f), 0x7F80);  // rounds past bf16 max -> Inf
  EXPECT_EQ(F32ToF16(65519.996f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);
  EXPECT_EQ(F32ToF16(-1e6f), 0xFC00);
  // e4m3fn: max 448; 464 is the tie between 448 (even) and the NaN slot; above it is NaN.
  EXPECT_EQ(F32ToF8E4M3(448.0f), 0x7E);
  EXPECT_EQ(F32ToF8E4M3(464.0f), 0x7E);
  EXPECT_EQ(F32ToF8E4M3(std::nextafter(464.0f, inf)), 0x7F);
  EXPECT_EQ(F32ToF8E4M3(-inf), 0xFF);
  EXPECT_EQ(F32ToF8E4M3Saturate(1e9f), 0x7E);
  EXPECT_EQ(F32ToF8E4M3Saturate(-inf), 0xFE);
  // e5m2: max 57344 has an odd mantissa, so the tie at 61440 rounds to Inf.
  EXPECT_EQ(F32ToF8E5M2(57344.0f), 0x7B);
  EXPECT_EQ(F32ToF8E5M2(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(F32ToF8E5M2(61440.0f), 0x7C);
  EXPECT_EQ(F32ToF8E5M2(-inf), 0xFC);
  EXPECT_EQ(F32ToF8E5M2Saturate(inf), 0x7B);
  EXPECT_EQ(F32ToF8E5M2Saturate(-1e9f), 0xFB);
  // e2m1 saturates to +-6, Inf included.
  EXPECT_EQ(F32ToF4E2M1(7.0f), 0x7);
  EXPECT_EQ(F32ToF4E2M1(inf), 0x7);
  EXPECT_EQ(F32ToF4E2M1(-1e30f), 0xF);
}

TEST(DTypeConvert, F4E2M1RoundsToNearestEven) {
  const float in[] = {0.25f, 0.2500001f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.0001f, -0.25f};
  const float want[] = {0.0f, 0.5f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, -0.0f};
  for (size_t i = 0; i < std::size(in); ++i) {
    const float got = F4E2M1ToF32(F32ToF4E2M1(in[i]));
    EXPECT_EQ(Bits(got), Bits(want[i])) << in[i];
  }
  EXPECT_EQ(F32ToF4E2M1(-0.0f), 0x8);
  EXPECT_EQ(F32ToF4E2M1(-1e-30f), 0x8);
}

TEST(DTypeConvert, Ue8m0Rules) {
  EXPECT_EQ(F32ToUe8m0(1.0f), 127);
  EXPECT_EQ(F32ToUe8m0(1.4999999f), 127);
  EXPECT_EQ(F32ToUe8m0(1.5f), 128);  // ties round up (away from zero), not to even
  EXPECT_EQ(F32ToUe8m0(3.0f), 129);
  EXPECT_EQ(F32ToUe8m0(0.75f), 127);
  EXPECT_EQ(F32ToUe8m0(0x1p127f), 254);
  EXPECT_EQ(F32ToUe8m0(0x1.8p127f), 0xFF);  // rounds past the largest code: NaN
  EXPECT_EQ(F32ToUe8m0(0.0f), 0xFF);
  EXPECT_EQ(F32ToUe8m0(-0.0f), 0xFF);
  EXPECT_EQ(F32ToUe8m0(-1.0f), 0xFF);
  EXPECT_EQ(F32ToUe8m0(std::numeric_limits<float>::infinity()), 0xFF);
  // Bottom of the range: code 0 is 2^-127; anything at or below it encodes to code 0, but values
  // just above it go to code 1 (2^-126), the quirk documented in dtype.h.
  EXPECT_EQ(Bits(Ue8m0ToF32(0)), 0x00400000u);
  EXPECT_EQ(F32ToUe8m0(0x1p-127f), 0);
  EXPECT_EQ(F32ToUe8m0(0x1p-140f), 0);
  EXPECT_EQ(F32ToUe8m0(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(F32ToUe8m0(0x1.2p-127f), 1);
  EXPECT_EQ(F32ToUe8m0(0x1.8p-126f), 2);
  EXPECT_EQ(Ue8m0ToF32(200), 0x1p73f);
}

TEST(DTypeConvert, SubnormalTargets) {
  EXPECT_EQ(F32ToF8E4M3(0x1p-9f), 0x01);   // smallest e4m3 subnormal
  EXPECT_EQ(F32ToF8E4M3(0x1p-10f), 0x00);  // tie with 0 -> even (0)
  EXPECT_EQ(F32ToF8E4M3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(F32ToF8E4M3(-0x1p-11f), 0x80);  // underflow keeps the sign
  EXPECT_EQ(F32ToF8E5M2(0x1p-16f), 0x01);
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001);
  EXPECT_EQ(F32ToF16(0x1.8p-24f), 0x0002);  // tie between 1 and 2 (x 2^-24) -> even
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(F32ToBf16(0x1p-133f), 0x0001);
}

// ---- Bulk conversions ----

TEST(DTypeBulk, F4PackedLowNibbleIsEvenElement) {
  const float src[] = {1.0f, -2.0f, 0.5f, 6.0f, -0.0f, 3.0f};
  uint8_t packed[4] = {0xAA, 0xAA, 0xAA, 0xAA};
  ConvertFromF32(DType::kF4E2M1, src, packed, 6);
  EXPECT_EQ(packed[0], 0xC2);  // even element 1.0 (0x2) low, odd element -2.0 (0xC) high
  EXPECT_EQ(packed[1], 0x71);  // 0.5 (0x1), 6.0 (0x7)
  EXPECT_EQ(packed[2], 0x58);  // -0.0 (0x8), 3.0 (0x5)
  EXPECT_EQ(packed[3], 0xAA);  // untouched
  float back[6];
  ConvertToF32(DType::kF4E2M1, packed, back, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(Bits(back[i]), Bits(src[i])) << i;

  // Decoding reads nibbles in the same order.
  const uint8_t bytes[] = {0x1F, 0xE0};
  float d[4];
  ConvertToF32(DType::kF4E2M1, bytes, d, 4);
  EXPECT_EQ(d[0], -6.0f);
  EXPECT_EQ(d[1], 0.5f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[3], -4.0f);
}

TEST(DTypeBulk, F4OddCountUsesLowNibbleOfLastByte) {
  const float src[] = {4.0f, 1.5f, -3.0f};
  uint8_t packed[3] = {0xAA, 0xAA, 0xAA};
  ConvertFromF32(DType::kF4E2M1, src, packed, 3);
  EXPECT_EQ(packed[0], 0x36);
  EXPECT_EQ(packed[1], 0x0D);  // last element low, high nibble zeroed
  EXPECT_EQ(packed[2], 0xAA);
  float back[3];
  ConvertToF32(DType::kF4E2M1, packed, back, 3);
  EXPECT_EQ(back[0], 4.0f);
  EXPECT_EQ(back[1], 1.5f);
  EXPECT_EQ(back[2], -3.0f);
}

TEST(DTypeBulk, IntegersConvertByValue) {
  const int8_t i8[] = {-128, -1, 0, 127};
  const uint8_t u8[] = {0, 1, 200, 255};
  const int16_t i16[] = {-32768, 12345};
  const int32_t i32[] = {-7, 16777217};  // 2^24 + 1 rounds to 2^24 (RNE)
  const int64_t i64[] = {int64_t{1} << 40, -(int64_t{1} << 62)};
  float f[4];
  ConvertToF32(DType::kI8, i8, f, 4);
  EXPECT_EQ(f[0], -128.0f);
  EXPECT_EQ(f[1], -1.0f);
  EXPECT_EQ(f[3], 127.0f);
  ConvertToF32(DType::kU8, u8, f, 4);
  EXPECT_EQ(f[2], 200.0f);
  EXPECT_EQ(f[3], 255.0f);
  ConvertToF32(DType::kI16, i16, f, 2);
  EXPECT_EQ(f[0], -32768.0f);
  EXPECT_EQ(f[1], 12345.0f);
  ConvertToF32(DType::kI32, i32, f, 2);
  EXPECT_EQ(f[0], -7.0f);
  EXPECT_EQ(f[1], 16777216.0f);
  ConvertToF32(DType::kI64, i64, f, 2);
  EXPECT_EQ(f[0], 0x1p40f);
  EXPECT_EQ(f[1], -0x1p62f);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float src[] = {2.7f, -2.7f, 300.0f, -5.0f, nan, 1e20f, -1e20f};
  int8_t o8[7];
  ConvertFromF32(DType::kI8, src, o8, 7);
  EXPECT_EQ(o8[0], 2);  // truncation toward zero
  EXPECT_EQ(o8[1], -2);
  EXPECT_EQ(o8[2], 127);  // saturating
  EXPECT_EQ(o8[3], -5);
  EXPECT_EQ(o8[4], 0);  // NaN -> 0
  uint8_t ou8[7];
  ConvertFromF32(DType::kU8, src, ou8, 7);
  EXPECT_EQ(ou8[2], 255);
  EXPECT_EQ(ou8[3], 0);
  int16_t o16[7];
  ConvertFromF32(DType::kI16, src, o16, 7);
  EXPECT_EQ(o16[2], 300);
  EXPECT_EQ(o16[6], -32768);
  int32_t o32[7];
  ConvertFromF32(DType::kI32, src, o32, 7);
  EXPECT_EQ(o32[5], std::numeric_limits<int32_t>::max());
  int64_t o64[7];
  ConvertFromF32(DType::kI64, src, o64, 7);
  EXPECT_EQ(o64[1], -2);
  EXPECT_EQ(o64[5], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(o64[6], std::numeric_limits<int64_t>::min());
}

TEST(DTypeBulk, BoolIsZeroOrOne) {
  const uint8_t b[] = {0, 1, 2, 255};
  float f[4];
  ConvertToF32(DType::kBool, b, f, 4);
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[1], 1.0f);
  EXPECT_EQ(f[2], 1.0f);
  EXPECT_EQ(f[3], 1.0f);
  const float src[] = {0.0f, -0.0f, 0.5f, -3.0f, std::numeric_limits<float>::quiet_NaN()};
  uint8_t out[5];
  ConvertFromF32(DType::kBool, src, out, 5);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 0);
  EXPECT_EQ(out[2], 1);
  EXPECT_EQ(out[3], 1);
  EXPECT_EQ(out[4], 1);
}

TEST(DTypeBulk, F32AndF64) {
  const float src[] = {1.5f, -0.0f, std::numeric_limits<float>::infinity(), 0x1p-149f};
  float copy[4];
  ConvertToF32(DType::kF32, src, copy, 4);
  EXPECT_EQ(std::memcmp(copy, src, sizeof(src)), 0);
  ConvertFromF32(DType::kF32, src, copy, 4);
  EXPECT_EQ(std::memcmp(copy, src, sizeof(src)), 0);
  double wide[4];
  ConvertFromF32(DType::kF64, src, wide, 4);
  EXPECT_EQ(wide[0], 1.5);
  EXPECT_TRUE(std::signbit(wide[1]));
  EXPECT_EQ(wide[3], 0x1p-149);
  const double d[] = {0.1, 1e300};
  float f[2];
  ConvertToF32(DType::kF64, d, f, 2);
  EXPECT_EQ(f[0], 0.1f);
  EXPECT_TRUE(std::isinf(f[1]));
}

TEST(DTypeBulk, ZeroCountTouchesNothing) {
  for (DType t : {DType::kF32, DType::kF16, DType::kF4E2M1, DType::kI64, DType::kBool}) {
    ConvertToF32(t, nullptr, nullptr, 0);
    ConvertFromF32(t, nullptr, nullptr, 0);
  }
}

// ---- Metadata (dtype_names.cpp) ----

TEST(DTypeNames, BitsNamesAndSafetensorsRoundTrip) {
  EXPECT_EQ(DTypeBits(DType::kF4E2M1), 4);
  EXPECT_EQ(DTypeBits(DType::kF8E4M3), 8);
  EXPECT_EQ(DTypeBits(DType::kBF16), 16);
  EXPECT_EQ(DTypeBits(DType::kI64), 64);
  EXPECT_STREQ(DTypeName(DType::kUE8M0), "ue8m0");
  EXPECT_TRUE(IsFloatingPoint(DType::kF4E2M1));
  EXPECT_FALSE(IsFloatingPoint(DType::kBool));
  for (DType t : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                  DType::kF8E5M2, DType::kF4E2M1, DType::kUE8M0, DType::kI64, DType::kI32,
                  DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
    auto back = DTypeFromSafetensorsName(SafetensorsName(t));
    ASSERT_TRUE(back.ok()) << SafetensorsName(t);
    EXPECT_EQ(*back, t);
  }
  auto bad = DTypeFromSafetensorsName("F7");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("F7"), std::string::npos);
}

}  // namespace
}  // namespace lucid
