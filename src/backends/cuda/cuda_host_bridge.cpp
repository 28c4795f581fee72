#include "backends/cuda/cuda_host_bridge.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/cuda_status.h"

namespace lucid::cuda {
namespace {

void Ok(const Status& s, const char* what) {
  LUCID_CHECK(s.ok(), std::string("HostBridgeOps: ") + what + ": " + s.message());
}

// Device copies of the raw arrays an attention op reads, kept alive for one call.
class DeviceArrays {
 public:
  explicit DeviceArrays(CudaBackend& b) : b_(b) {}
  template <typename T>
  T* Copy(const T* host, int64_t n) {
    if (host == nullptr) return nullptr;
    const size_t bytes = static_cast<size_t>(n > 0 ? n : 0) * sizeof(T);
    StatusOr<std::shared_ptr<void>> mem = b_.allocator().Allocate(bytes);
    Ok(mem.status(), "device arrays");
    if (bytes > 0)
      Ok(CudaStatus(cudaMemcpyAsync(mem->get(), host, bytes, cudaMemcpyHostToDevice, b_.stream()),
                    "copy to device"),
         "device arrays");
    held_.push_back(*mem);
    return static_cast<T*>(mem->get());
  }
  // The paged rows with their storage (the pages the table names) and table on the device.
  PagedRows Rows(const PagedRows& h) {
    int64_t pages = 0;
    for (int32_t p : h.page_table) pages = std::max<int64_t>(pages, int64_t{p} + 1);
    PagedRows d = h;
    d.page_table = std::span<const int32_t>(Copy(h.page_table.data(), h.page_table.size()),
                                            h.page_table.size());
    if (h.kind == KvRowKind::kF32)
      d.base = Copy(h.base, pages * h.page_stride);
    else
      d.bytes = Copy(h.bytes, pages * h.page_bytes);
    return d;
  }
  // Waits, then copies n values back from `dev` to `host`.
  template <typename T>
  void Back(T* host, const T* dev, int64_t n) {
    Ok(b_.Synchronize(), "device op");
    Ok(CudaStatus(cudaMemcpy(host, dev, static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToHost),
                  "copy to host"),
       "device arrays");
  }

 private:
  CudaBackend& b_;
  std::vector<std::shared_ptr<void>> held_;
};

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
  StatusOr<Tensor> h = cuda::CopyToHost(dev, b_.stream());
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

void HostBridgeOps::SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                               std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                               Tensor& logprobs, Tensor& top_ids) const {
  Tensor ds = Up(scratch), dt = Up(tokens), dl = Up(logprobs), di = Up(top_ids);
  b_.ops().SampleRows(Up(logits), rows, edits, ds, dt, dl, di);
  Down(dt, tokens);
  Down(dl, logprobs);
  if (top_ids.numel() > 0) Down(di, top_ids);
}

void HostBridgeOps::ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const {
  Tensor d = Up(logits);
  b_.ops().ApplyTokenBitmask(d, Up(bitmask));
  Down(d, logits);
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

void HostBridgeOps::MlaAttention(const MlaAttentionArgs& h) const {
  DeviceArrays d(b_);
  const int64_t T = h.tokens, th = h.tokens * h.heads;
  MlaAttentionArgs a = h;
  a.q_latent = d.Copy(h.q_latent, th * h.latent_dim);
  a.q_rope = d.Copy(h.q_rope, th * h.rope_dim);
  a.kv = d.Rows(h.kv);
  a.selected = d.Copy(h.selected, T * h.selected_stride);
  a.selected_count = d.Copy(h.selected_count, T);
  a.dense_begin = d.Copy(h.dense_begin, T);
  a.out_latent = d.Copy(h.out_latent, th * h.latent_dim);
  b_.ops().MlaAttention(a);
  d.Back(h.out_latent, a.out_latent, th * h.latent_dim);
}
void HostBridgeOps::GqaAttention(const GqaAttentionArgs& h) const {
  DeviceArrays d(b_);
  const int64_t T = h.tokens, n = h.tokens * h.heads * h.head_dim;
  GqaAttentionArgs a = h;
  a.q = d.Copy(h.q, n);
  a.kv = d.Rows(h.kv);
  a.count = d.Copy(h.count, T);
  a.begin = d.Copy(h.begin, T);
  a.out = d.Copy(h.out, n);
  b_.ops().GqaAttention(a);
  d.Back(h.out, a.out, n);
}
void HostBridgeOps::IndexerScores(const IndexerArgs& h) const {
  DeviceArrays d(b_);
  const int64_t T = h.tokens;
  IndexerArgs a = h;
  a.q = d.Copy(h.q, T * h.heads * h.head_dim);
  a.w = d.Copy(h.w, T * h.heads);
  a.keys = d.Rows(h.keys);
  a.causal_len = d.Copy(h.causal_len, T);
  a.scores = d.Copy(h.scores, T * h.score_stride);
  b_.ops().IndexerScores(a);
  d.Back(h.scores, a.scores, T * h.score_stride);
}
void HostBridgeOps::TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const {
  DeviceArrays d(b_);
  const float* ds = d.Copy(scores, n);
  int32_t* dout = d.Copy(out, k);
  b_.ops().TopK(ds, n, k, dout);
  d.Back(out, dout, k);
}
void HostBridgeOps::MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride,
                                   int64_t nope_dim, int64_t v_dim, const Weight& kv_b,
                                   Tensor& q_latent) const {
  Tensor d = Up(q_latent);
  b_.ops().MlaAbsorbQuery(Up(q), heads, q_stride, nope_dim, v_dim, Up(kv_b), d);
  Down(d, q_latent);
}
void HostBridgeOps::MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim,
                                     int64_t v_dim, const Weight& kv_b, Tensor& out) const {
  Tensor d = Up(out);
  b_.ops().MlaProjectOutput(Up(latent), heads, nope_dim, v_dim, Up(kv_b), d);
  Down(d, out);
}

}  // namespace lucid::cuda
