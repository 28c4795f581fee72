// CpuFastOps::MlaAbsorbQuery / MlaProjectOutput: every head in one parallel region (the reference
// runs one LinearTransposed / Linear per head, 2 x heads parallel regions per layer and step).
//
// Absorb: work items are (head, 128-column chunk of the latent). bf16 W_uk: the rows_axpy_bf16
// kernel keeps the chunk's sums in registers for two tokens at a time and widens the weights in
// registers. Other formats: an item decodes its W_uk rows' chunk (DequantSpan: the item's span,
// never a whole matrix) once, then rows_axpy_f32 sums it for two tokens at a time in registers
// (one token: each decoded row is added into the output chunk as it comes). FP8-block and NVFP4
// W_uk skip the f32 rows where rows_axpy_fp8 / rows_axpy_nvfp4 exist: they decode each row's
// codes in registers straight into the sums, once per pair of tokens (BM_MlaHeadOps, FP8 / NVFP4:
// 1 token 205 / 150 -> 125 / 93 us, 8 tokens 390 / 370 -> 293 / 300, 32 tokens 1173 / 1053 ->
// 883 / 901, 512 tokens 16.1 / 14.4 -> 13.2 / 14.4-14.9 ms). One token against bf16 W_uk: items
// are whole heads (the kernel reads whole rows in address order). From the GEMM's threshold
// (AbsorbByGemm) every format goes through the outer-product GEMM against W_uk^T chunks
// (BM_MlaHeadOps bf16 512 tokens: avx2 43.5 -> 14.1 ms, avx512bf16 15.1 -> 10.0 ms).
// Project: items are (head, chunk of W_uv rows), in one parallel region; a thread packs each
// head's latent rows it needs (PackX with the [T, heads * latent] stride) and gives the head's
// run of its items to the matmul driver in one call, which reads each weight element once for
// all T tokens and writes straight into out[:, h * v_dim + j].
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_fast_kernels.h"
#include "core/dtype.h"
#include "core/parallel.h"

