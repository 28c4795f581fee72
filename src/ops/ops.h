// The narrow op interface that models call. A model never touches a kernel directly: it calls
// these, by weight format, and a backend (backends/cpu is the reference; others are tested against
// it) implements them.
//
// Conventions for every op: activations are contiguous row-major float32; "T" is the number of
// token rows in the step; outputs are written, never accumulated into, unless a comment says so.
// Every raw pointer in an op's arguments (the *Args structs, PagedRows' storage and page table,
// KvRowsOut's bytes, TopK's scores) points into the memory of the ops' device (Ops::device());
// the std::span arguments of the Tensor ops (ids, positions, rows, lengths, pool rows) are host
// memory, which a device backend copies over itself.
// Ops do not allocate model state; scratch they need is their own business.
// Thread-safety: an Ops object is stateless after construction; calls may run concurrently on
// disjoint outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/sampling.h"
#include "ops/weight.h"

namespace lucid {

enum class RopeStyle { kInterleaved, kHalfSplit };

// Rotary embedding parameters: inverse frequencies (dim/2 of them) and the factor that multiplies
// cos and sin (yarn's attention factor; 1 for default rope).
struct RopeTable {
  std::vector<float> inv_freq;
  float attention_factor = 1.0f;
  int64_t dim() const { return static_cast<int64_t>(inv_freq.size()) * 2; }
};

// How a KV row is stored (models/kv_cache.h picks one per KvDtype):
// - kF32: row_floats float32 values.
// - kBF16: row_floats bf16 values.
// - kFp8: [fp8_values e4m3][ceil(fp8_values / fp8_block) f32 scales][row_floats - fp8_values
//   bf16], value i < fp8_values = e4m3 * scale[i / fp8_block]. MLA rows use fp8_block 128 with the
//   RoPE part in bf16 (FlashMLA's 656-byte layout for 512 + 64); indexer keys use one scale for the
//   whole key (fp8_block = fp8_values, no bf16 part). Scales may be unaligned (read by memcpy).
enum class KvRowKind : uint8_t { kF32, kBF16, kFp8 };

// Read-only view of per-token rows stored in fixed-size pages: token u lives in page
// page_table[u / page_size] at slot u % page_size. For kF32 (the default, and the only kind
// `Row` may be called for) a row is `row_floats` float32 values at
// `base + page * page_stride + slot * row_floats`. Other kinds are bytes: the row of token u
// starts at `bytes + page * page_bytes + slot * row_bytes`; read them with ReadRow (or RowF32,
// which returns the f32 pointer directly for kF32 and decodes into scratch otherwise).
struct PagedRows {
  const float* base = nullptr;
  std::span<const int32_t> page_table;
  int64_t page_size = 0;
  int64_t page_stride = 0;  // floats per page (kF32)
  int64_t row_floats = 0;   // values per row (every kind)
  KvRowKind kind = KvRowKind::kF32;
  const uint8_t* bytes = nullptr;  // kBF16 / kFp8 storage
  int64_t page_bytes = 0;
  int64_t row_bytes = 0;
  int64_t fp8_values = 0;  // kFp8: leading e4m3 values
  int64_t fp8_block = 0;   // kFp8: values per f32 scale
  const float* Row(int64_t u) const {
    LUCID_CHECK(kind == KvRowKind::kF32, "PagedRows::Row on a non-f32 KV cache: use RowF32");
    return base + page_table[u / page_size] * page_stride + (u % page_size) * row_floats;
  }
  const uint8_t* RowBytes(int64_t u) const {
    return bytes + page_table[u / page_size] * page_bytes + (u % page_size) * row_bytes;
  }
  // Decodes token u's row into out[row_floats] (any kind).
  void ReadRow(int64_t u, float* out) const;
  // The row as float32: a pointer into the cache for kF32, else decoded into scratch[row_floats].
  const float* RowF32(int64_t u, float* scratch) const {
    if (kind == KvRowKind::kF32) return Row(u);
    ReadRow(u, scratch);
    return scratch;
  }
};

// Bytes of one stored row of `fmt`'s kind and shape (row_floats, fp8_values, fp8_block).
int64_t KvRowBytes(const PagedRows& fmt);
// Encodes in[row_floats] into out[KvRowBytes(fmt)] in fmt's kind. kFp8 scale per block:
// amax / 448 (an all-zero block stores scale 0 and zero codes), codes e4m3(x / scale) with RNE,
// saturating, a NaN quotient (x NaN, or infinite in a block whose scale is infinite) the NaN code
// with x's sign bit (0x7F, 0xFF); the tail is rounded to bf16 (RNE). kBF16 rounds RNE.
void EncodeKvRow(const PagedRows& fmt, const float* in, uint8_t* out);

// Where WriteKvRows stores rows: one layer's pool of `rows` rows in fmt's row format (kind,
// row_floats, fp8_values, fp8_block, row_bytes; its page fields are unused). Pool row r (page
// * page_size + slot, KvStorage::PoolRow) starts at bytes + r * fmt.row_bytes, in memory of the
// ops' device.
struct KvRowsOut {
  PagedRows fmt;
  uint8_t* bytes = nullptr;
  int64_t rows = 0;
};

// One MLA attention problem for one sequence: T query rows attending over cached tokens.
// The key of token u is [ckv_u | kpe_u] (first `latent_dim` floats of its row, then `rope_dim`),
// the value is ckv_u; queries come already absorbed: q_latent = q_nope · W_uk, so
// score(t, u) = scale * (q_latent_t · ckv_u + q_rope_t · kpe_u). Two modes:
// - sparse (selected != null): query t attends to the tokens listed in
//   selected[t * selected_stride, + selected_count[t]), which must all be causal for t;
// - dense (selected == null): query t attends to the selected_count[t] consecutive tokens from
//   dense_begin[t] (from 0 when dense_begin is null): every causal token, with no index list, so
//   the memory an implementation needs does not grow with the context.
// Output: out_latent[t, h, :] = sum_u softmax_u(score) * ckv_u (zeros when nothing is attended).
struct MlaAttentionArgs {
  const float* q_latent = nullptr;  // [T, heads, latent_dim]
  const float* q_rope = nullptr;    // [T, heads, rope_dim]
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t latent_dim = 0;
  int64_t rope_dim = 0;
  float scale = 1.0f;
  PagedRows kv;
  const int32_t* selected = nullptr;  // [T, selected_stride]; null: dense
  int64_t selected_stride = 0;
  const int32_t* selected_count = nullptr;  // [T]
  const int32_t* dense_begin = nullptr;     // [T] dense mode only; null: every row from 0
  float* out_latent = nullptr;              // [T, heads, latent_dim]
};

// The DSA lightning indexer's scores for one sequence:
// scores[t, u] = sum_j w[t, j] * relu(q[t, j] · k_u) for u < causal_len[t]; the entries
// u >= causal_len[t] of a row are left unspecified. (The dI^-0.5 and nI^-0.5 factors are folded
// into w by the caller.)
struct IndexerArgs {
  const float* q = nullptr;  // [T, heads, head_dim]
  const float* w = nullptr;  // [T, heads]
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  PagedRows keys;
  const int64_t* causal_len = nullptr;  // [T]
  float* scores = nullptr;              // [T, score_stride]
  int64_t score_stride = 0;
};

// Grouped-query attention (Llama, Qwen) for T query rows over per-token K/V rows in pages.
// Token u's stored row (kv.row_floats = 2 * kv_heads * head_dim values) is [k_u | v_u], each
// [kv_heads, head_dim]; query head h reads KV head h / (heads / kv_heads) (heads must be a
// multiple of kv_heads). Query row t attends to the count[t] consecutive tokens from begin[t]
// (from 0 when begin is null), which the caller keeps causal:
//   score(t, h, u) = scale * (q[t, h, :] · k_u[h / group, :]),
//   out[t, h, :]   = sum_u softmax_u(score) * v_u[h / group, :]   (zeros when count[t] == 0).
// Softmax subtracts the row maximum; accumulation is float32. The rows may be any KvRowKind.
struct GqaAttentionArgs {
  const float* q = nullptr;  // [T, heads, head_dim]
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  PagedRows kv;
  const int32_t* count = nullptr;  // [T]
  const int32_t* begin = nullptr;  // [T] first attended token of each row; null: 0
  float* out = nullptr;            // [T, heads, head_dim]
};

// One expert's SwiGLU MLP: down(silu(gate x) * up x).
struct ExpertWeights {
  Weight gate, up, down;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;
  // The device whose memory these ops read and write: every Tensor argument (and weight) must be
  // on it (Tensor::device()); an implementation aborts with one line naming the op, the argument's
  // device and its own otherwise (CheckDevices). The CPU sets run on kCpu.
  virtual Device device() const { return Device::kCpu; }

