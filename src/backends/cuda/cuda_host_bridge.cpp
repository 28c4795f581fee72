#include "backends/cuda/cuda_host_bridge.h"

#include <cstring>
#include <string>
#include <vector>

namespace lucid::cuda {
namespace {

[[noreturn]] void NotBridged(const char* op) {
  LUCID_CHECK(false, std::string("HostBridgeOps: ") + op + " has no CUDA kernel yet");
  __builtin_unreachable();
}

void Ok(const Status& s, const char* what) {
  LUCID_CHECK(s.ok(), std::string("HostBridgeOps: ") + what + ": " + s.message());
}

}  // namespace

Tensor HostBridgeOps::Up(const Tensor& host) const {
  if (host.raw() == nullptr) return host;
  LUCID_CHECK(host.is_contiguous(),
              "HostBridgeOps: a strided input " + ShapeToString(host.shape()));
  StatusOr<Tensor> d = CopyToDevice(host, b_.allocator(), b_.stream());
  Ok(d.status(), "copy to device");
  return *std::move(d);
}

Weight HostBridgeOps::Up(const Weight& host) const {
  Weight w = host;
  w.data = Up(host.data);
  w.scale = Up(host.scale);
  w.scale2 = Up(host.scale2);
  return w;
}

void HostBridgeOps::Down(const Tensor& dev, Tensor& host) const {
  Ok(b_.Synchronize(), "device op");
  StatusOr<Tensor> h = CopyToHost(dev, b_.stream());
  Ok(h.status(), "copy to host");
  LUCID_CHECK(host.is_contiguous() && host.nbytes() == h->nbytes(),
              "HostBridgeOps: output shape mismatch");
  std::memcpy(host.raw(), h->raw(), h->nbytes());
}

void HostBridgeOps::Linear(const Tensor& x, const Weight& w, Tensor& y) const {
  Tensor dy = Up(y);
  b_.ops().Linear(Up(x), Up(w), dy);
  Down(dy, y);
}
void HostBridgeOps::LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const {
  Tensor dy = Up(y);
  b_.ops().LinearTransposed(Up(x), Up(w), dy);
  Down(dy, y);
}
void HostBridgeOps::Embedding(const Weight& table, std::span<const int32_t> ids,
                              Tensor& out) const {
  Tensor d = Up(out);
  b_.ops().Embedding(Up(table), ids, d);
  Down(d, out);
}
void HostBridgeOps::RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const {
  Tensor dy = Up(y);
  b_.ops().RmsNorm(Up(x), Up(weight), eps, dy);
  Down(dy, y);
}
void HostBridgeOps::LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                              Tensor& y) const {
  Tensor dy = Up(y);
  b_.ops().LayerNorm(Up(x), Up(weight), Up(bias), eps, dy);
  Down(dy, y);
}
void HostBridgeOps::SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const {
  Tensor d = Up(out);
  b_.ops().SwiGlu(Up(gate), Up(up), d);
  Down(d, out);
}
void HostBridgeOps::Accumulate(Tensor& x, const Tensor& y) const {
  Tensor dx = Up(x);
  b_.ops().Accumulate(dx, Up(y));
  Down(dx, x);
}
void HostBridgeOps::Scale(Tensor& x, float s) const {
  Tensor dx = Up(x);
  b_.ops().Scale(dx, s);
  Down(dx, x);
}
void HostBridgeOps::CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride,
                                int64_t offset, int64_t width, Tensor& out) const {
  Tensor d = Up(out);
  b_.ops().CopyColumns(Up(x), groups, group_stride, offset, width, d);
  Down(d, out);
}
void HostBridgeOps::GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const {
  Tensor d = Up(out);
  b_.ops().GatherRows(Up(x), rows, d);
  Down(d, out);
}
void HostBridgeOps::NonFiniteRows(const Tensor& x, Tensor& flags) const {
  Tensor d = Up(flags);
  b_.ops().NonFiniteRows(Up(x), d);
  Down(d, flags);
}

void HostBridgeOps::Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset,
                         const RopeTable& table, std::span<const int64_t> positions,
                         RopeStyle style) const {
  Tensor dx = Up(x);
  b_.ops().Rope(dx, heads, head_stride, offset, table, positions, style);
  Down(dx, x);
}
void HostBridgeOps::MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group,
                             int64_t topk_group, int64_t k, bool norm_topk_prob, float scaling,
                             Tensor& idx, Tensor& weights) const {
  Tensor di = Up(idx), dw = Up(weights);
  b_.ops().MoeRoute(Up(logits), Up(bias), n_group, topk_group, k, norm_topk_prob, scaling, di, dw);
  Down(di, idx);
  Down(dw, weights);
}
void HostBridgeOps::MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts,
                               const Tensor& idx, const Tensor& weights, Tensor& out) const {
  std::vector<ExpertWeights> dev;
  dev.reserve(experts.size());
  for (const ExpertWeights& e : experts) dev.push_back({Up(e.gate), Up(e.up), Up(e.down)});
  Tensor d = Up(out);
  b_.ops().MoeExperts(Up(x), dev, Up(idx), Up(weights), d);
  Down(d, out);
}
void HostBridgeOps::WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                                std::span<const int64_t> pool_rows) const {
  std::vector<Tensor> dev;
  dev.reserve(parts.size());
  for (const Tensor* p : parts) dev.push_back(Up(*p));
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : dev) ptrs.push_back(&t);
  Tensor pool = Tensor::Borrow(DType::kU8, {out.rows * out.fmt.row_bytes}, out.bytes);
  Tensor dpool = Up(pool);
  KvRowsOut dout = out;
  dout.bytes = dpool.data<uint8_t>();
  b_.ops().WriteKvRows(ptrs, dout, pool_rows);
  Down(dpool, pool);
}
void HostBridgeOps::TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k,
                             int32_t offset, Tensor& out) const {
  Tensor d = Up(out);
  b_.ops().TopKRows(Up(scores), lengths, k, offset, d);
  Down(d, out);
}

void HostBridgeOps::MlaAttention(const MlaAttentionArgs&) const { NotBridged("MlaAttention"); }
void HostBridgeOps::IndexerScores(const IndexerArgs&) const { NotBridged("IndexerScores"); }
void HostBridgeOps::GqaAttention(const GqaAttentionArgs&) const { NotBridged("GqaAttention"); }
void HostBridgeOps::TopK(const float*, int64_t, int64_t, int32_t*) const { NotBridged("TopK"); }
void HostBridgeOps::MlaAbsorbQuery(const Tensor&, int64_t, int64_t, int64_t, int64_t, const Weight&,
                                   Tensor&) const {
  NotBridged("MlaAbsorbQuery");
}
void HostBridgeOps::MlaProjectOutput(const Tensor&, int64_t, int64_t, int64_t, const Weight&,
                                     Tensor&) const {
  NotBridged("MlaProjectOutput");
}

}  // namespace lucid::cuda
