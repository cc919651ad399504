// Data parallelism on GPUs through NCCL (library safeamp_cuda_nccl, built when the CUDA toolkit's NCCL is
// found; not installed). An nccl_communicator satisfies safeamp::device_rank_communicator: integer MAX and
// 64-bit MIN/MAX in place on device memory, enqueued on the scaler's stream, so the step needs no host sync:
//
//   unscale (fused kernel: found_inf is an int32 in the scaler's device block)
//   -> agree_found_inf(comm, scaler): ncclAllReduce(int32, ncclMax) in place on that flag, same stream
//   -> clip, the predicated optimizer and update() read the agreed flag on the device.
//
// Gradients are reduced in fp32 with ncclSum by default (divide afterwards in fp32). ncclAvg is refused for
// bf16/fp16/fp8: NCCL implements it as a pre-multiplication by T(1/N) rounded to T, a bias of +0.2% in bf16 at
// N = 3 and -25% in e4m3 at N = 384. Host-only header: nccl.h stays inside cuda/nccl/nccl_communicator.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/cuda/device_scaler.hpp"
#include "safeamp/scaling/communicator.hpp"

namespace safeamp::cuda {

enum class wire_type : std::uint8_t { fp32, bf16, fp16, fp8_e4m3, fp8_e5m2 };
enum class reduce_op : std::uint8_t { sum, avg };

[[nodiscard]] std::string_view wire_type_name(wire_type t) noexcept;

/// Throws safeamp::error for a reduction safeamp refuses: ncclAvg on bf16, fp16 or fp8 (the rounded 1/N
/// multiplier biases every gradient), and fp8 (needs SM 90 and fp32 accumulation through an all-to-all, which
/// this path does not do). fp32 with sum or avg and bf16/fp16 sums are accepted.
void check_gradient_reduction(wire_type t, reduce_op op);

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
  /// Sums `elements` values of type `t` in place over the ranks (check_gradient_reduction first).
  void reduce_gradients(void* device_data, std::size_t elements, wire_type t, reduce_op op);

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
/// MIN and MAX of scaler_consensus_hash over the ranks through device memory; throws safeamp::error when they
/// differ.
void check_scaler_consensus(nccl_communicator& c, device_loss_scaler& scaler);

}  // namespace safeamp::cuda
