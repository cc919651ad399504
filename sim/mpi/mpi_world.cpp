// Open MPI behind safeamp::sim::communicator: integer MAX and 64-bit MIN/MAX with MPI_Allreduce (exact and
// order-free on integers), everything else as bytes with MPI_Allgather (floats are never reduced by MPI).
#include "mpi_world.hpp"

#include <climits>
#include <cstdlib>
#include <string>

#include "safeamp/error.hpp"

#if SAFEAMP_HAVE_MPI
#include <mpi.h>
#endif

namespace safeamp::sim {

bool launched_by_mpirun() noexcept {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

#if SAFEAMP_HAVE_MPI
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

class mpi_communicator final : public communicator {
 public:
  mpi_communicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) check(MPI_Init(nullptr, nullptr), "MPI_Init");
    // Errors come back as codes (and become safeamp::error) instead of aborting inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~mpi_communicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int size() const override { return size_; }
  std::int32_t max_i32(std::int32_t v) override {
    check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT32_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(MAX)");
    return v;
  }
  std::uint64_t min_u64(std::uint64_t v) override {
    check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce(MIN)");
    return v;
  }
  std::uint64_t max_u64(std::uint64_t v) override {
    check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(MAX)");
    return v;
  }
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    if (mine.size() > static_cast<std::size_t>(INT_MAX) ||
        all.size() != mine.size() * static_cast<std::size_t>(size_)) {
      throw error("MPI all-gather size", std::to_string(mine.size()) + " bytes per rank",
                  "at most 2^31 - 1 bytes per rank and an output of ranks x that");
    }
    check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(), static_cast<int>(mine.size()),
                        MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Allgather");
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

bool mpi_available() noexcept { return true; }

communicator& mpi_world() {
  static mpi_communicator world;
  return world;
}

void abort_job(int exit_code) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

#else

bool mpi_available() noexcept { return false; }

communicator& mpi_world() {
  throw error("mpirun", "used to start this safeamp",
              "a safeamp built with Open MPI (Debian: libopenmpi-dev; CMake found no MPI, or SAFEAMP_MPI=OFF)");
}

void abort_job(int) noexcept {}

#endif

}  // namespace safeamp::sim
