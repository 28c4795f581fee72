// The fast backend's activation packing and the matmul driver that walks register tiles over
// (k blocks, token blocks, weight rows).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_fast_kernels.h"
#include "core/dtype.h"

namespace lucid::fast {
namespace {

constexpr int64_t kMaxGroups = 1024 / 16;  // NVFP4 groups in one k block

// The tile for T tokens against rows of K columns of format f (kF32 for widened slivers): one to
// three tokens take the one-token tiles, more the token tiles. One token against bf16 rows of
// kRowsGemvMinK columns or more takes the row-after-row tile; two or three tokens, which run it
// once per token over rows then in L1 or L2, keep the 8-rows-side-by-side one (BM_LinearBig at 3
// tokens, ~80 GB/s state: 54-56 against 46-48 GB/s; 1g bf16 batch 8, fast: experts 9.63 against
// 10.29 ms).
const TileKernel& PickTile(const KernelTable& kt, WeightFormat f, int64_t T, int64_t K,
                           bool hi_only) {
  const bool gemv = T < 4;
  if (f == WeightFormat::kBF16 && hi_only && kt.bf16_split) {
    if (T == 1 && K >= kRowsGemvMinK && kt.hi_only.gemv_bf16_rows.fn)
      return kt.hi_only.gemv_bf16_rows;
    return gemv ? kt.hi_only.gemv_bf16 : kt.hi_only.gemm_bf16;
  }
  if (f == WeightFormat::kBF16) {
    if (T == 1 && K >= kRowsGemvMinK && kt.gemv_bf16_rows.fn) return kt.gemv_bf16_rows;
    return gemv ? kt.gemv_bf16 : kt.gemm_bf16;
  }
  return gemv ? kt.gemv_f32 : kt.gemm_f32;
}

// Weight element (n, k) of the view, for tails.
inline float At(const Weight& w, int64_t n, int64_t k) {
  const int64_t i = (w.row_begin + n) * w.cols + k;
  if (w.format == WeightFormat::kF32) return w.data.data<const float>()[i];
  if (w.format == WeightFormat::kBF16) return Bf16ToF32(w.data.data<const uint16_t>()[i]);
  float v;
  DequantizeRowSpan(w, n, k, 1, &v);
  return v;
}

// Formats MatmulRows decodes into the f32 sliver (GGUF blocks too: their decoders are exact).
bool Packed(WeightFormat f) {
  return f == WeightFormat::kFp8Block || f == WeightFormat::kNvfp4 || f == WeightFormat::kGgml;
}

// Columns [k0, k1) of stored row `row` of a GGUF block weight through kt.dequant_ggml, where both
// ends lie on block boundaries; false (nothing written) otherwise.
bool GgmlSpan(const KernelTable& kt, const Weight& w, int64_t row, int64_t k0, int64_t k1,
              float* out) {
  const auto info = GgmlTypeInfo(static_cast<uint32_t>(w.ggml_type));
  if (!kt.dequant_ggml || !info || !info->supported) return false;
  const int64_t be = info->block_elems;
  if (k0 % be != 0 || (k1 - k0) % be != 0) return false;
  const uint8_t* p =
      w.data.data<const uint8_t>() + row * w.data.size(1) + k0 / be * info->block_bytes;
  return kt.dequant_ggml(w.ggml_type, p, (k1 - k0) / be, out);
}

// One to three tokens against GGUF rows of a type with a fused gemv (KernelTable::gemv_ggml): 4
// rows at a time over whole rows, per token. False (nothing written) where it has none.
bool GgmlGemvRows(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
                  int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const auto info = GgmlTypeInfo(static_cast<uint32_t>(w.ggml_type));
  if (!kt.gemv_ggml || !info || info->block_elems != 32 || w.cols % 32 != 0 || x.f32.empty())
    return false;
  const int64_t nb = w.cols / 32, rb = w.data.size(1);
  const uint8_t* base = w.data.data<const uint8_t>() + w.row_begin * rb;
  const uint8_t* wp[4];
  float out[4];
  for (int64_t n = n0; n < n1; n += 4) {
    const int64_t nn = std::min<int64_t>(4, n1 - n);
    for (int j = 0; j < 4; ++j) wp[j] = base + (n + std::min<int64_t>(j, nn - 1)) * rb;
    for (int64_t t = t0; t < t1; ++t) {
      if (!kt.gemv_ggml(w.ggml_type, x.f32.data() + t * x.Kpad, wp, nb, out)) return false;
      for (int64_t j = 0; j < nn; ++j) y[t * ldy + n + j] = out[j];
    }
  }
  return true;
}

}  // namespace

int64_t DequantAlign(const Weight& w) {
  if (w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kNvfp4)
    return std::max<int64_t>(1, w.block_cols);
  if (w.format == WeightFormat::kGgml) {
    const auto info = GgmlTypeInfo(static_cast<uint32_t>(w.ggml_type));
    return info ? info->block_elems : 1;
  }
  return 1;
}

void DequantSpan(const KernelTable& kt, const Weight& w, int64_t r, int64_t k0, int64_t k1,
                 float* out) {
  const int64_t row = w.row_begin + r;
  if (w.format == WeightFormat::kBF16) {
    kt.widen_bf16(w.data.data<const uint16_t>() + row * w.cols + k0, out, k1 - k0);
  } else if (w.format == WeightFormat::kFp8Block && kt.dequant_fp8) {
    const uint8_t* q = w.data.data<const uint8_t>() + row * w.cols;
    // Two divisions per row, none per block (this runs per row of every decoded span).
    int64_t si = (row / w.block_rows) * w.scale.size(1) + k0 / w.block_cols;
    const bool ue8m0 = w.scale.dtype() == DType::kUE8M0;
    for (int64_t c = k0; c < k1; c += w.block_cols, ++si)
      kt.dequant_fp8(
          q + c,
          ue8m0 ? Ue8m0ToF32(w.scale.data<const uint8_t>()[si]) : w.scale.data<const float>()[si],
          out + (c - k0), std::min(w.block_cols, k1 - c));
  } else if (w.format == WeightFormat::kNvfp4 && kt.dequant_nvfp4 && w.block_cols == 16) {
    const uint8_t* s = w.scale.data<const uint8_t>() + row * w.scale.size(1);
    const uint8_t* q = w.data.data<const uint8_t>() + row * w.data.size(1);
    const float s2 = *w.scale2.data<const float>();
    float gs[kMaxGroups];
    for (int64_t c = k0; c < k1; c += kMaxGroups * 16) {
      const int64_t groups = (std::min(k1, c + kMaxGroups * 16) - c + 15) / 16;
      kt.widen_e4m3(s + c / 16, gs, groups);
      kt.dequant_nvfp4(q + c / 2, gs, s2, out + (c - k0), groups);
    }
  } else if (w.format == WeightFormat::kGgml && GgmlSpan(kt, w, row, k0, k1, out)) {
  } else {
    DequantizeRowSpan(w, r, k0, k1 - k0, out);
  }
}

namespace {

void FallbackRows(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
                  int64_t n0, int64_t n1, float* y, int64_t ldy) {
  std::vector<float> row(w.cols);
  for (int64_t n = n0; n < n1; ++n) {
    DequantizeRow(w, n, row.data());
    for (int64_t t = t0; t < t1; ++t)
      y[t * ldy + n] = kt.dot(x.f32.data() + t * x.Kpad, row.data(), w.cols);
  }
}

}  // namespace

namespace {

// x (n values) rounded to bf16 in place, its bf16 bits in hi.
void RoundToBf16(const KernelTable& kt, float* x, uint16_t* hi, int64_t n) {
  thread_local std::vector<uint16_t> lo;
  lo.resize(n);
  kt.split_bf16(x, hi, lo.data(), n);
  kt.widen_bf16(hi, x, n);
}

}  // namespace

void PackX(const KernelTable& kt, const float* x, int64_t ldx, int64_t T, int64_t K,
           WeightFormat format, FastActivations act, PackedX* p) {
  p->T = T;
  p->K = K;
  const bool fused = kt.Fused(format);
  const bool bf16 = act == FastActivations::kBf16;
  const int64_t pad = fused ? kFusedPadK : kPadK;
  p->Kpad = (K + pad - 1) / pad * pad;
  p->hi_only = bf16;
  // A reused PackedX keeps none of its previous x's forms.
  p->gemm_panels.reset();
  p->gemm_mr = 0;
  p->gemm_pairs = p->gemm_q16 = false;
  p->f32.clear();
  p->hi.clear();
  p->lo.clear();
  // Many tokens go to GemmRows (callers pass all T rows, or at least kGemmMinTokens of them, to
  // each MatmulRows call): it wants only its panels.
  if (const int64_t g = GemmMinTokens(kt, format, act); g > 0 && T >= g) {
    if (!bf16) {
      GemmPackX(kt, x, ldx, GemmX::kF32, p);
      return;
    }
    // bf16 pairs round as they pack (the same vcvtne2ps2bf16 as the split), and so do the f32
    // panels of a level with a rounding pack_x; elsewhere f32 panels are packed from a rounded
    // copy.
    if (GemmPairs(kt, format, act)) {
      GemmPackX(kt, x, ldx, GemmX::kBf16Pairs, p);
      return;
    }
    // int16 x for NVFP4, unless a value is non-finite (or beyond the int16 scales): then the f32
    // panels, which carry it.
    if (GemmQ16(kt, format, act) && GemmPackX(kt, x, ldx, GemmX::kQ16, p)) return;
    if (GemmRoundsX(kt)) {
      GemmPackX(kt, x, ldx, GemmX::kRoundedToBf16, p);
      return;
    }
    thread_local std::vector<float> rounded;
    thread_local std::vector<uint16_t> bits;
    rounded.resize(T * K);
    bits.resize(T * K);
    for (int64_t t = 0; t < T; ++t) std::memcpy(&rounded[t * K], x + t * ldx, K * sizeof(float));
    RoundToBf16(kt, rounded.data(), bits.data(), T * K);
    GemmPackX(kt, rounded.data(), K, GemmX::kF32, p);
    return;
  }
  p->f32.assign(T * p->Kpad, 0.0f);
  for (int64_t t = 0; t < T; ++t) std::memcpy(&p->f32[t * p->Kpad], x + t * ldx, K * sizeof(float));
  const bool split = (kt.bf16_split && format == WeightFormat::kBF16) || fused;
  if (bf16) {
    // Rounded once for every path (hi for the dp-bf16 tiles, f32 for the others).
    thread_local std::vector<uint16_t> bits;
    std::vector<uint16_t>& hi = split ? p->hi : bits;
    hi.resize(T * p->Kpad);
    RoundToBf16(kt, p->f32.data(), hi.data(), T * p->Kpad);
  } else if (split) {
    p->hi.resize(T * p->Kpad);
    p->lo.resize(T * p->Kpad);
    kt.split_bf16(p->f32.data(), p->hi.data(), p->lo.data(), T * p->Kpad);
  }
  if (fused) {  // the fused tiles' column order
    const KernelTable::XOrder& o =
        format == WeightFormat::kFp8Block ? kt.fp8_x_order : kt.nvfp4_x_order;
    o.permute(p->hi.data(), T * p->Kpad);
    if (!bf16) o.permute(p->lo.data(), T * p->Kpad);
  }
}

namespace {

// Adds (first k block: stores) a tile's out[i * nr + j] into y rows t.., columns n...
inline void StoreTile(const float* out, int64_t mm, int nr, int64_t nn, bool first, float* y,
                      int64_t ldy) {
  for (int64_t i = 0; i < mm; ++i) {
    float* yr = y + i * ldy;
    if (first)
      for (int64_t j = 0; j < nn; ++j) yr[j] = out[i * nr + j];
    else
      for (int64_t j = 0; j < nn; ++j) yr[j] += out[i * nr + j];
  }
}

// The weight and block-scale row pointers of FP8-block row groups, from column k0 (a multiple of
// 128). f32 scale rows are used in place; UE8M0 ones are widened into slot j, once per scale row
// (the rows of a group, and the next groups, mostly share one: 128-row blocks), where gathering NR
// rows of scales per group cost 14% of a one-token FP8 matmul.
class Fp8GroupRows {
 public:
  explicit Fp8GroupRows(const Weight& w)
      : w_(w),
        base_(w.data.data<const uint8_t>() + w.row_begin * w.cols),
        ue8m0_(w.scale.dtype() == DType::kUE8M0),
        ld_scale_(w.scale.size(1)),
        widened_(Widened()) {
    if (ue8m0_) widened_.resize(16 * ld_scale_);
    std::fill(slot_row_, slot_row_ + 16, int64_t{-1});
  }
  // Rows n.. rows past n + nn repeat the last) into wp[0..nr), their scales into sc[0..nr).
  void Group(int64_t n, int64_t nn, int nr, int64_t k0, const void** wp, const float** sc) {
    int64_t srow = (w_.row_begin + n) / w_.block_rows, prev = -1;
    int64_t next = (srow + 1) * w_.block_rows - w_.row_begin;  // first r of the next scale row
    for (int j = 0; j < nr; ++j) {
      const int64_t r = n + std::min<int64_t>(j, nn - 1);
      wp[j] = base_ + r * w_.cols + k0;
      for (; r >= next; next += w_.block_rows) ++srow;
      if (srow == prev) {
        sc[j] = sc[j - 1];
      } else if (!ue8m0_) {
        sc[j] = w_.scale.data<const float>() + srow * ld_scale_ + k0 / 128;
      } else {
        float* slot = &widened_[j * ld_scale_];
        if (slot_row_[j] != srow) {
          const uint8_t* e = w_.scale.data<const uint8_t>() + srow * ld_scale_;
          for (int64_t b = 0; b < ld_scale_; ++b) slot[b] = Ue8m0ToF32(e[b]);
          slot_row_[j] = srow;
        }
        sc[j] = slot + k0 / 128;
      }
      prev = srow;
    }
  }

