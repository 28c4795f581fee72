#include "ops/ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace lucid {

void CheckDevices(const Ops& ops, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->raw() == nullptr || t->device() == ops.device()) continue;
    CheckFailed(__FILE__, __LINE__, "tensor device == ops device",
                std::string(op) + ": an argument on " + DeviceName(t->device()) + ", but " +
                    ops.name() + " runs on " + DeviceName(ops.device()));
  }
}

void Ops::CopyFromHost(const void* src, void* dst, size_t bytes) const {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

Status Ops::CopyToHost(const void* src, void* dst, size_t bytes) const {
  LUCID_RETURN_IF_ERROR(Synchronize());
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return OkStatus();
}

StatusOr<Tensor> CopyTensorToHost(const Ops& ops, const Tensor& t) {
  if (!t.is_contiguous())
    return InvalidArgument("CopyTensorToHost: a strided view " + ShapeToString(t.shape()));
  Tensor host = Tensor::Empty(t.dtype(), t.shape());
  LUCID_RETURN_IF_ERROR(ops.CopyToHost(t.raw(), host.raw(), t.nbytes()));
  return host;
}

void CheckRouting(const char* op, const Tensor& idx, const Tensor& weights, int64_t T, int64_t k) {
  const Shape want = {T, k};
  LUCID_CHECK(
      idx.dtype() == DType::kI32 && idx.shape() == want,
      std::string(op) + ": idx must be i32 " + ShapeToString(want) + ", got " + idx.DebugString());
  LUCID_CHECK(weights.dtype() == DType::kF32 && weights.shape() == want,
              std::string(op) + ": weights must be f32 " + ShapeToString(want) + ", got " +
                  weights.DebugString());
}

void CheckSampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                     std::span<const LogitEdit> edits, const Tensor& scratch, const Tensor& tokens,
                     const Tensor& logprobs, const Tensor& top_ids) {
  LUCID_CHECK(logits.dtype() == DType::kF32 && logits.rank() == 2 && logits.is_contiguous(),
              "SampleRows: logits must be f32 [R, V], got " + logits.DebugString());
  const int64_t R = logits.size(0), V = logits.size(1);
  LUCID_CHECK(static_cast<int64_t>(rows.size()) == R && V > 0,
              "SampleRows: one RowSampling per logits row, and V > 0");
  const int64_t K = top_ids.rank() == 2 ? top_ids.size(1) : -1;
  LUCID_CHECK(top_ids.dtype() == DType::kI32 && K >= 0 && K <= V && top_ids.size(0) == R,
              "SampleRows: top_ids must be i32 [R, K <= V], got " + top_ids.DebugString());
  LUCID_CHECK(logprobs.dtype() == DType::kF32 && logprobs.shape() == Shape({R, 1 + K}),
              "SampleRows: logprobs must be f32 [R, 1 + K], got " + logprobs.DebugString());
  LUCID_CHECK(tokens.dtype() == DType::kI32 && tokens.shape() == Shape({R}),
              "SampleRows: tokens must be i32 [R], got " + tokens.DebugString());
  LUCID_CHECK(scratch.dtype() == DType::kF32 && scratch.shape() == logits.shape(),
              "SampleRows: scratch must be f32 [R, V], got " + scratch.DebugString());
  const int64_t E = static_cast<int64_t>(edits.size());
  for (const RowSampling& r : rows) {
    LUCID_CHECK(0 <= r.edit_begin && r.edit_begin <= r.edit_end && r.edit_end <= E,
                "SampleRows: a row's edit range lies outside the edits");
    LUCID_CHECK(r.forced_token >= -1 && r.forced_token < V,
                "SampleRows: a row's forced token is out of range");
  }
  for (const LogitEdit& e : edits)
    LUCID_CHECK(0 <= e.id && e.id < V && static_cast<int>(e.kind) >= 0 &&
                    static_cast<int>(e.kind) < kLogitEditKinds,
                "SampleRows: an edit's id or kind is out of range");
}

void Ops::SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                     std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                     Tensor& logprobs, Tensor& top_ids) const {
  CheckDevices(*this, "SampleRows", {&logits, &scratch, &tokens, &logprobs, &top_ids});
  CheckSampleRows(logits, rows, edits, scratch, tokens, logprobs, top_ids);
  const int64_t R = logits.size(0), V = logits.size(1), K = top_ids.size(1);
  // The host's view of the logits; a failed copy leaves the outputs as they are, and the error is
  // the next Synchronize's.
  StatusOr<Tensor> raw = CopyTensorToHost(*this, logits);
  if (!raw.ok()) return;
  std::vector<int32_t> tok(R), top(R * K);
  std::vector<float> lp(R * (1 + K)), x(V);
  for (int64_t r = 0; r < R; ++r) {
    const std::span<const float> row(raw->data<const float>() + r * V, static_cast<size_t>(V));
    const RowSampling& p = rows[r];
    std::copy(row.begin(), row.end(), x.begin());
    ApplyLogitEdits(x, edits.subspan(p.edit_begin, p.edit_end - p.edit_begin), p.clamp != 0);
    tok[r] = PickToken(x, p);
    RawRowLogprobs(row, tok[r], static_cast<int32_t>(K), &lp[r * (1 + K)], top.data() + r * K,
                   &lp[r * (1 + K) + 1]);
  }
  CopyFromHost(tok.data(), tokens.raw(), tok.size() * sizeof(int32_t));
  CopyFromHost(lp.data(), logprobs.raw(), lp.size() * sizeof(float));
  if (K > 0) CopyFromHost(top.data(), top_ids.raw(), top.size() * sizeof(int32_t));
}

void CheckTokenBitmask(const Tensor& logits, const Tensor& bitmask) {
  LUCID_CHECK(logits.dtype() == DType::kF32 && logits.rank() == 2,
              "ApplyTokenBitmask: logits must be f32 [R, V], got " + logits.DebugString());
  const int64_t R = logits.size(0), W = (logits.size(1) + 31) / 32;
  LUCID_CHECK(
      bitmask.dtype() == DType::kI32 && bitmask.shape() == Shape({R, W}),
      "ApplyTokenBitmask: bitmask must be i32 [R, ceil(V / 32)], got " + bitmask.DebugString());
}

void ApplyTokenBitmaskRow(std::span<float> row, const int32_t* words) {
  for (size_t j = 0; j < row.size(); ++j)
    if (((static_cast<uint32_t>(words[j / 32]) >> (j % 32)) & 1u) == 0)
      row[j] = -std::numeric_limits<float>::infinity();
}

void Ops::ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const {
  CheckDevices(*this, "ApplyTokenBitmask", {&logits, &bitmask});
  CheckTokenBitmask(logits, bitmask);
  const int64_t R = logits.size(0), V = logits.size(1), W = bitmask.size(1);
  if (R == 0) return;
  // A failed copy leaves the logits as they are, and the error is the next Synchronize's.
  StatusOr<Tensor> x = CopyTensorToHost(*this, logits);
  StatusOr<Tensor> m = x.ok() ? CopyTensorToHost(*this, bitmask) : x;
  if (!m.ok()) return;
  for (int64_t r = 0; r < R; ++r)
    ApplyTokenBitmaskRow({x->data<float>() + r * V, static_cast<size_t>(V)},
                         m->data<const int32_t>() + r * W);
  CopyFromHost(x->raw(), logits.raw(), x->nbytes());
}

}  // namespace lucid