  // y[T, w.rows] = x[T, w.cols] · W^T.
  virtual void Linear(const Tensor& x, const Weight& w, Tensor& y) const = 0;
  // *ys[i] = x · ws[i]^T for every i: several weights on the same input (the MLA and indexer
  // projections of the hidden state, a shared expert's gate and up), as the engines' fused
  // projections compute them but without concatenating the weights. Each result equals Linear's.
  // A backend may run them in one parallel region; this default calls Linear for each.
  virtual void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                          std::span<Tensor* const> ys) const {
    LUCID_CHECK(ws.size() == ys.size(), "LinearMany: as many outputs as weights");
    for (size_t i = 0; i < ws.size(); ++i) Linear(x, *ws[i], *ys[i]);
  }
  // y[T, w.cols] = x[T, w.rows] · W (used to absorb W_uk into the query).
  virtual void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const = 0;
  // out[i, :] = row ids[i] of `table` (rows = vocabulary), converted to float32.
  virtual void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const = 0;
  // Row-wise y = weight * (x * rsqrt(mean(x^2) + eps)); y may alias x. weight: f32 or bf16 [D].
  virtual void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const = 0;
  // Row-wise LayerNorm with affine weight and bias ([D], f32 or bf16); y may alias x.
  virtual void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                         Tensor& y) const = 0;
  // In place: for every row t and head h of x viewed [T, heads, head_stride], rotates the
  // table.dim() values starting at column `offset` by position positions[t].
  virtual void Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset,
                    const RopeTable& table, std::span<const int64_t> positions,
                    RopeStyle style) const = 0;
  // out[T, I] = silu(gate) * up.
  virtual void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const = 0;
  virtual void MlaAttention(const MlaAttentionArgs& a) const = 0;
  virtual void IndexerScores(const IndexerArgs& a) const = 0;
  // GQA attention (see GqaAttentionArgs). The default is the reference (ops/gqa_attention.cpp):
  // one query row and head at a time, scores then softmax then the weighted sum of values.
  virtual void GqaAttention(const GqaAttentionArgs& a) const;
  // Indices of the k largest of scores[0..n) in descending order of score; ties broken by the
  // lower index first. k <= n. NaN ranks above every number (as torch.topk: a NaN score is
  // chosen, not hidden), NaNs tied among themselves; -0 equals +0.
  virtual void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const = 0;
  // DeepSeek-V3 routing for T rows of router logits [T, E]: sigmoid, + bias for selection,
  // group-limited (top-2 sum per group, keep topk_group groups), top-k, weights = sigmoid scores
  // of the chosen (renormalized if norm_topk_prob) times scaling. bias: f32 [E] (a tensor
  // without data: no bias). Writes idx (i32 [T, k]) and weights (f32 [T, k]).
  virtual void MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group,
                        int64_t topk_group, int64_t k, bool norm_topk_prob, float scaling,
                        Tensor& idx, Tensor& weights) const = 0;
  // out[T, D] += sum over each row's k routed experts of weight * expert(x row), with idx
  // (i32 [T, k]) and weights (f32 [T, k]) as MoeRoute writes them.
  virtual void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts,
                          const Tensor& idx, const Tensor& weights, Tensor& out) const = 0;

  // MLA weight absorption, all heads in one call. kv_b is kv_b_proj [heads * (nope_dim + v_dim),
  // latent] (any format); head h's W_uk is its rows [h * (nope_dim + v_dim), + nope_dim) and W_uv
  // the v_dim rows after them.
  // MlaAbsorbQuery: q is [T, heads * q_stride] with head h's nope part at column h * q_stride;
  // q_latent[T, heads * latent] gets q_latent[t, h, :] = q[t, h, 0:nope_dim] · W_uk_h.
  // The default (the reference) is one LinearTransposed per head on a row range of kv_b.
  virtual void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                              int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const;
  // MlaProjectOutput: latent is [T, heads * latent]; out[T, heads * v_dim] gets
  // out[t, h * v_dim + j] = latent[t, h, :] · W_uv_h[j, :]. Default: one Linear per head.
  virtual void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim,
                                int64_t v_dim, const Weight& kv_b, Tensor& out) const;

  // The model's glue between the ops above, so that a forward never touches activations from the
  // host (on a device backend they live in device memory).
  // x += y elementwise (residual adds); same element counts.
  virtual void Accumulate(Tensor& x, const Tensor& y) const = 0;
  // x *= s elementwise.
  virtual void Scale(Tensor& x, float s) const = 0;
  // For x [T, groups * group_stride] (any row width >= that): out[t, g * width + j] =
  // x[t, g * group_stride + offset + j] for g < groups, j < width; out is [T, groups * width].
  virtual void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                           int64_t width, Tensor& out) const = 0;
  // out[i, :] = x[rows[i], :] (x and out 2-D, same width; rows in [0, x.size(0))).
  virtual void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const = 0;

  // The model's KV writes and the outputs it reads back, as ops.
  // For each t < T: row t of the column concatenation of `parts` (each [T, w_i] f32, the widths
  // summing to out.fmt.row_floats) encoded as EncodeKvRow(out.fmt) does, stored at pool row
  // pool_rows[t] (distinct, in [0, out.rows)). Writes nothing else.
  virtual void WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                           std::span<const int64_t> pool_rows) const = 0;
  // Row-wise top-k over scores [T, S] f32 into out [T, >= k] i32: for row t with n = lengths[t]
  // (<= S) candidates, n > k: out[t, 0..k) = offset + TopK(scores[t, 0..n), k) (the order and
  // ties of TopK); n <= k: out[t, 0..n) = offset + 0..n-1 (every candidate, ascending). Entries
  // past min(n, k) are left as they are. `offset` shifts every index written (a batch's combined
  // page table, see MlaAttentionArgs).
  virtual void TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k,
                        int32_t offset, Tensor& out) const = 0;
  // flags[t] (i32 [T]) = 1 when row t of x ([T, ...] f32) holds a NaN or an infinity, else 0:
  // the numerics check's scan (the host reads T flags, not the activations).
  virtual void NonFiniteRows(const Tensor& x, Tensor& flags) const = 0;
  // Samples one token per row of logits [R, V] f32 (ops/sampling.h, steps 1-3): row r with the
  // parameters rows[r] (host memory, R of them) and the edits edits[rows[r].edit_begin,
  // rows[r].edit_end) (host memory). Writes tokens[r] (i32 [R]), logprobs[r, 0] the token's raw
  // logprob and logprobs[r, 1 + j] / top_ids[r, j] the raw row's j-th most likely id
  // (logprobs f32 [R, 1 + K], top_ids i32 [R, K], K <= V, K may be 0); scratch is f32 [R, V]
  // (its contents after the call are unspecified). The host reads R * (2 + 2K) values, not the
  // logits. The token must equal the host functions' for the same row (a device's exp may differ
  // in the last bit, which moves a draw only where it falls within that rounding of a boundary);
  // the logprobs are within 1e-5 of them. Default: a host round trip (CopyToHost, the functions
  // of ops/sampling.h, CopyFromHost), which is what the CPU sets run.
  virtual void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                          std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                          Tensor& logprobs, Tensor& top_ids) const;
  // Masks logits [R, V] f32 in place by bitmask [R, W] i32, W = ceil(V / 32): entry j of row r
  // becomes -inf unless bit j % 32 of bitmask[r, j / 32] is 1 (xgrammar's layout: the tokens a
  // grammar allows, runtime/token_constraint.h); allowed entries are left as they are (NaN too).
  // Applied before SampleRows, it gives a constrained request's masked row where the logits are:
  // the host uploads R * W words instead of reading R * V floats. Default: a host round trip,
  // which is what the CPU sets run.
  virtual void ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const;

  // Step metadata between host and device memory, in the order of the ops issued.
  // CopyFromHost: `bytes` bytes from host memory `src` into `dst` (memory of device()); src may be
  // reused once the call returns. CopyToHost: waits for the ops issued so far, then copies `bytes`
  // bytes from `src` (memory of device()) into host memory `dst`, and returns what Synchronize
  // would. The CPU sets: memcpy.
  virtual void CopyFromHost(const void* src, void* dst, size_t bytes) const;
  virtual Status CopyToHost(const void* src, void* dst, size_t bytes) const;

  // Errors of the ops issued since the last call: an asynchronous backend (a GPU stream) waits for
  // them here and reports a failure as a Status instead of aborting; the model returns it from
  // Forward and the engine fails the step's requests with it. Synchronous backends: always OK.
  virtual Status Synchronize() const { return OkStatus(); }

  // Device memory the ops hold for their own temporaries outside the backend's allocator (CudaOps'
  // scratch buffers, kept at the largest size asked for); nullopt where they hold none that
  // counts (the CPU sets' temporaries are host memory of the moment). Read it while no step runs.
  virtual std::optional<int64_t> scratch_held_bytes() const { return std::nullopt; }
};