namespace lucid {
namespace {

// q_latent rows of one head through the fused packed kernels: y_t = x_t W for the `rows` rows of
// the view uk (all its columns). Returns false, writing nothing, where there is no such kernel.
// `next` (may be null): the W_uk view of the item this thread runs next, read into L2 meanwhile.
bool FusedAbsorb(const fast::KernelTable& kt, const Weight& uk, int64_t rows, const float* x,
                 int64_t ldx, int64_t T, float* y, int64_t ldy, const Weight* next) {
  const int64_t C = uk.cols;
  if (kt.rows_axpy_packed_tokens > 0 && T > kt.rows_axpy_packed_tokens) return false;
  thread_local std::vector<float> sc;
  if (uk.format == WeightFormat::kFp8Block && kt.rows_axpy_fp8 && uk.block_cols == 128) {
    const int64_t blocks = (C + 127) / 128, ld_scale = uk.scale.size(1);
    const bool ue8m0 = uk.scale.dtype() == DType::kUE8M0;
    sc.resize(rows * blocks);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t s0 = (uk.row_begin + r) / uk.block_rows * ld_scale;
      for (int64_t b = 0; b < blocks; ++b)
        sc[r * blocks + b] = ue8m0 ? Ue8m0ToF32(uk.scale.data<const uint8_t>()[s0 + b])
                                   : uk.scale.data<const float>()[s0 + b];
    }
    fast::WarmSpans warm;  // the next item's codes (its scales are a few floats)
    if (next) {
      warm.p[0] = next->data.data<const uint8_t>() + next->row_begin * C;
      warm.bytes[0] = rows * C;
    }
    kt.rows_axpy_fp8(uk.data.data<const uint8_t>() + uk.row_begin * C, C, rows, sc.data(), blocks,
                     1.0f, x, ldx, T, C, y, ldy, warm);
    return true;
  }
  if (uk.format == WeightFormat::kNvfp4 && kt.rows_axpy_nvfp4 && uk.block_cols == 16) {
    const int64_t groups = (C + 15) / 16, gpad = (groups + 7) / 8 * 8;
    const int64_t ld_scale = uk.scale.size(1), ldw = uk.data.size(1);
    const uint8_t* s0 = uk.scale.data<const uint8_t>() + uk.row_begin * ld_scale;
    if (ld_scale == groups && groups == gpad) {  // no padding groups: the scales in one call
      sc.resize(rows * gpad);
      kt.widen_e4m3(s0, sc.data(), rows * gpad);
    } else {
      sc.assign(rows * gpad, 0.0f);
      for (int64_t r = 0; r < rows; ++r) kt.widen_e4m3(s0 + r * ld_scale, &sc[r * gpad], groups);
    }
    fast::WarmSpans warm;  // the next item's codes, then its scale rows
    if (next) {
      warm.p[0] = next->data.data<const uint8_t>() + next->row_begin * ldw;
      warm.bytes[0] = rows * ldw;
      warm.p[1] = next->scale.data<const uint8_t>() + next->row_begin * ld_scale;
      warm.bytes[1] = rows * ld_scale;
    }
    kt.rows_axpy_nvfp4(uk.data.data<const uint8_t>() + uk.row_begin * ldw, ldw, rows, sc.data(),
                       gpad, *uk.scale2.data<const float>(), x, ldx, T, C, y, ldy, warm);
    return true;
  }
  return false;
}

// Row r of the W_uk view uk, columns [c0, c1), as f32: in place for f32 weights, else decoded by
// DequantSpan into buf (room for whole NVFP4 groups).
const float* UkRowSpan(const fast::KernelTable& kt, const Weight& uk, int64_t r, int64_t c0,
                       int64_t c1, float* buf) {
  if (uk.format == WeightFormat::kF32)
    return uk.data.data<const float>() + (uk.row_begin + r) * uk.cols + c0;
  fast::DequantSpan(kt, uk, r, c0, c1, buf);
  return buf;
}

// Many tokens (T >= the GEMM's threshold for the copy's format): work items are (head, chunk of
// cw latent columns); an item writes W_uk^T's chunk (cw rows of nope values: bf16 copied exactly,
// other formats decoded to f32 by DequantSpan) into a thread buffer and runs the outer-product
// GEMM of all T query rows against it, the query kept in f32 as on the per-token path. Returns
// false, writing nothing, where the GEMM does not take T tokens of that format at this level.
bool AbsorbByGemm(const fast::KernelTable& kt, const float* qs, int64_t T, int64_t heads,
                  int64_t q_stride, int64_t nope_dim, int64_t v_dim, const Weight& kv_b, int64_t cw,
                  float* ys) {
  const bool bf16 = kv_b.format == WeightFormat::kBF16;
  const WeightFormat copy = bf16 ? WeightFormat::kBF16 : WeightFormat::kF32;
  const int64_t g = fast::GemmMinTokens(kt, copy, FastActivations::kF32);
  if (g <= 0 || T < g) return false;
  const int64_t R = kv_b.cols, chunks = (R + cw - 1) / cw;
  ParallelFor(heads * chunks, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> span;
    fast::PackedX px;
    int64_t packed_head = -1;
    Weight wt;
    wt.format = copy;
    wt.name = kv_b.name + " (W_uk^T)";
    wt.cols = nope_dim;
    for (int64_t item = b; item < e; ++item) {
      const int64_t h = item / chunks, c0 = (item % chunks) * cw, c1 = std::min(R, c0 + cw);
      const Weight uk = kv_b.RowRange(h * (nope_dim + v_dim), nope_dim);
      wt.rows = c1 - c0;
      if (!wt.data.valid() || wt.data.size(0) < wt.rows)
        wt.data = Tensor::Empty(bf16 ? DType::kBF16 : DType::kF32, {cw, nope_dim});
      if (bf16) {
        const uint16_t* src = kv_b.data.data<const uint16_t>() + uk.row_begin * R;
        uint16_t* dst = wt.data.data<uint16_t>();
        for (int64_t r = 0; r < nope_dim; ++r)
          for (int64_t c = c0; c < c1; ++c) dst[(c - c0) * nope_dim + r] = src[r * R + c];
      } else {
        float* dst = wt.data.data<float>();
        span.resize((c1 - c0 + 15) / 16 * 16 + 16);  // NVFP4 writes whole groups
        for (int64_t r = 0; r < nope_dim; ++r) {
          const float* row = UkRowSpan(kt, uk, r, c0, c1, span.data());
          for (int64_t c = 0; c < c1 - c0; ++c) dst[c * nope_dim + r] = row[c];
        }
      }
      if (h != packed_head) {
        fast::PackX(kt, qs + h * q_stride, heads * q_stride, T, nope_dim, copy,
                    FastActivations::kF32, &px);
        packed_head = h;
      }
      fast::MatmulRows(kt, px, 0, T, wt, 0, c1 - c0, ys + h * R + c0, heads * R);
    }
  });
  return true;
}

}  // namespace

