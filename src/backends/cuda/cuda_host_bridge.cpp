#include "backends/cuda/cuda_host_bridge.h"

#include <cstring>
#include <string>

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

void HostBridgeOps::Rope(Tensor&, int64_t, int64_t, int64_t, const RopeTable&,
                         std::span<const int64_t>, RopeStyle) const {
  NotBridged("Rope");
}
void HostBridgeOps::MlaAttention(const MlaAttentionArgs&) const { NotBridged("MlaAttention"); }
void HostBridgeOps::IndexerScores(const IndexerArgs&) const { NotBridged("IndexerScores"); }
void HostBridgeOps::GqaAttention(const GqaAttentionArgs&) const { NotBridged("GqaAttention"); }
void HostBridgeOps::TopK(const float*, int64_t, int64_t, int32_t*) const { NotBridged("TopK"); }
void HostBridgeOps::MoeRoute(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, bool, float,
                             Tensor&, Tensor&) const {
  NotBridged("MoeRoute");
}
void HostBridgeOps::MoeExperts(const Tensor&, std::span<const ExpertWeights>, const Tensor&,
                               const Tensor&, Tensor&) const {
  NotBridged("MoeExperts");
}
void HostBridgeOps::MlaAbsorbQuery(const Tensor&, int64_t, int64_t, int64_t, int64_t, const Weight&,
                                   Tensor&) const {
  NotBridged("MlaAbsorbQuery");
}
void HostBridgeOps::MlaProjectOutput(const Tensor&, int64_t, int64_t, int64_t, const Weight&,
                                     Tensor&) const {
  NotBridged("MlaProjectOutput");
}
void HostBridgeOps::WriteKvRows(std::span<const Tensor* const>, const KvRowsOut&,
                                std::span<const int64_t>) const {
  NotBridged("WriteKvRows");
}
void HostBridgeOps::TopKRows(const Tensor&, std::span<const int64_t>, int64_t, int32_t,
                             Tensor&) const {
  NotBridged("TopKRows");
}

}  // namespace lucid::cuda
