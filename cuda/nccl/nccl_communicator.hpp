// Data parallelism on GPUs through NCCL (library safeamp_cuda_nccl, built when the CUDA toolkit's NCCL is
// found; not installed). An nccl_communicator satisfies safeamp::device_rank_communicator: integer MAX, 64-bit
// MIN/MAX and an all-gather of 64-bit words in place on device memory, enqueued on the scaler's stream, so the
// step needs no host sync:
//
//   unscale (fused kernel: found_inf is an int32 in the scaler's device block)
//   -> agree_found_inf(comm, scaler): ncclAllReduce(int32, ncclMax) in place on that flag, same stream
//   -> clip, the predicated optimizer and update() read the agreed flag on the device.
//
// Gradients are reduced in fp32 by default (ncclAllReduce ncclSum, or ncclAvg: 1/N rounded to fp32). bf16,
// fp16 and fp8 gradients travel in their own format but are summed in fp32 (wire_sum.hpp: an all-to-all of
// the codes, a fixed rank-order fp32 sum per element, one rounding, an all-gather), never with NCCL's
// low-precision ncclSum, which rounds after every add (a bf16 ring sum of ones stops growing at 256). ncclAvg
// is refused for them: NCCL multiplies by T(1/N) rounded to T, a bias of +0.2% in bf16 at N = 3 and -25% in
// e4m3 at N = 384. Host-only header: nccl.h stays inside cuda/nccl/nccl_communicator.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/cuda/device_scaler.hpp"
#include "safeamp/scaling/communicator.hpp"
#include "wire_sum.hpp"

namespace safeamp::cuda {

enum class reduce_op : std::uint8_t { sum, avg };

/// Throws safeamp::error for a reduction safeamp refuses: an average of bf16, fp16 or fp8 gradients (ncclAvg's
/// rounded 1/N multiplier biases every gradient; reduce with sum, whose low-precision form accumulates in
/// fp32, then divide in fp32). Accepted: f32 sum or avg, and bf16, f16, f8_e4m3, f8_e5m2 sums (device_dtype,
/// dtype.hpp).
void check_gradient_reduction(device_dtype t, reduce_op op);

/// NCCL's ncclUniqueId as bytes: rank 0 makes it, every rank receives it (MPI_Bcast in the MPI bootstrap).
struct nccl_id {
  std::array<std::byte, 128> bytes{};
};
[[nodiscard]] nccl_id make_nccl_id();
/// The NCCL version this build links (e.g. 22809 for 2.28.9).
[[nodiscard]] int nccl_version();

class nccl_communicator {
 public:
  /// ncclCommInitRank(size, id, rank) on the current CUDA device (one GPU per rank); every collective is
  /// enqueued on `stream` (a cudaStream_t as void*; it must be the scaler's).
  nccl_communicator(int rank, int size, const nccl_id& id, void* stream);
  ~nccl_communicator();
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] void* stream() const noexcept { return stream_; }

  void max_i32_in_place(std::int32_t* device_value);
  void min_u64_in_place(std::uint64_t* device_value);
  void max_u64_in_place(std::uint64_t* device_value);
  /// ncclAllGather of one 64-bit word per rank: rank r's *device_mine lands at device_all[r] (size() words).
  void allgather_u64(const std::uint64_t* device_mine, std::uint64_t* device_all);
  /// Sums `elements` values of type `t` in place over the ranks (check_gradient_reduction first). fp32: one
  /// ncclAllReduce. bf16, f16, f8_e4m3, f8_e5m2: sent in `t`, summed in fp32 in rank order and rounded once to `t`
  /// (wire_sum.hpp), with a stream-ordered workspace of wire_workspace_bytes(elements, t, size()) bytes; the
  /// same bits on every rank and for any rank's chunking. Enqueued on stream(), no host sync.
  void reduce_gradients(void* device_data, std::size_t elements, device_dtype t, reduce_op op);

 private:
  void* comm_ = nullptr;  // ncclComm_t
  void* stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
};
static_assert(device_rank_communicator<nccl_communicator>);

/// Step 4 of a data-parallel step on the device scaler: the integer MAX of its found_inf over the ranks, in
/// place in its device block, enqueued on its stream after unscale() and before step(). No host sync.
void agree_found_inf(nccl_communicator& c, device_loss_scaler& scaler);

/// The every-k-steps state check (outside the step: it reads the scaler's last report, one host wait): the
/// MIN and MAX of scaler_consensus_hash over the ranks through device memory; when they differ, an all-gather
/// of the hashes and the safeamp::error of scaler_divergence_error naming the diverging ranks (the same text
/// on every rank).
void check_scaler_consensus(nccl_communicator& c, device_loss_scaler& scaler);

}  // namespace safeamp::cuda