void CpuFastOps::MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                                int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const {
  CheckDevices(*this, "MlaAbsorbQuery", {&q, &kv_b.data, &q_latent});
  const int64_t T = q.size(0), R = kv_b.cols;
  LUCID_CHECK(q.size(-1) == heads * q_stride && q_latent.size(0) == T &&
                  q_latent.size(-1) == heads * R && kv_b.rows == heads * (nope_dim + v_dim),
              "MlaAbsorbQuery shape mismatch for " + kv_b.name);
  const fast::KernelTable& kt = fast::Kernels(isa_);
  // Column chunks start on scale-block boundaries (128 is a multiple of 16 and of 128; GGUF
  // blocks: 256-column chunks for the K-quants, DequantAlign). Packed
  // formats take whole rows: one decode call per row (the per-call cost of a 128-column span was
  // as large as its decode), the item's rows then summed from L2 by rows_axpy_f32.
  const bool packed = kv_b.format == WeightFormat::kFp8Block || kv_b.format == WeightFormat::kNvfp4;
  const int64_t align = fast::DequantAlign(kv_b);
  // One token against bf16 rows: whole rows too (rows_axpy_bf16 reads them one after another).
  const bool whole_rows = packed || (T == 1 && kv_b.format == WeightFormat::kBF16);
  const int64_t cw = whole_rows ? R : std::max<int64_t>(128, (128 + align - 1) / align * align);
  const int64_t chunks = (R + cw - 1) / cw;
  const float* qs = q.data<const float>();
  float* ys = q_latent.data<float>();
  if (AbsorbByGemm(kt, qs, T, heads, q_stride, nope_dim, v_dim, kv_b,
                   std::max<int64_t>(128, (128 + align - 1) / align * align), ys))
    return;
  ParallelFor(heads * chunks, 1, [&](int64_t b, int64_t e) {
    std::vector<float> row(cw + 16);
    thread_local std::vector<float> rows;  // the item's decoded rows (reused: no page faults)
    for (int64_t item = b; item < e; ++item) {
      const int64_t h = item / chunks, c0 = (item % chunks) * cw, c1 = std::min(R, c0 + cw);
      const Weight uk = kv_b.RowRange(h * (nope_dim + v_dim), nope_dim);
      if (kv_b.format == WeightFormat::kBF16 && kt.rows_axpy_bf16) {
        kt.rows_axpy_bf16(kv_b.data.data<const uint16_t>() + uk.row_begin * R + c0, R, nope_dim,
                          qs + h * q_stride, heads * q_stride, T, c1 - c0, ys + h * R + c0,
                          heads * R);
        continue;
      }
      // Packed items are whole heads: the next item is head h + 1.
      const bool warm_next = packed && item + 1 < e;
      const Weight next =
          warm_next ? kv_b.RowRange((h + 1) * (nope_dim + v_dim), nope_dim) : Weight{};
      if (FusedAbsorb(kt, uk, nope_dim, qs + h * q_stride, heads * q_stride, T, ys + h * R,
                      heads * R, warm_next ? &next : nullptr))
        continue;
      if (kt.rows_axpy_f32 && (T > 1 || packed)) {         // decode the rows once, sum in registers
        const int64_t ld = (c1 - c0 + 15) / 16 * 16 + 16;  // NVFP4 writes whole groups
        rows.resize(nope_dim * ld);
        for (int64_t r = 0; r < nope_dim; ++r) {
          const float* src = UkRowSpan(kt, uk, r, c0, c1, &rows[r * ld]);
          if (src != &rows[r * ld]) std::copy_n(src, c1 - c0, &rows[r * ld]);
        }
        kt.rows_axpy_f32(rows.data(), ld, nope_dim, qs + h * q_stride, heads * q_stride, T, c1 - c0,
                         ys + h * R + c0, heads * R);
        continue;
      }
      for (int64_t t = 0; t < T; ++t)
        std::fill(ys + (t * heads + h) * R + c0, ys + (t * heads + h) * R + c1, 0.0f);
      for (int64_t r = 0; r < nope_dim; ++r) {
        const float* src = UkRowSpan(kt, uk, r, c0, c1, row.data());
        for (int64_t t = 0; t < T; ++t)
          kt.axpy(qs[t * heads * q_stride + h * q_stride + r], src, ys + (t * heads + h) * R + c0,
                  c1 - c0);
      }
    }
  });
}

void CpuFastOps::MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim,
                                  int64_t v_dim, const Weight& kv_b, Tensor& out) const {
  CheckDevices(*this, "MlaProjectOutput", {&latent, &kv_b.data, &out});
  const int64_t T = latent.size(0), R = kv_b.cols;
  LUCID_CHECK(latent.size(-1) == heads * R && out.size(0) == T && out.size(-1) == heads * v_dim &&
                  kv_b.rows == heads * (nope_dim + v_dim),
              "MlaProjectOutput shape mismatch for " + kv_b.name);
  const fast::KernelTable& kt = fast::Kernels(isa_);
  constexpr int64_t kRows = 32;  // W_uv rows per work item
  const int64_t chunks = (v_dim + kRows - 1) / kRows;
  float* ys = out.data<float>();
  // One parallel region: a thread packs the latent rows of each head its items touch (a head
  // split between two threads is packed by both) and runs each head's run of items as one
  // MatmulRows call.
  ParallelFor(heads * chunks, 1, [&](int64_t b, int64_t e) {
    fast::PackedX px;  // reused for each head of this chunk, freed with it
    for (int64_t item = b; item < e;) {
      const int64_t h = item / chunks, last = std::min(e, (h + 1) * chunks);
      const int64_t n0 = (item % chunks) * kRows,
                    n1 = std::min(v_dim, ((last - 1) % chunks + 1) * kRows);
      fast::PackX(kt, latent.data<const float>() + h * R, heads * R, T, R, kv_b.format, act_, &px);
      const Weight uv = kv_b.RowRange(h * (nope_dim + v_dim) + nope_dim, v_dim);
      fast::MatmulRows(kt, px, 0, T, uv, n0, n1, ys + h * v_dim, heads * v_dim);
      item = last;
    }
  });
}

}  // namespace lucid
