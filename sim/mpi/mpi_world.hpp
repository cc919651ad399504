// The simulator's Open MPI ranks (library safeamp_sim_mpi, linked by the safeamp tool and the tests; built with
// MPI when CMake finds it, otherwise it only says that MPI is not available).
#pragma once

#include "safeamp/sim/communicator.hpp"

namespace safeamp::sim {

/// True when this build has the Open MPI communicator.
[[nodiscard]] bool mpi_available() noexcept;
/// True when this process was started by mpirun/mpiexec (Open MPI's or PMIx's rank variables are set).
[[nodiscard]] bool launched_by_mpirun() noexcept;
/// MPI_COMM_WORLD as a communicator (MPI initialised on the first call, finalised at exit). Throws
/// safeamp::error when this build has no MPI.
[[nodiscard]] communicator& mpi_world();
/// Ends the whole job at once (MPI_Abort) after this rank failed, so no other rank waits forever in a
/// collective. Does nothing when MPI was not initialised.
void abort_job(int exit_code) noexcept;

}  // namespace safeamp::sim
