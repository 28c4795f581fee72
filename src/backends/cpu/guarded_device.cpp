#include "backends/cpu/guarded_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace lucid {
namespace {

constexpr size_t kReserve = size_t{4} << 30;  // address space, not memory

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

GuardedMemory::GuardedMemory() : reserved_(kReserve) {
  void* p = mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  LUCID_CHECK(p != MAP_FAILED, "GuardedMemory: cannot reserve the address range");
  base_ = static_cast<char*>(p);
}

GuardedMemory::~GuardedMemory() { munmap(base_, reserved_); }

StatusOr<std::shared_ptr<void>> GuardedMemory::Allocate(size_t bytes) {
  const size_t page = PageSize();
  const size_t size = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  std::lock_guard<std::mutex> lock(mu_);
  if (size > reserved_ - used_)
    return ResourceExhausted("GuardedMemory: " + std::to_string(bytes) + " bytes past the " +
                             std::to_string(reserved_ >> 30) + " GiB range");
  if (limit_ && held_->load() + static_cast<int64_t>(bytes) > *limit_)
    return ResourceExhausted("GuardedMemory: cannot allocate " + std::to_string(bytes) +
                             " bytes (" + std::to_string(*limit_ - held_->load()) +
                             " left of the limit)");
  char* p = base_ + used_;
  used_ += size;
  if (open_ > 0) mprotect(p, size, PROT_READ | PROT_WRITE);
  held_->fetch_add(static_cast<int64_t>(bytes));
  // Freed pages go back to the kernel; their addresses are not reused (see the header).
  return std::shared_ptr<void>(p, [size, bytes, held = held_](void* q) {
    madvise(q, size, MADV_DONTNEED);
    held->fetch_sub(static_cast<int64_t>(bytes));
  });
}

void GuardedMemory::SetLimit(std::optional<int64_t> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = bytes;
}

void GuardedMemory::Zero(void* p, size_t bytes) {
  LUCID_CHECK(Contains(p, bytes), "GuardedMemory::Zero outside the guarded range");
  Access open(*this);
  std::memset(p, 0, bytes);
}

bool GuardedMemory::Contains(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const char* c = static_cast<const char*>(p);
  return c >= base_ && c + bytes <= base_ + used_;
}

void GuardedMemory::Protect(bool open) {
  if (used_ > 0) mprotect(base_, used_, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

GuardedMemory::Access::Access(GuardedMemory& m) : m_(m) {
  std::lock_guard<std::mutex> lock(m_.mu_);
  if (m_.open_++ == 0) m_.Protect(true);
}

GuardedMemory::Access::~Access() {
  std::lock_guard<std::mutex> lock(m_.mu_);
  if (--m_.open_ == 0) m_.Protect(false);
}

// The wrapped ops behind the argument checks and the Access scope.
class GuardedDeviceBackend::GuardedOps final : public Ops {
 public:
  GuardedOps(const Ops& inner, GuardedMemory& mem)
      : inner_(inner), mem_(mem), name_(std::string("guarded(") + inner.name() + ")") {}

  const char* name() const override { return name_.c_str(); }
  Device device() const override { return inner_.device(); }

  void Linear(const Tensor& x, const Weight& w, Tensor& y) const override {
    Dev("Linear", {{"x", &x}, {"y", &y}});
    Dev("Linear", w);
    Access a(mem_);
    inner_.Linear(x, w, y);
  }
  void LinearMany(const Tensor& x, std::span<const Weight* const> ws,
                  std::span<Tensor* const> ys) const override {
    Dev("LinearMany", {{"x", &x}});
    for (const Weight* w : ws) Dev("LinearMany", *w);
    for (const Tensor* y : ys) Dev("LinearMany", {{"ys", y}});
    Access a(mem_);
    inner_.LinearMany(x, ws, ys);
  }
  void LinearTransposed(const Tensor& x, const Weight& w, Tensor& y) const override {
    Dev("LinearTransposed", {{"x", &x}, {"y", &y}});
    Dev("LinearTransposed", w);
    Access a(mem_);
    inner_.LinearTransposed(x, w, y);
  }
  void Embedding(const Weight& table, std::span<const int32_t> ids, Tensor& out) const override {
    Dev("Embedding", table);
    Dev("Embedding", {{"out", &out}});
    Host("Embedding", "ids", ids);
    Access a(mem_);
    inner_.Embedding(table, ids, out);
  }
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) const override {
    Dev("RmsNorm", {{"x", &x}, {"weight", &weight}, {"y", &y}});
    Access a(mem_);
    inner_.RmsNorm(x, weight, eps, y);
  }
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 Tensor& y) const override {
    Dev("LayerNorm", {{"x", &x}, {"weight", &weight}, {"bias", &bias}, {"y", &y}});
    Access a(mem_);
    inner_.LayerNorm(x, weight, bias, eps, y);
  }
  void Rope(Tensor& x, int64_t heads, int64_t head_stride, int64_t offset, const RopeTable& table,
            std::span<const int64_t> positions, RopeStyle style) const override {
    Dev("Rope", {{"x", &x}});
    Host("Rope", "positions", positions);
    Access a(mem_);
    inner_.Rope(x, heads, head_stride, offset, table, positions, style);
  }
  void SwiGlu(const Tensor& gate, const Tensor& up, Tensor& out) const override {
    Dev("SwiGlu", {{"gate", &gate}, {"up", &up}, {"out", &out}});
    Access a(mem_);
    inner_.SwiGlu(gate, up, out);
  }
  void MlaAttention(const MlaAttentionArgs& m) const override {
    const char* op = "MlaAttention";
    Ptr(op, "q_latent", m.q_latent);
    Ptr(op, "q_rope", m.q_rope);
    Ptr(op, "out_latent", m.out_latent);
    Ptr(op, "selected_count", m.selected_count);
    if (m.selected != nullptr) Ptr(op, "selected", m.selected);
    if (m.dense_begin != nullptr) Ptr(op, "dense_begin", m.dense_begin);
    Rows(op, "kv", m.kv);
    Access a(mem_);
    inner_.MlaAttention(m);
  }
  void IndexerScores(const IndexerArgs& x) const override {
    const char* op = "IndexerScores";
    Ptr(op, "q", x.q);
    Ptr(op, "w", x.w);
    Ptr(op, "causal_len", x.causal_len);
    Ptr(op, "scores", x.scores);
    Rows(op, "keys", x.keys);
    Access a(mem_);
    inner_.IndexerScores(x);
  }
  void GqaAttention(const GqaAttentionArgs& g) const override {
    const char* op = "GqaAttention";
    Ptr(op, "q", g.q);
    Ptr(op, "count", g.count);
    Ptr(op, "out", g.out);
    if (g.begin != nullptr) Ptr(op, "begin", g.begin);
    Rows(op, "kv", g.kv);
    Access a(mem_);
    inner_.GqaAttention(g);
  }
  void TopK(const float* scores, int64_t n, int64_t k, int32_t* out) const override {
    Ptr("TopK", "scores", scores);
    Ptr("TopK", "out", out);
    Access a(mem_);
    inner_.TopK(scores, n, k, out);
  }
  void MoeRoute(const Tensor& logits, const Tensor& bias, int64_t n_group, int64_t topk_group,
                int64_t k, bool norm_topk_prob, float scaling, Tensor& idx,
                Tensor& weights) const override {
    Dev("MoeRoute", {{"logits", &logits}, {"bias", &bias}, {"idx", &idx}, {"weights", &weights}});
    Access a(mem_);
    inner_.MoeRoute(logits, bias, n_group, topk_group, k, norm_topk_prob, scaling, idx, weights);
  }
  void MoeExperts(const Tensor& x, std::span<const ExpertWeights> experts, const Tensor& idx,
                  const Tensor& weights, Tensor& out) const override {
    Dev("MoeExperts", {{"x", &x}, {"idx", &idx}, {"weights", &weights}, {"out", &out}});
    for (const ExpertWeights& e : experts)
      for (const Weight* w : {&e.gate, &e.up, &e.down}) Dev("MoeExperts", *w);
    Access a(mem_);
    inner_.MoeExperts(x, experts, idx, weights, out);
  }
  void MlaAbsorbQuery(const Tensor& q, int64_t heads, int64_t q_stride, int64_t nope_dim,
                      int64_t v_dim, const Weight& kv_b, Tensor& q_latent) const override {
    Dev("MlaAbsorbQuery", {{"q", &q}, {"q_latent", &q_latent}});
    Dev("MlaAbsorbQuery", kv_b);
    Access a(mem_);
    inner_.MlaAbsorbQuery(q, heads, q_stride, nope_dim, v_dim, kv_b, q_latent);
  }
  void MlaProjectOutput(const Tensor& latent, int64_t heads, int64_t nope_dim, int64_t v_dim,
                        const Weight& kv_b, Tensor& out) const override {
    Dev("MlaProjectOutput", {{"latent", &latent}, {"out", &out}});
    Dev("MlaProjectOutput", kv_b);
    Access a(mem_);
    inner_.MlaProjectOutput(latent, heads, nope_dim, v_dim, kv_b, out);
  }
  void Accumulate(Tensor& x, const Tensor& y) const override {
    Dev("Accumulate", {{"x", &x}, {"y", &y}});
    Access a(mem_);
    inner_.Accumulate(x, y);
  }
  void Scale(Tensor& x, float s) const override {
    Dev("Scale", {{"x", &x}});
    Access a(mem_);
    inner_.Scale(x, s);
  }
  void CopyColumns(const Tensor& x, int64_t groups, int64_t group_stride, int64_t offset,
                   int64_t width, Tensor& out) const override {
    Dev("CopyColumns", {{"x", &x}, {"out", &out}});
    Access a(mem_);
    inner_.CopyColumns(x, groups, group_stride, offset, width, out);
  }
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) const override {
    Dev("GatherRows", {{"x", &x}, {"out", &out}});
    Host("GatherRows", "rows", rows);
    Access a(mem_);
    inner_.GatherRows(x, rows, out);
  }
  void WriteKvRows(std::span<const Tensor* const> parts, const KvRowsOut& out,
                   std::span<const int64_t> pool_rows) const override {
    for (const Tensor* p : parts) Dev("WriteKvRows", {{"parts", p}});
    Ptr("WriteKvRows", "out.bytes", out.bytes);
    Host("WriteKvRows", "pool_rows", pool_rows);
    Access a(mem_);
    inner_.WriteKvRows(parts, out, pool_rows);
  }
  void TopKRows(const Tensor& scores, std::span<const int64_t> lengths, int64_t k, int32_t offset,
                Tensor& out) const override {
    Dev("TopKRows", {{"scores", &scores}, {"out", &out}});
    Host("TopKRows", "lengths", lengths);
    Access a(mem_);
    inner_.TopKRows(scores, lengths, k, offset, out);
  }
  void NonFiniteRows(const Tensor& x, Tensor& flags) const override {
    Dev("NonFiniteRows", {{"x", &x}, {"flags", &flags}});
    Access a(mem_);
    inner_.NonFiniteRows(x, flags);
  }
  void SampleRows(const Tensor& logits, std::span<const RowSampling> rows,
                  std::span<const LogitEdit> edits, Tensor& scratch, Tensor& tokens,
                  Tensor& logprobs, Tensor& top_ids) const override {
    Dev("SampleRows", {{"logits", &logits},
                       {"scratch", &scratch},
                       {"tokens", &tokens},
                       {"logprobs", &logprobs},
                       {"top_ids", &top_ids}});
    Host("SampleRows", "rows", rows);
    Host("SampleRows", "edits", edits);
    Access a(mem_);
    inner_.SampleRows(logits, rows, edits, scratch, tokens, logprobs, top_ids);
  }
  void ApplyTokenBitmask(Tensor& logits, const Tensor& bitmask) const override {
    Dev("ApplyTokenBitmask", {{"logits", &logits}, {"bitmask", &bitmask}});
    Access a(mem_);
    inner_.ApplyTokenBitmask(logits, bitmask);
  }
  void CopyFromHost(const void* src, void* dst, size_t bytes) const override {
    if (bytes == 0) return;
    if (!mem_.Contains(dst, bytes)) Breach("CopyFromHost: dst is not device memory");
    if (mem_.Contains(src)) Breach("CopyFromHost: src is device memory");
    Access a(mem_);
    std::memcpy(dst, src, bytes);
  }
  Status CopyToHost(const void* src, void* dst, size_t bytes) const override {
    if (bytes == 0) return OkStatus();
    if (!mem_.Contains(src, bytes)) Breach("CopyToHost: src is not device memory");
    if (mem_.Contains(dst)) Breach("CopyToHost: dst is device memory");
    Access a(mem_);
    std::memcpy(dst, src, bytes);
    return inner_.Synchronize();
  }
  Status Synchronize() const override { return inner_.Synchronize(); }