 private:
  const Weight& w_;
  const uint8_t* base_;
  bool ue8m0_;
  int64_t ld_scale_;
  // Per thread, reused across calls (one Fp8GroupRows lives at a time on a thread).
  static std::vector<float>& Widened() {
    thread_local std::vector<float> v;
    return v;
  }
  std::vector<float>& widened_;
  int64_t slot_row_[16];
};

// Packed weights through the fused tiles (x must carry the hi/lo split): row groups of the tile's
// nr rows, the tokens in tiles of up to 4 against each group (its codes are decoded once per
// token tile, from L1 after the first). One token uses the widest row group.
void MatmulFp8Fused(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1,
                    const Weight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t K = w.cols, Kc = 128 * kFp8TileBlocks;
  const bool one = t1 - t0 == 1;
  const KernelTable::Fp8Tile* tiles = x.hi_only ? kt.hi_only.fp8 : kt.fp8_tiles;
  const int tokens = x.hi_only ? kt.hi_only.fp8_tokens : kt.fp8_tile_tokens;
  const int NR = one ? tiles[0].nr : tiles[tokens].nr;
  float out[64];
  const void *wp[16], *xh[4], *xl[4];
  const float* sc[16];
  Fp8GroupRows rows(w);
  for (int64_t k0 = 0; k0 < K; k0 += Kc) {
    const int64_t k1 = std::min(K, k0 + Kc);
    for (int64_t n = n0; n < n1; n += NR) {
      const int64_t nn = std::min<int64_t>(NR, n1 - n);
      rows.Group(n, nn, NR, k0, wp, sc);
      for (int64_t t = t0; t < t1; t += tokens) {
        const int64_t mm = std::min<int64_t>(tokens, t1 - t);
        for (int64_t i = 0; i < mm; ++i) {
          xh[i] = &x.hi[(t + i) * x.Kpad + k0];
          xl[i] = x.hi_only ? nullptr : &x.lo[(t + i) * x.Kpad + k0];
        }
        tiles[one ? 0 : mm].fn(xh, xl, wp, sc, 0, k1 - k0, out);
        StoreTile(out, mm, NR, nn, k0 == 0, y + t * ldy + n, ldy);
      }
    }
  }
}

// Tokens t0 .. t0 + mm of x, columns [k0, k1), as 128-column blocks with the tokens one after
// another in each (block b of token i at (b * mm + i) * 128; zero past k1 to the last block's
// end), the multi-token f32 tiles' x (KernelTable::Fp8F32Tile, Nvfp4F32Tile): every load is one
// base plus a constant. At a 64-byte boundary (a panel 16 bytes off one ran the 8-token FP8 tile
// ~25% slower). Per thread; valid until the next call on this thread.
const float* TokenBlockPanel(const PackedX& x, int64_t t0, int64_t mm, int64_t k0, int64_t k1) {
  thread_local std::vector<float> panel;
  const int64_t blocks = (k1 - k0 + 127) / 128;
  if (panel.size() < static_cast<size_t>(blocks * mm * 128 + 16))
    panel.resize(blocks * mm * 128 + 16);
  float* p = panel.data();
  p += (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64 / sizeof(float);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n = std::min<int64_t>(128, k1 - k0 - b * 128);
    for (int64_t i = 0; i < mm; ++i) {
      float* dst = p + (b * mm + i) * 128;
      std::memcpy(dst, &x.f32[(t0 + i) * x.Kpad + k0 + b * 128], n * sizeof(float));
      std::fill(dst + n, dst + 128, 0.0f);  // only the last block's
    }
  }
  return p;
}

// Up to fp8_f32_tokens tokens against FP8-block rows through the f32-activation tiles: one tile
// call per row group over all the tokens, whole rows (up to 128 * kFp8TileBlocks columns) a call.
void MatmulFp8F32(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
                  int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t K = w.cols, Kc = 128 * kFp8TileBlocks, mm = t1 - t0;
  const KernelTable::Fp8F32Tile& tile = kt.fp8_f32_tiles[mm - 1];
  const int NR = tile.nr;
  float out[64];
  const void* wp[16];
  const float* sc[16];
  const float* xp[8];
  Fp8GroupRows rows(w);
  for (int64_t k0 = 0; k0 < K; k0 += Kc) {
    const int64_t k1 = std::min(K, k0 + Kc);
    if (mm == 1) {
      xp[0] = &x.f32[t0 * x.Kpad + k0];
    } else {
      xp[0] = TokenBlockPanel(x, t0, mm, k0, k1);
    }
    for (int64_t n = n0; n < n1; n += NR) {
      const int64_t nn = std::min<int64_t>(NR, n1 - n);
      rows.Group(n, nn, NR, k0, wp, sc);
      tile.fn(xp, reinterpret_cast<const uint8_t* const*>(wp), sc, k1 - k0, out);
      StoreTile(out, mm, NR, nn, k0 == 0, y + t0 * ldy + n, ldy);
    }
  }
}

// The row and group-scale pointers of NVFP4 row groups: each group's e4m3 scales widened to f32
// into a per-thread buffer (gpad slots a row, zero past the row's groups), the next group's
// scales asked for from memory while this group's codes stream.
class Nvfp4GroupRows {
 public:
  Nvfp4GroupRows(const KernelTable& kt, const Weight& w, int nr)
      : kt_(kt),
        w_(w),
        groups_((w.cols + 15) / 16),
        gpad_((groups_ + 7) / 8 * 8),
        scales_(w.scale.data<const uint8_t>()),
        ld_scale_(w.scale.size(1)),
        nr_(nr),
        gsb_(Buffer()) {
    gsb_.assign(nr * gpad_, 0.0f);
  }
  int64_t groups() const { return groups_; }
  // Rows n.. of a group (nn <= nr of them; rows past n + nn repeat the last) into wp[0..nr),
  // their scales into gp[0..nr); n1 bounds the prefetch of the next group's scales.
  void Group(int64_t n, int64_t nn, int64_t n1, const void** wp, const float** gp) {
    // A whole group of rows whose scale rows hold exactly gpad groups (no padding groups, whose
    // stored bytes need not be zero) widens in one call.
    const bool one_call = nn == nr_ && ld_scale_ == groups_ && groups_ == gpad_;
    if (one_call)
      kt_.widen_e4m3(scales_ + (w_.row_begin + n) * ld_scale_, gsb_.data(), nr_ * gpad_);
    for (int j = 0; j < nr_; ++j) {
      const int64_t row = w_.row_begin + n + std::min<int64_t>(j, nn - 1);
      wp[j] = w_.data.data<const uint8_t>() + row * w_.data.size(1);
      if (!one_call) kt_.widen_e4m3(scales_ + row * ld_scale_, &gsb_[j * gpad_], groups_);
      gp[j] = &gsb_[j * gpad_];
    }
    if (n + nr_ < n1)
      for (int64_t a = (w_.row_begin + n + nr_) * ld_scale_,
                   e = (w_.row_begin + std::min<int64_t>(n1, n + 2 * nr_)) * ld_scale_;
           a < e; a += 64)
        __builtin_prefetch(scales_ + a);
  }

