// Test support for kernels written as phases (cuda_block_phases.cuh): a block's `run` on the
// CPU, each phase on every thread in turn, in thread order or in reverse. On a GPU a phase's
// threads run in any interleaving, so what a block computes must not depend on the order; a
// thread that reads what another writes in the same phase (a missing barrier) reads the new value
// in one order and the old one in the other. The emulation tests run both orders.
#pragma once

#include <string>

namespace lucid::cuda {

enum class ThreadOrder { kForward, kReverse };
inline constexpr ThreadOrder kThreadOrders[] = {ThreadOrder::kForward, ThreadOrder::kReverse};

inline std::string OrderName(ThreadOrder o) {
  return o == ThreadOrder::kForward ? "threads in order" : "threads in reverse";
}

// Thread i of kThreads in `order`.
template <int kThreads>
int NthThread(ThreadOrder order, int i) {
  return order == ThreadOrder::kForward ? i : kThreads - 1 - i;
}

// run(phase): phase(tid) for every tid < kThreads in `order`.
template <int kThreads>
auto EveryThread(ThreadOrder order) {
  return [order](auto phase) {
    for (int i = 0; i < kThreads; ++i) phase(NthThread<kThreads>(order, i));
  };
}

}  // namespace lucid::cuda
