// Weight prefetch with visible progress, for `lucid serve` start-up.
//
// Opens the checkpoint of a model directory (memory-mapped, no copy) and reads one byte of every
// page of every tensor, so the weights are resident before the first request instead of faulting
// in under it. Progress: on a terminal (stderr is a tty) a one-line bar redrawn in place with
// bytes, tensors and ETA; otherwise a log line every `log_every` (and at the end).
// Cancellation: returns Cancelled between tensors once `*cancel` becomes true.
// Thread-safety: call from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "core/status.h"

namespace lucid::cli {

Status PrefetchWeights(const std::string& model_dir, const std::atomic<bool>* cancel,
                       std::chrono::seconds log_every = std::chrono::seconds(5));

}  // namespace lucid::cli
