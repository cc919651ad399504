// The NCCL data-parallel step on real GPUs, one rank per GPU: the fused unscale-and-check writes the scaler's
// int32 found_inf, ncclAllReduce MAX agrees on it on the same stream, and every rank skips or applies together,
// with the scale updated on the device. Without mpirun it runs one rank (scripts/gpu-check); under mpirun
// (built with MPI) rank 0's ncclUniqueId is broadcast with MPI_Bcast and rank r uses GPU r. Without a GPU it
// exits with CTest's skip code 77.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "device_util.hpp"
#include "nccl_communicator.hpp"
#include "safeamp/cuda/device.hpp"

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
}  // namespace

int main() {
  if (device_count() == 0) {
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
    if (size > device_count()) {
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
    nccl_communicator comm(rank, size, id, nullptr);
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
