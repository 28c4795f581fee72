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
  LUCID_ASSIGN_OR_RETURN(std::shared_ptr<void> mem, parent_.Allocate(size));
  blocks_.push_back({std::move(mem), size, 0});
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
  // Aliases the block: the block lives while any of its allocations does (see Reset).
  return std::shared_ptr<void>(b.mem, p);
}

void Workspace::Reset() {
  bool escaped = false;
  for (const Block& b : blocks_) escaped = escaped || b.mem.use_count() > 1;
  if (blocks_.size() == 1 && !escaped) {
    blocks_[0].offset = 0;
  } else if (!blocks_.empty()) {
    // Several blocks (the last step outgrew them) or memory still held: one block of the last
    // step's total replaces them; held blocks stay alive through their holders only.
    size_t total = 0;
    for (const Block& b : blocks_) total += b.size;
    blocks_.clear();
    if (!Grow(total).ok()) blocks_.clear();  // the next Allocate retries and reports
  }
  used_ = 0;
}

}  // namespace lucid
