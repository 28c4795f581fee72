// The MPI communicator (OpenMPI from Debian) and how a process finds out it is one rank of many.
//
// Every collective is a nonblocking MPI call polled against a deadline (the communicator's
// timeout), on a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so a dead or stalled peer
// gives a Status within the bound instead of a hang or an abort (core/communicator.h). The
// reductions are all-gathers (all-to-alls for reduce-scatter) summed in rank order, so they are
// deterministic and identical on every rank.
// mpirun kills the whole job when one rank dies unless it is started with `--enable-recovery`
// (docs/PARALLEL.md); with it, the survivors see the failure through this communicator.
// Built without MPI (no libopenmpi-dev at configure time: LUCID_MPI undefined), MakeMpiCommunicator
// returns kUnimplemented saying so.
#pragma once

#include <chrono>
#include <memory>

#include "core/communicator.h"
#include "core/status.h"

namespace lucid {

// World size from the launcher's environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE); 1 when
// the process was not started by an MPI launcher. Reads no MPI state.
int LaunchedWorldSize();

// Initialises MPI (MPI_THREAD_SERIALIZED: collectives come from one thread at a time, not
// necessarily main's) once per process and returns the communicator over every rank. `timeout`
// bounds each collective; LUCID_COLLECTIVE_TIMEOUT_MS in the environment overrides it (tests use
// short bounds). MPI is finalised when the communicator is destroyed, unless a collective failed
// (a finalise would then wait for the dead peer; the process exits without it).
// Errors: kUnimplemented in a build without MPI; kUnavailable if MPI cannot start.
StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator(
    std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);

// Whether this build has the MPI communicator.
bool MpiCompiledIn();

}  // namespace lucid