  std::vector<std::string> violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }

 private:
  using Access = GuardedMemory::Access;
  struct Arg {
    const char* name;
    const Tensor* t;
  };
  void Breach(std::string what) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& v : violations_)
      if (v == what) return;  // each breach once, however many calls repeat it
    violations_.push_back(std::move(what));
  }
  // Tensors without data (an absent bias or scale) are skipped.
  void Dev(const char* op, std::initializer_list<Arg> args) const {
    for (const Arg& a : args)
      if (a.t->raw() != nullptr && !mem_.Contains(a.t->raw()))
        Breach(std::string(op) + ": " + a.name + " is host memory");
  }
  void Dev(const char* op, const Weight& w) const {
    for (const Tensor* t : {&w.data, &w.scale, &w.scale2})
      if (t->raw() != nullptr && !mem_.Contains(t->raw()))
        Breach(std::string(op) + ": weight " + w.name + " is host memory");
  }
  void Ptr(const char* op, const char* name, const void* p) const {
    if (!mem_.Contains(p)) Breach(std::string(op) + ": " + name + " is host memory");
  }
  void Rows(const char* op, const char* name, const PagedRows& r) const {
    Ptr(op, (std::string(name) + " storage").c_str(),
        r.kind == KvRowKind::kF32 ? static_cast<const void*>(r.base) : r.bytes);
    if (!r.page_table.empty())
      Ptr(op, (std::string(name) + ".page_table").c_str(), r.page_table.data());
  }
  template <class T>
  void Host(const char* op, const char* name, std::span<const T> s) const {
    if (!s.empty() && mem_.Contains(s.data()))
      Breach(std::string(op) + ": " + name + " is device memory (ops/ops.h: host)");
  }

  const Ops& inner_;
  GuardedMemory& mem_;
  std::string name_;
  mutable std::mutex mu_;
  mutable std::vector<std::string> violations_;
};

