// The NCCL data-parallel step on real GPUs, one rank per GPU: the fused unscale-and-check writes the scaler's
// int32 found_inf, ncclAllReduce MAX agrees on it on the same stream, and every rank skips or applies together,
// with the scale updated on the device. Without mpirun it runs one rank (scripts/gpu-check); under mpirun
// (built with MPI) rank 0's ncclUniqueId is broadcast with MPI_Bcast and rank r uses GPU r. Without a GPU it
// exits with CTest's skip code 77. Also: the wire_sum kernel against its CPU reference (five ranks' codes laid out
// on one GPU), and the bf16 gradient reduction with fp32 accumulation over the job's ranks against the same
// reference.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "device_util.hpp"
#include "nccl_communicator.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/format/round.hpp"
#include "wire_sum.hpp"

#if SAFEAMP_HAVE_MPI
#include <mpi.h>
#endif

using namespace safeamp;
using namespace safeamp::cuda;

namespace {
int failures = 0;
void expect(bool ok, const char* what, int rank) {
  std::printf("rank %d: %s: %s\n", rank, ok ? "ok" : "FAILED", what);
  if (!ok) ++failures;
}
// Rank r's bf16 contribution to element e of the reduction check: finite codes with exponents spread over
// 2^-20..2^20 and both signs, a pure function of (r, e) so every rank knows every rank's codes.
std::uint16_t contribution(int r, std::size_t e) {
  std::uint32_t x = static_cast<std::uint32_t>(e) * 2654435761u ^ static_cast<std::uint32_t>(r + 1) * 40503u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  const std::uint32_t exponent = 107u + (x % 41u);  // bias 127: 2^-20 .. 2^20
  return static_cast<std::uint16_t>(((x >> 8) & 0x8000u) | (exponent << 7) | ((x >> 16) & 0x7Fu));
}

std::vector<std::uint32_t> widen(const std::vector<std::uint16_t>& v) { return {v.begin(), v.end()}; }
}  // namespace

int main() {
  int devices = 0;
  try {
    devices = device_count();
  } catch (const std::exception& e) {  // a GPU the runtime cannot use (an old driver): a failure, not a skip
    std::fprintf(stderr, "FAILED: the GPU cannot be used: %s\n", e.what());
    return 1;
  }
  if (devices == 0) {
    std::printf("SKIPPED: no CUDA device is present; the NCCL data-parallel check needs a GPU per rank.\n");
    return ctest_skip_code;
  }
  int rank = 0, size = 1;
  nccl_id id;
#if SAFEAMP_HAVE_MPI
  const bool under_mpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  if (under_mpi) {
    MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > devices) {
      if (rank == 0) std::printf("SKIPPED: %d ranks need %d GPUs (one per rank)\n", size, size);
      MPI_Finalize();
      return ctest_skip_code;
    }
    if (rank == 0) id = make_nccl_id();
    MPI_Bcast(id.bytes.data(), static_cast<int>(id.bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  } else {
    id = make_nccl_id();
  }
#else
  id = make_nccl_id();
#endif
  if (cudaSetDevice(rank) != cudaSuccess) {
    std::printf("rank %d: cudaSetDevice failed\n", rank);
    return 1;
  }
  std::printf("rank %d of %d: NCCL %d\n", rank, size, nccl_version());
  {
    // The kernel alone, on this GPU: rank 2 of 5 sums its chunk (its own codes) with the rows received from
    // the other four; row 2 of `received` holds NaN codes the kernel must not read.
    constexpr int ranks = 5, me = 2;
    constexpr std::size_t count = 4099;
    std::vector<std::uint16_t> all(ranks * count), rows(ranks * count, 0x7FC1);
    for (int r = 0; r < ranks; ++r) {
      for (std::size_t e = 0; e < count; ++e) {
        all[static_cast<std::size_t>(r) * count + e] = contribution(r, e);
        if (r != me) rows[static_cast<std::size_t>(r) * count + e] = contribution(r, e);
      }
    }
    testing::device_array<std::uint16_t> chunk(
        std::vector<std::uint16_t>(all.begin() + me * count, all.begin() + (me + 1) * count));
    testing::device_array<std::uint16_t> received(rows);
    const int rc = launch_wire_sum(device_dtype::bf16, chunk.data(), received.data(), count, count, ranks, me, nullptr);
    const std::vector<std::uint32_t> expected = wire_sum_reference(device_dtype::bf16, widen(all), ranks);
    expect(rc == 0 && cudaDeviceSynchronize() == cudaSuccess && widen(chunk.download()) == expected,
           "the wire_sum kernel gives its CPU reference's codes (5 ranks, 4099 bf16 elements)", rank);
  }
  {
    nccl_communicator comm(rank, size, id, nullptr);
    {  // bf16 gradients over the job's ranks, summed in fp32: every rank gets the reference's codes.
      constexpr std::size_t count = 1037;  // not a multiple of the rank count: uneven chunks
      std::vector<std::uint16_t> mine(count), every(static_cast<std::size_t>(size) * count);
      for (int r = 0; r < size; ++r) {
        for (std::size_t e = 0; e < count; ++e) every[static_cast<std::size_t>(r) * count + e] = contribution(r, e);
      }
      for (std::size_t e = 0; e < count; ++e) mine[e] = contribution(rank, e);
      testing::device_array<std::uint16_t> grads(mine);
      comm.reduce_gradients(grads.data(), count, device_dtype::bf16, reduce_op::sum);
      expect(cudaStreamSynchronize(nullptr) == cudaSuccess &&
                 widen(grads.download()) == wire_sum_reference(device_dtype::bf16, widen(every), size),
             "bf16 gradients reduced with fp32 accumulation: the CPU reference's codes", rank);
    }
    device_loss_scaler scaler(scaler_config{.init_scale = 1024.0f, .growth_interval = 100}, device_memory(nullptr));
    testing::device_array<float> g(4);
    for (int step = 0; step < 3; ++step) {
      // Scaled gradients 1024 * {1, -2, 0.5, 4}; at step 1 the last rank alone holds an inf.
      std::vector<float> host = {1024.0f, -2048.0f, 512.0f, 4096.0f};
      if (step == 1 && rank == size - 1) host[2] = 1.0f / 0.0f;
      g.upload(host);
      scaler.unscale(tensor_span{g.data(), 4});
      agree_found_inf(comm, scaler);  // int32 MAX on the scaler's device flag, same stream
      scaler.step([] {});             // a real trainer enqueues its optimizer here, predicated on the agreed flag
      scaler.update();
    }
    check_scaler_consensus(comm, scaler);
    const scaler_stats s = scaler.stats();
    expect(s.skipped_steps == 1 && s.applied_steps == 2, "the overflow of one rank skipped step 1 on every rank", rank);
    // Hand trace: 1024, then the overflow at step 1 backs off once: 512.
    expect(scaler.scale() == 512.0f, "the scale backed off once on the device (1024 -> 512)", rank);
    // Step 2 ran at scale 512: 1024 * {1, -2, 0.5, 4} / 512.
    expect(g.download() == std::vector<float>{2.0f, -4.0f, 1.0f, 8.0f}, "step 2 unscaled by 512", rank);
  }
#if SAFEAMP_HAVE_MPI
  if (under_mpi) MPI_Finalize();
#endif
  return failures == 0 ? 0 : 1;
}
