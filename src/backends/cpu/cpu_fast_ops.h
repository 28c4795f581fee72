// CpuFastOps: the fast CPU backend. Same contracts as CpuOps (ops/ops.h), which stays the oracle:
// every override here is tested against the CpuOps op it replaces (cpu_fast_*_test.cpp).
//
// Instruction sets are chosen at run time (CPUID through __builtin_cpu_supports), per function
// with GCC target attributes, so the build itself stays portable (no -march flags on any file):
//   kAvx512Bf16  AVX-512 F/BW/VL/DQ + AVX512_BF16 + VBMI: bf16 weights use vdpbf16ps on a hi+lo
//   bf16 split
//                of the activations (x = hi + lo, both bf16), so products keep ~16 mantissa bits of
//                x and the result matches the f32 reference to ~1e-5 relative.
//   kAvx512      AVX-512 F/BW/VL/DQ: bf16 weights widened to f32, f32 FMAs.
//   kAvx2        AVX2 + FMA + F16C, 8-wide.
//   kScalar      plain loops (what CpuOps does, with the fast loop structure).
// A CpuFastOps may be capped below what the machine has (tests run every level the machine can).
//
// What is fast here (all other ops fall through to CpuOps):
// - Linear: every weight element is read from memory once per call for the whole batch; threads
//   split the weight rows. Below GemmMinTokens (32 tokens; 64 for f32) dot-product register tiles
//   of tokens x weight rows (k-blocked so the weight sliver stays in L1), from there the
//   outer-product GEMM of cpu_fast_gemm*.cpp (12 tokens x 32 outputs micro-kernel over packed
//   activation panels and weight panels decoded and transposed into L1/L2, kc 768).
// - Linear on FP8-block and NVFP4 weights (avx512bf16): fused tiles decode the codes in registers
//   straight to bf16 (e4m3 through a 128-entry vpermi2w table; e2m1 x group scale through a
//   per-32-column vpermw table, both exact in bf16) and run vdpbf16ps against the hi/lo split of
//   x, up to 4 tokens per decoded vector; FP8 block scales multiply each 128-column block's sums,
//   NVFP4's scale2 the total. Streaming tiles prefetch the next row group into L2. Many tokens
//   (and avx512/avx2) go through f32 tiles over weights decoded into an L1 sliver (bit for bit
//   DequantizeRowSpan): never more than a block of a matrix is dequantized at once; MoE experts
//   take the same paths.
// - LinearMany: weights on the same input below the GEMM (and the token split) run in one
//   parallel region, x packed once per format, the threads splitting the weights' rows by bytes
//   (a thread's share runs on across the weights); results equal Linear's bit for bit.
// - LinearTransposed: threads split the output columns (packed rows decoded span by span).
// - MlaAbsorbQuery / MlaProjectOutput: all heads of the W_uk absorption / W_uv projection in one
//   parallel region each (cpu_fast_mla.cpp).
// - MoeExperts: rows grouped by expert; one parallel pass for every touched expert's gate/up,
//   one for every down projection, so each touched expert is read once per step.
// - MlaAttention: per query, keys visited once for all heads (flash-decoding split of the
//   selected tokens across threads when there are fewer queries than threads).
// - IndexerScores: keys blocked and transposed so all heads score a block of keys with FMAs.
// - Both read f32, bf16 and fp8_e4m3 KV rows (non-f32 rows decoded per block of 16 rows with the
//   vector kernels, equal to PagedRows::ReadRow).
// - TopK: selection by threshold (nth_element on values) then a sort of the k chosen.
// - RmsNorm, SwiGlu: vectorized.
// Thread-safety: as Ops (stateless after construction; scratch is per call, plus one reused
// per-thread decode sliver in the matmul driver).
#pragma once

#include "backends/cpu/cpu_ops.h"

namespace lucid {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

// The activations the matmuls (Linear, MoeExperts, MlaProjectOutput) multiply:
//   kF32   as given (f32; at avx512bf16 the hi/lo split, ~16 mantissa bits). The default.
//   kBf16  rounded to bf16 first (8 mantissa bits), as GPU engines and llama.cpp's bf16 path
//          compute: at avx512bf16 one vdpbf16ps per weight pair instead of two, so batched decode
//          does half the arithmetic, and the many-token GEMM runs on bf16 pairs (bf16, FP8-block
//          and NVFP4 weights) at twice the FMA rate. Results match the reference run on
//          bf16-rounded activations
//          (~1e-5), and differ from the reference on the f32 ones by ~1e-3 relative. Every
//          instruction set rounds the same way; only avx512bf16 gains speed from it.
enum class FastActivations { kF32, kBf16 };
const char* CpuIsaName(CpuIsa isa);
// The best level this machine supports (cached after the first call).
CpuIsa DetectCpuIsa();

class CpuFastOps : public CpuOps {
 public:
  // Uses min(max_isa, DetectCpuIsa()).
  explicit CpuFastOps(CpuIsa max_isa = CpuIsa::kAvx512Bf16,
                      FastActivations act = FastActivations::kF32);
  CpuIsa isa() const { return isa_; }
  FastActivations activations() const { return act_; }

  const char* name() const override { return name_; }
  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override;
  void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                  std::span<Tensor* const> ys) const override;
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override;
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const override;
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override;
  void MlaAttention(const MlaAttentionArgs& a) const override;
  void IndexerScores(const IndexerArgs& a) const override;
  // cpu_fast_gqa.cpp: one (row, KV head) pair per task, its query heads together, each KV row
  // read (and decoded) once per pair, softmax computed online (running max and rescale).
  void GqaAttention(const GqaAttentionArgs& a) const override;
  void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const override;
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override;
  void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                      int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const override;
  void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                        const Weight& kv_b, Tensor& out) const override;

  // Whether Linear has a fast kernel for this format (others fall back to CpuOps::Linear).
  static bool FastFormat(WeightFormat f);

 private:
  CpuIsa isa_;
  FastActivations act_;
  const char* name_;
};

}  // namespace lucid
