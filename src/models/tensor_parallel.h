// The collective points of a tensor-parallel forward pass: the few places where a model's ranks
// exchange activations (models/deepseek_v3_shard.h says what each rank holds).
//
// A model holds one TpCollectives over the communicator it was loaded with (ModelLoadOptions);
// with none, or a group of one, every call is a no-op and the model runs as a single process.
// Errors are sticky: the first failed collective is kept, later calls do nothing, and the model's
// Forward returns status() at its end (every rank leaves the step with the error; a dead peer is
// reported within the communicator's timeout).
// Activations are host tensors (the CPU backend's): the communicator reads and writes their bytes.
// Ownership: borrows the communicator, which must outlive it. Thread-safety: the engine thread.
#pragma once

#include <cstdint>
#include <span>

#include "core/communicator.h"
#include "core/status.h"
#include "core/tensor.h"

namespace lucid {

class TpCollectives {
 public:
  explicit TpCollectives(Communicator* comm = nullptr) : comm_(comm) {}

  int rank() const { return comm_ ? comm_->rank() : 0; }
  int size() const { return comm_ ? comm_->size() : 1; }
  bool active() const { return size() > 1; }
  // The first error of a collective since the last ClearStatus().
  const Status& status() const { return status_; }
  void ClearStatus() { status_ = OkStatus(); }

  // t (f32, contiguous) becomes the sum over ranks of every rank's t (identical on every rank).
  void AllReduceSum(Tensor& t);
  // full [n, size() * local.size(1)] receives every rank's local [n, w] side by side: columns
  // [r * w, (r + 1) * w) from rank r (lm_head's vocabulary shards).
  void GatherColumns(const Tensor& local, Tensor& full);
  // Checks that every rank holds the same bytes in t (what the router or the indexer chose);
  // Internal naming `what` on the first rank that differs. For tests and
  // LUCID_TP_CHECK_REPLICATED; one all-gather of t.
  void CheckReplicated(const Tensor& t, const char* what);

 private:
  void Keep(const Status& s) {
    if (status_.ok() && !s.ok()) status_ = s;
  }

  Communicator* comm_;
  Status status_;
};

}  // namespace lucid
