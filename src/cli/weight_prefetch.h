// Weight prefetch with visible progress, for `lucid serve` start-up.
//
// Reads one byte of every page of every tensor of an open checkpoint (Checkpoint::Prefetch), so
// the weights are resident before the first request instead of faulting in under it; when the
// model is loaded from the same Checkpoint (LoadModel(ckpt, ...)) the pages are also mapped in the
// mappings the model reads. Progress: on a terminal (stderr is a tty) a one-line bar redrawn in
// place with bytes, tensors and ETA; otherwise a log line every `log_every` (and at the end).
// Cancellation: returns Cancelled between tensors once `*cancel` becomes true.
// Thread-safety: call from one thread.
#pragma once

#include <atomic>
#include <chrono>

#include "core/status.h"
#include "formats/safetensors.h"

namespace lucid::cli {

Status PrefetchWeights(const Checkpoint& ckpt, const std::atomic<bool>* cancel,
                       std::chrono::seconds log_every = std::chrono::seconds(5));

}  // namespace lucid::cli
