// A peer's death gives a Status, not a hang: rank 1 exits in the middle of the run; rank 0's
// next all-reduce must fail with kUnavailable within the communicator's bound (plus slack for
// the loaded machine). Run by ctest under `mpirun --enable-recovery -np 2` (without
// --enable-recovery mpirun kills every rank when one dies); passes when rank 0 prints
// "peer-death: ok".
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "dist/mpi_communicator.h"

int main() {
  using namespace std::chrono;
  constexpr milliseconds kTimeout{1500};
  constexpr milliseconds kBound{6000};  // the timeout plus slack for a loaded machine
  auto made = lucid::MakeMpiCommunicator(kTimeout);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 1;
  }
  lucid::Communicator& comm = **made;
  if (comm.size() != 2) {
    std::fprintf(stderr, "peer-death: needs exactly 2 ranks, got %d\n", comm.size());
    return 1;
  }
  float v = 1.0f;
  if (!comm.AllReduceSum(&v, 1).ok() || v != 2.0f) {
    std::fprintf(stderr, "peer-death: the first all-reduce (both ranks alive) failed\n");
    return 1;
  }
  if (comm.rank() == 1) _exit(0);  // dies without finalizing, as a crashed worker would
  const auto start = steady_clock::now();
  const lucid::Status s = comm.AllReduceSum(&v, 1);
  const auto took = duration_cast<milliseconds>(steady_clock::now() - start);
  if (s.ok()) {
    std::fprintf(stderr, "peer-death: the all-reduce with a dead peer returned OK\n");
    return 1;
  }
  if (s.code() != lucid::StatusCode::kUnavailable || took > kBound) {
    std::fprintf(stderr, "peer-death: got %s after %lld ms (want Unavailable within %lld ms)\n",
                 s.ToString().c_str(), static_cast<long long>(took.count()),
                 static_cast<long long>(kBound.count()));
    return 1;
  }
  // Broken stays broken: the next call fails at once.
  const lucid::Status again = comm.Barrier();
  if (again.ok()) {
    std::fprintf(stderr, "peer-death: a call after the failure returned OK\n");
    return 1;
  }
  std::printf("peer-death: ok after %lld ms: %s\n", static_cast<long long>(took.count()),
              s.ToString().c_str());
  std::fflush(stdout);
  _exit(0);
}
