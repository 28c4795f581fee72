#include "core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace lucid {

const char* DeviceName(Device d) {
  switch (d) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

namespace {

constexpr size_t kAlign = 64;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

class HostAllocatorImpl final : public Allocator {
 public:
  Device device() const override { return Device::kCpu; }
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    const size_t alloc = std::max(RoundUp(bytes), kAlign);
    void* p = std::aligned_alloc(kAlign, alloc);
    if (p == nullptr)
      return ResourceExhausted("out of host memory allocating " + std::to_string(alloc) + " bytes");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void Zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
};

}  // namespace

Allocator& HostAllocator() {
  static HostAllocatorImpl a;
  return a;
}

Workspace::Workspace(Allocator& parent, size_t initial_bytes) : parent_(parent) {
  if (initial_bytes > 0) LUCID_CHECK(Grow(initial_bytes).ok(), "Workspace: initial block");
}

Status Workspace::Grow(size_t at_least) {
  const size_t last = blocks_.empty() ? 0 : blocks_.back().size;
  const size_t size = RoundUp(std::max(at_least, last));  // never smaller than the last block
  StatusOr<std::shared_ptr<void>> mem = parent_.Allocate(size);
  if (!mem.ok())
    return mem.status().WithContext("step workspace (" + std::to_string(used_) +
                                    " bytes in use this step)");
  blocks_.push_back({*std::move(mem), size, 0});
  ++blocks_allocated_;
  return OkStatus();
}

StatusOr<std::shared_ptr<void>> Workspace::Allocate(size_t bytes) {
  const size_t n = std::max(RoundUp(bytes), kAlign);
  if (blocks_.empty() || blocks_.back().size - blocks_.back().offset < n)
    LUCID_RETURN_IF_ERROR(Grow(n));
  Block& b = blocks_.back();
  char* p = static_cast<char*>(b.mem.get()) + b.offset;
  b.offset += n;
  used_ += n;
  peak_ = std::max(peak_, used_);
  // Holds the block: the block lives while any of its allocations does (see Reset).
  if (open_scopes_.empty()) return std::shared_ptr<void>(b.mem, p);
  std::shared_ptr<std::atomic<int64_t>> held = open_scopes_.back();
  held->fetch_add(1);
  return std::shared_ptr<void>(p, [block = b.mem, held](void*) { held->fetch_sub(1); });
}

Workspace::Scope::Scope(Workspace& ws)
    : ws_(ws),
      blocks_(ws.blocks_.size()),
      offset_(ws.blocks_.empty() ? 0 : ws.blocks_.back().offset),
      used_(ws.used_),
      outer_peak_(ws.peak_),
      held_(std::make_shared<std::atomic<int64_t>>(0)) {
  ws_.open_scopes_.push_back(held_);
  ws_.peak_ = ws_.used_;  // from here to the end: this scope's most in use
}

Workspace::Scope::~Scope() {
  ws_.open_scopes_.pop_back();
  const size_t need = ws_.peak_ - used_;  // the scope's most bytes in use at once
  ws_.peak_ = std::max(outer_peak_, ws_.peak_);
  if (held_->load() != 0) {
    ++ws_.escaped_scopes_;
    // Its allocations count for the scope it is inside: that one cannot give them back either.
    if (!ws_.open_scopes_.empty()) ws_.open_scopes_.back()->fetch_add(1);
    return;
  }
  // Every allocation since the scope began is dead.
  ws_.used_ = used_;
  if (ws_.blocks_.size() == blocks_) {
    if (blocks_ > 0) ws_.blocks_.back().offset = offset_;  // filled again from there
    return;
  }
  // The scope grew the arena: the blocks that held only its allocations (those it took, and the
  // one it began at the start of) are freed for one block of its most in use, which the next
  // scope of its size fits in.
  const size_t keep = offset_ == 0 && blocks_ > 0 ? blocks_ - 1 : blocks_;
  ws_.blocks_.resize(keep);
  if (keep == blocks_ && keep > 0) ws_.blocks_.back().offset = offset_;
  (void)ws_.Grow(need);  // on failure the next Allocate retries and reports
}

void Workspace::Reset() {
  LUCID_CHECK(open_scopes_.empty(), "Workspace::Reset inside a Scope");
  bool escaped = false;
  for (const Block& b : blocks_) escaped = escaped || b.mem.use_count() > 1;
  if (blocks_.size() == 1 && !escaped) {
    blocks_[0].offset = 0;
  } else if (!blocks_.empty()) {
    // Several blocks (the last step outgrew them) or memory still held: one block of the last
    // step's most in use replaces them; held blocks stay alive through their holders only.
    blocks_.clear();
    if (peak_ > 0 && !Grow(peak_).ok()) blocks_.clear();  // the next Allocate retries, reports
  }
  used_ = 0;
  peak_ = 0;
}

}  // namespace lucid