 private:
  static std::vector<float>& Buffer() {
    thread_local std::vector<float> v;  // one Nvfp4GroupRows lives at a time on a thread
    return v;
  }
  const KernelTable& kt_;
  const Weight& w_;
  int64_t groups_, gpad_;
  const uint8_t* scales_;
  int64_t ld_scale_;
  int nr_;
  std::vector<float>& gsb_;
};

void MatmulNvfp4Fused(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1,
                      const Weight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t K = w.cols;
  const bool one = t1 - t0 == 1;
  const KernelTable::Nvfp4Tile* tiles = x.hi_only ? kt.hi_only.nvfp4 : kt.nvfp4_tiles;
  const int tokens = x.hi_only ? kt.hi_only.nvfp4_tokens : kt.nvfp4_tile_tokens;
  const int NR = one ? tiles[0].nr : tiles[tokens].nr;
  const float s2 = *w.scale2.data<const float>();
  const void *wp[16], *xh[4], *xl[4];
  const float* gp[16];
  float out[64];
  Nvfp4GroupRows rows(kt, w, NR);
  for (int64_t n = n0; n < n1; n += NR) {
    const int64_t nn = std::min<int64_t>(NR, n1 - n);
    rows.Group(n, nn, n1, wp, gp);
    for (int64_t t = t0; t < t1; t += tokens) {
      const int64_t mm = std::min<int64_t>(tokens, t1 - t);
      for (int64_t i = 0; i < mm; ++i) {
        xh[i] = &x.hi[(t + i) * x.Kpad];
        xl[i] = x.hi_only ? nullptr : &x.lo[(t + i) * x.Kpad];
      }
      tiles[one ? 0 : mm].fn(xh, xl, wp, gp, s2, 0, K, rows.groups(), out);
      StoreTile(out, mm, NR, nn, true, y + t * ldy + n, ldy);
    }
  }
}

// Up to nvfp4_f32_tokens tokens against NVFP4 rows through the f32-activation tiles: one tile
// call per row group over all the tokens and whole rows, the tensor scale applied to its sums.
void MatmulNvfp4F32(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1,
                    const Weight& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t mm = t1 - t0;
  const KernelTable::Nvfp4F32Tile& tile = kt.nvfp4_f32_tiles[mm - 1];
  const int NR = tile.nr;
  const float s2 = *w.scale2.data<const float>();
  const void* wp[16];
  const float* gp[16];
  const float* xp[8];
  float out[64];
  Nvfp4GroupRows rows(kt, w, NR);
  if (tile.order_x) {  // the tile's column order, once per call and token
    thread_local std::vector<float> ordered;
    const int64_t n = rows.groups() * 16;
    ordered.resize(mm * n);
    for (int64_t i = 0; i < mm; ++i) {
      tile.order_x(&x.f32[(t0 + i) * x.Kpad], rows.groups(), &ordered[i * n]);
      xp[i] = &ordered[i * n];
    }
  } else if (mm > 1) {
    xp[0] = TokenBlockPanel(x, t0, mm, 0, w.cols);
  } else {
    xp[0] = &x.f32[t0 * x.Kpad];
  }
  for (int64_t n = n0; n < n1; n += NR) {
    const int64_t nn = std::min<int64_t>(NR, n1 - n);
    rows.Group(n, nn, n1, wp, gp);
    tile.fn(xp, reinterpret_cast<const uint8_t* const*>(wp), gp, rows.groups(), out);
    for (int64_t i = 0; i < mm * NR; ++i) out[i] *= s2;
    StoreTile(out, mm, NR, nn, true, y + t0 * ldy + n, ldy);
  }
}

// One token of activations rounded to bf16 against NVFP4 rows through the integer tile
// (KernelTable::nvfp4_q16_tile), x quantized once per call; false (nothing written) where that
// tile does not take this call: no such tile, f32 activations, K not a multiple of 64, or x
// with a non-finite value or out of its scales' range.
bool MatmulNvfp4Q16(const KernelTable& kt, const PackedX& x, int64_t t, const Weight& w, int64_t n0,
                    int64_t n1, float* y, int64_t ldy) {
  const KernelTable::Nvfp4Q16Tile& tile = kt.nvfp4_q16_tile;
  if (!tile.fn || !x.hi_only || w.cols % 64 != 0) return false;
  const int64_t groups = w.cols / 16;
  thread_local std::vector<int16_t> q;
  thread_local std::vector<float> s;
  q.resize(w.cols);
  s.resize(groups);
  if (!tile.quantize_x(&x.f32[t * x.Kpad], groups, q.data(), s.data())) return false;
  const int NR = tile.nr;
  const float s2 = *w.scale2.data<const float>();
  const void* wp[16];
  const float* gp[16];
  float out[16];
  Nvfp4GroupRows rows(kt, w, NR);
  for (int64_t n = n0; n < n1; n += NR) {
    const int64_t nn = std::min<int64_t>(NR, n1 - n);
    rows.Group(n, nn, n1, wp, gp);
    tile.fn(q.data(), s.data(), reinterpret_cast<const uint8_t* const*>(wp), gp, groups, out);
    for (int j = 0; j < NR; ++j) out[j] *= s2;
    StoreTile(out, 1, NR, nn, true, y + t * ldy + n, ldy);
  }
  return true;
}

}  // namespace

void MatmulRows(const KernelTable& kt, const PackedX& x, int64_t t0, int64_t t1, const Weight& w,
                int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if (n1 <= n0 || t1 <= t0) return;
  // x as GEMM panels (PackX made them: T >= GemmMinTokens for this format) goes to GemmRows at
  // any count; f32 rows from kGemmMinTokens (GemmRows packs them itself).
  if ((x.gemm_panels || t1 - t0 >= kGemmMinTokens) && GemmRows(kt, x, t0, t1, w, n0, n1, y, ldy))
    return;
  LUCID_CHECK(!x.gemm_panels, "MatmulRows: x packed as GEMM panels that GemmRows refused");
  if (w.format == WeightFormat::kGgml && t1 - t0 < 4 &&
      GgmlGemvRows(kt, x, t0, t1, w, n0, n1, y, ldy))
    return;
  if (w.format == WeightFormat::kFp8Block && w.block_cols == 128 && kt.fp8_f32_tiles[0].fn &&
      t1 - t0 <= kt.fp8_f32_tokens && !x.f32.empty())
    return MatmulFp8F32(kt, x, t0, t1, w, n0, n1, y, ldy);
  if (w.format == WeightFormat::kNvfp4 && w.block_cols == 16 && kt.nvfp4_f32_tiles[0].fn &&
      t1 - t0 <= kt.nvfp4_f32_tokens && !x.f32.empty()) {
    if (t1 - t0 == 1 && MatmulNvfp4Q16(kt, x, t0, w, n0, n1, y, ldy)) return;
    return MatmulNvfp4F32(kt, x, t0, t1, w, n0, n1, y, ldy);
  }
  if (kt.Fused(w.format) && !x.hi.empty()) {
    if (w.format == WeightFormat::kFp8Block && w.block_cols == 128)
      return MatmulFp8Fused(kt, x, t0, t1, w, n0, n1, y, ldy);
    if (w.format == WeightFormat::kNvfp4 && w.block_cols == 16)
      return MatmulNvfp4Fused(kt, x, t0, t1, w, n0, n1, y, ldy);
  }
  // Many rows of bf16 weights: widen each weight sliver to f32 once per activation block and run
  // the f32 tile over it (cheaper per FMA than converting in the tile or the dp-bf16 hi/lo pair).
  // Packed formats (FP8 block, NVFP4) go this way where no fused tile took them above: each k
  // block of NR rows is decoded into the L1 sliver, block by block, and never more of the matrix
  // than that.
  const bool packed = Packed(w.format);
  const bool widen = packed || (w.format == WeightFormat::kBF16 && t1 - t0 >= 128);
  const TileKernel& tk =
      PickTile(kt, widen ? WeightFormat::kF32 : w.format, t1 - t0, w.cols, x.hi_only);
  const bool ggml = w.format == WeightFormat::kGgml;
  const bool tiled =
      (packed || w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16) && tk.fn &&
      (!packed || ggml || w.block_cols > 0);
  if (!tiled) return FallbackRows(kt, x, t0, t1, w, n0, n1, y, ldy);
  const int64_t K = w.cols, T = t1, Kv = kt.vector_k(K);
  const bool split = !widen && kt.bf16_split && w.format == WeightFormat::kBF16;
  const size_t esz = w.format == WeightFormat::kF32 ? 4 : 2;
  const char* wbase =
      packed ? nullptr : static_cast<const char*>(w.data.raw()) + w.row_begin * K * esz;
  // The weight sliver (NR rows x Kc) stays in L1, the activation block (Mc rows x Kc) in L2.
  // Packed k blocks are whole scale blocks (1024 columns for 128- and 16-column blocks; GGUF
  // blocks of 32 and 256 columns: 1024 too, so every span but a row's last is whole blocks). Up to
  // 8 tokens take whole bf16 rows: a row group is then one contiguous span, read and prefetched as
  // one stream (PrefetchSpan), where k blocks jump back NR rows every block (4g bf16 batch-1 steps
  // 9-13% and batch-8 matmuls ~6% faster); the rows' reuse by a second token tile comes from L2.
  const int64_t Kc = ggml                ? 1024
                     : packed            ? std::max<int64_t>(1, 1024 / w.block_cols) * w.block_cols
                     : esz == 4 || widen ? 1024
                     : t1 - t0 <= 8      ? Kv
                                         : 2048;
  const int64_t Mc = widen ? 128 : 64;
  const int MR = tk.mr, NR = tk.nr;
  // Per-thread sliver buffer, reused across calls (no zero fill per call).
  thread_local std::vector<float> wide;
  if (widen && wide.size() < static_cast<size_t>(NR * Kc + 16)) wide.resize(NR * Kc + 16);
  float out[64];
  const void* wp[16];
  const void* xp[16];
  const void* xp2[16];
  if (Kv == 0)
    for (int64_t t = t0; t < T; ++t) std::fill(y + t * ldy + n0, y + t * ldy + n1, 0.0f);
  for (int64_t k0 = 0; k0 < Kv; k0 += Kc) {
    const int64_t k1 = std::min(k0 + Kc, Kv);
    const bool first = k0 == 0;
    for (int64_t m0 = t0; m0 < T; m0 += Mc) {
      const int64_t m1 = std::min(m0 + Mc, T);
      for (int64_t n = n0; n < n1; n += NR) {
        const int64_t nn = std::min<int64_t>(NR, n1 - n);
        // Tiles see k relative to k0: pointers are offset by k0, the row length is K - k0.
        for (int j = 0; j < NR; ++j) {
          const char* row = wbase + (n + std::min<int64_t>(j, nn - 1)) * K * esz;
          if (packed) {
            DequantSpan(kt, w, n + std::min<int64_t>(j, nn - 1), k0, k1, &wide[j * Kc]);
            wp[j] = &wide[j * Kc];
          } else if (widen) {
            kt.widen_bf16(reinterpret_cast<const uint16_t*>(row) + k0, &wide[j * Kc], k1 - k0);
            wp[j] = &wide[j * Kc];
          } else {
            wp[j] = row + k0 * esz;
          }
        }
        for (int64_t t = m0; t < m1; t += MR) {
          const int64_t mm = std::min<int64_t>(MR, m1 - t);
          for (int i = 0; i < MR; ++i) {
            const int64_t r = (t + std::min<int64_t>(i, mm - 1)) * x.Kpad + k0;
            xp[i] = split ? static_cast<const void*>(&x.hi[r]) : &x.f32[r];
            xp2[i] = split && !x.hi_only ? &x.lo[r] : nullptr;
          }
          tk.fn(xp, xp2, wp, 0, k1 - k0, K - k0, out);
          for (int64_t i = 0; i < mm; ++i) {
            float* yr = y + (t + i) * ldy + n;
            if (first)
              for (int64_t j = 0; j < nn; ++j) yr[j] = out[i * NR + j];
            else
              for (int64_t j = 0; j < nn; ++j) yr[j] += out[i * NR + j];
          }
        }
      }
    }
  }
  if (Kv < K) {  // scalar tail for instruction sets without masked loads
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t t = t0; t < T; ++t) {
        float s = 0.0f;
        for (int64_t k = Kv; k < K; ++k) s += x.f32[t * x.Kpad + k] * At(w, n, k);
        y[t * ldy + n] += s;
      }
  }
}

}  // namespace lucid::fast