// Aborts naming `op`, the device of the first tensor in `ts` that is not on ops.device() and the
// ops' own, e.g. "Accumulate: an argument on cuda, but cpu-reference runs on cpu". Tensors
// without data (an absent weight scale) are skipped.
void CheckDevices(const Ops& ops, const char* op, std::initializer_list<const Tensor*> ts);
// A host tensor holding the contents of the contiguous `t` (memory of ops.device()), copied by
// ops.CopyToHost after the ops issued so far (Backend::ReadableOnHost of a backend whose memory
// the host cannot read).
StatusOr<Tensor> CopyTensorToHost(const Ops& ops, const Tensor& t);
// Aborts unless idx is i32 [T, k] and weights f32 [T, k] (MoeRoute's outputs, MoeExperts' inputs).
void CheckRouting(const char* op, const Tensor& idx, const Tensor& weights, int64_t T, int64_t k);
// Aborts unless SampleRows' arguments have the shapes and dtypes it documents, and every edit's
// range and id lies in its bounds.
void CheckSampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                     std::span<const LogitEdit> edits, const Tensor& scratch, const Tensor& tokens,
                     const Tensor& logprobs, const Tensor& top_ids);
// Aborts unless logits is f32 [R, V] and bitmask i32 [R, ceil(V / 32)] (ApplyTokenBitmask).
void CheckTokenBitmask(const Tensor& logits, const Tensor& bitmask);
// ApplyTokenBitmask on one host row of V = row.size() entries and its ceil(V / 32) words.
void ApplyTokenBitmaskRow(std::span<float> row, const int32_t* words);

}  // namespace lucid
