// The NCCL communicator: the collectives of core/communicator.h between GPUs, one rank per
// device, with NCCL (the CUDA toolkit's libnccl). Its unique id is made by rank 0 and handed to
// the others through a bootstrap communicator (MPI across processes, as TensorRT-LLM does; the
// single-process one for a world of one).
//
// Buffers are device memory on this rank's GPU (Communicator::device_buffers() is true); the
// calls run on the communicator's own stream and return once it has finished them, so the
// buffers are ready (or free to reuse) when a call returns.
// Failure, as the interface promises: the communicator is created non-blocking, and every call
// polls its stream and ncclCommGetAsyncError against the timeout; a peer that died or stalled
// aborts the communicator (ncclCommAbort) and fails the call with kUnavailable naming the
// collective, the rank and the bound; an NCCL or CUDA error comes back as kUnavailable with its
// text. After a failure every call returns the first error.
// Reductions: the sums are NCCL's (ring or tree: each element is reduced once and copied), so
// every rank gets the same bits, but the order of the additions is NCCL's, not rank order: the
// result may differ from the MPI communicator's in the last bits.
// Built only with the CUDA backend and NCCL found at configure time (LUCID_NCCL).
// Thread-safety: one thread at a time (as the interface).
#pragma once

#include <chrono>
#include <memory>

#include "core/communicator.h"
#include "core/status.h"

namespace lucid {

// Joins the NCCL world of `bootstrap.size()` ranks, this one being bootstrap.rank() on CUDA
// device `device`. Collective over `bootstrap` (every rank calls it). `timeout` bounds the
// initialisation and each later call.
// Errors: FailedPrecondition "no CUDA device: ..." on a machine without one; kInvalidArgument for
// a device index it does not have; kUnavailable when NCCL cannot start (or the bootstrap fails).
StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    Communicator& bootstrap, int device,
    std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

// "NCCL 2.28.9" (the library this build links).
std::string NcclVersion();

}  // namespace lucid
