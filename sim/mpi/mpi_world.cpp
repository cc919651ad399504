// Open MPI behind safeamp::sim::communicator: integer MAX and 64-bit MIN/MAX with MPI_Allreduce (exact and
// order-free on integers), everything else as bytes with MPI_Allgather (floats are never reduced by MPI).
#include "mpi_world.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/quoted_input.hpp"

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

// Bytes per rank one MPI_Allgather moves (its counts are int, so at most 2^31 - 1). Tests lower it with
// SAFEAMP_TEST_MPI_CHUNK_BYTES (1 .. 2^30) to run the piecewise path on small runs.
constexpr std::size_t default_chunk_bytes = std::size_t{1} << 30;

std::size_t chunk_bytes_from_environment() {
  const char* text = std::getenv("SAFEAMP_TEST_MPI_CHUNK_BYTES");
  if (text == nullptr) return default_chunk_bytes;
  const std::string_view v(text);
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);  // digits only: no sign, no space
  if (ec != std::errc{} || end != v.data() + v.size() || n == 0 || n > default_chunk_bytes) {
    throw error("SAFEAMP_TEST_MPI_CHUNK_BYTES", quoted_input(v), "a whole number of bytes in 1 .. 2^30 (a test hook)");
  }
  return n;
}

// An MPI datatype freed when it goes out of scope (an error thrown between create and free leaked it).
class owned_type {
 public:
  owned_type() = default;
  owned_type(const owned_type&) = delete;
  owned_type& operator=(const owned_type&) = delete;
  ~owned_type() {
    if (t_ != MPI_DATATYPE_NULL) MPI_Type_free(&t_);
  }
  MPI_Datatype* out() { return &t_; }
  [[nodiscard]] MPI_Datatype get() const { return t_; }

 private:
  MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

class mpi_communicator final : public communicator {
 public:
  mpi_communicator() : chunk_bytes_(chunk_bytes_from_environment()) {
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
  // Rank r's bytes land at all[r n, (r + 1) n). Up to chunk_bytes_ per rank in one MPI_Allgather; longer buffers
  // (2^31 bytes and more: MPI's counts are int, and a 20-million-parameter model with 64 micro-batches on 2 ranks
  // was refused at its first step, after the reference had trained) go in pieces, each received through a datatype
  // of the piece's length whose extent is n, so the piece of rank r lands at r n + offset without a staging copy.
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    const std::size_t n = mine.size();
    if (all.size() / static_cast<std::size_t>(size_) != n || all.size() % static_cast<std::size_t>(size_) != 0) {
      throw error("MPI all-gather size",
                  std::to_string(all.size()) + " output bytes for " + std::to_string(n) + " bytes per rank",
                  "ranks x the bytes per rank");
    }
    if (n <= chunk_bytes_) {
      check(MPI_Allgather(mine.data(), static_cast<int>(n), MPI_BYTE, all.data(), static_cast<int>(n), MPI_BYTE,
                          MPI_COMM_WORLD),
            "MPI_Allgather");
      return;
    }
    for (std::size_t offset = 0; offset < n; offset += chunk_bytes_) {
      const int len = static_cast<int>(std::min(chunk_bytes_, n - offset));
      owned_type piece, strided;
      check(MPI_Type_contiguous(len, MPI_BYTE, piece.out()), "MPI_Type_contiguous");
      check(MPI_Type_create_resized(piece.get(), 0, static_cast<MPI_Aint>(n), strided.out()),
            "MPI_Type_create_resized");
      check(MPI_Type_commit(strided.out()), "MPI_Type_commit");
      check(MPI_Allgather(mine.data() + offset, len, MPI_BYTE, all.data() + offset, 1, strided.get(), MPI_COMM_WORLD),
            "MPI_Allgather (a piece)");
    }
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  std::size_t chunk_bytes_ = default_chunk_bytes;
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