GuardedDeviceBackend::GuardedDeviceBackend(const Ops& inner)
    : memory_(std::make_unique<GuardedMemory>()),
      workspace_(std::make_unique<Workspace>(*memory_)),
      ops_(std::make_unique<GuardedOps>(inner, *memory_)) {}

GuardedDeviceBackend::~GuardedDeviceBackend() = default;

std::string GuardedDeviceBackend::name() const { return std::string("guarded:") + ops_->name(); }

const Ops& GuardedDeviceBackend::ops() const { return *ops_; }

StatusOr<Tensor> GuardedDeviceBackend::UploadWeight(const Tensor& host) {
  if (!host.is_contiguous())
    return InvalidArgument("GuardedDeviceBackend: a strided weight view " +
                           ShapeToString(host.shape()));
  LUCID_ASSIGN_OR_RETURN(std::shared_ptr<void> mem, memory_->Allocate(host.nbytes()));
  void* p = mem.get();
  ops_->CopyFromHost(host.raw(), p, host.nbytes());
  return Tensor::Borrow(host.dtype(), host.shape(), p, std::move(mem));
}

StatusOr<Tensor> GuardedDeviceBackend::ReadableOnHost(const Tensor& t) {
  return CopyTensorToHost(*ops_, t);
}

std::vector<std::string> GuardedDeviceBackend::violations() const { return ops_->violations(); }

}  // namespace lucid
