// Devices, allocators and the per-step workspace.
//
// Every Tensor carries the Device its bytes live on (core/tensor.h); an Allocator hands out bytes
// of one device. The host allocator gives 64-byte aligned host memory; a device backend
// (backends/backend.h) gives its own (device memory for weights, the KV pool, step outputs).
// A Workspace is an arena over another allocator for the activations of one step: a model resets
// it at the start of each forward, and once it has seen the largest step it hands out memory
// without calling its parent again (no malloc per op, which a device cannot afford).
// Thread-safety: HostAllocator() is thread-safe; a Workspace belongs to one thread (the engine's).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"

namespace lucid {

enum class Device : uint8_t { kCpu, kCuda };
const char* DeviceName(Device d);  // "cpu", "cuda"

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // `bytes` bytes of uninitialised memory of device(), aligned to 64 bytes and usable up to the
  // next multiple of 64, freed when the last copy of the returned pointer goes. ResourceExhausted
  // (naming the size) when there is none. A zero-byte request returns a valid (small) allocation.
  virtual StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) = 0;
  // Sets `bytes` bytes at `p` (memory of this allocator's device) to zero.
  virtual void Zero(void* p, size_t bytes) = 0;
  // The bytes requested from this allocator and not yet freed, where it counts them (a device
  // allocator: what `serve` compares with the memory plan); nullopt where it does not (the host
  // allocator, a Workspace).
  virtual std::optional<int64_t> held_bytes() const { return std::nullopt; }
};

// 64-byte aligned host memory (std::aligned_alloc); the process-wide instance.
Allocator& HostAllocator();

// An arena for one step's activations. Allocate bumps a pointer inside a block taken from the
// parent; a step larger than the blocks makes another block. Reset (at the start of a step) makes
// the memory reusable: when the last step needed several blocks they are replaced by one block as
// large as the most that step had in use, so a step no larger than one already seen takes no
// memory from the parent. Memory still referenced at Reset (a tensor that outlived its step) is
// never handed out again: its block is left to its holders and a fresh one is taken, so an escaped
// tensor stays valid, at the cost of one parent allocation. A Scope (one layer of a step) gives its
// memory back when it ends: what was handed out inside it is handed out again after it, so a step
// needs its largest layer's activations, not the sum of its layers'. Only when every allocation
// made inside it has been dropped; a tensor that outlives its scope keeps the scope's memory taken
// until Reset (escaped_scopes() counts such scopes). On a device, memory handed out again is
// written by ops queued after the ops that used it, on the same stream. A scope that outgrew the
// arena frees the blocks only it used for one block of its size (a parent free waits for the work
// queued on them: Backend::allocator).
class Workspace final : public Allocator {
 public:
  explicit Workspace(Allocator& parent, size_t initial_bytes = 0);
  Device device() const override { return parent_.device(); }
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override;
  void Zero(void* p, size_t bytes) override { parent_.Zero(p, bytes); }

  // Requires no Scope open.
  void Reset();
  // Blocks taken from the parent since construction (for tests and `bench`).
  int64_t blocks_allocated() const { return blocks_allocated_; }
  // Bytes handed out since the last Reset and not given back by a Scope.
  size_t used() const { return used_; }
  // The most bytes in use at once since the last Reset.
  size_t peak() const { return peak_; }
  // Scopes that ended with an allocation still held, since construction.
  int64_t escaped_scopes() const { return escaped_scopes_; }

  // Scopes nest; each ends before the one it is inside (they are stack objects of one thread).
  class Scope {
   public:
    explicit Scope(Workspace& ws);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Workspace& ws_;
    size_t blocks_, offset_, used_;  // where the arena stood when the scope began
    size_t outer_peak_;
    std::shared_ptr<std::atomic<int64_t>> held_;  // allocations made inside and not yet dropped
  };

 private:
  struct Block {
    std::shared_ptr<void> mem;
    size_t size = 0, offset = 0;
  };
  Status Grow(size_t at_least);

  Allocator& parent_;
  std::vector<Block> blocks_;  // the last one is being filled
  size_t used_ = 0, peak_ = 0;
  int64_t blocks_allocated_ = 0, escaped_scopes_ = 0;
  // The innermost open Scope's count (null: none open).
  std::vector<std::shared_ptr<std::atomic<int64_t>>> open_scopes_;
};

}  // namespace lucid
