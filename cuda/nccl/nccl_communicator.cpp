// NCCL behind safeamp::device_rank_communicator (see nccl_communicator.hpp).
#include "nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "safeamp/error.hpp"

namespace safeamp::cuda {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(nccl_id::bytes), "ncclUniqueId is NCCL_UNIQUE_ID_BYTES (128) bytes");

void check(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  throw error(std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(rc) + " (" + ncclGetLastError(nullptr) +
              ")");
}

void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  throw error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
}

ncclComm_t comm_of(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }

ncclDataType_t nccl_type(wire_type t) {
  switch (t) {
    case wire_type::fp32:
      return ncclFloat32;
    case wire_type::bf16:
      return ncclBfloat16;
    case wire_type::fp16:
      return ncclFloat16;
    case wire_type::fp8_e4m3:
    case wire_type::fp8_e5m2:
      break;
  }
  throw error("NCCL gradient type", std::string(wire_type_name(t)), "fp32, bf16 or fp16");
}

}  // namespace

std::string_view wire_type_name(wire_type t) noexcept {
  switch (t) {
    case wire_type::fp32:
      return "fp32";
    case wire_type::bf16:
      return "bf16";
    case wire_type::fp16:
      return "fp16";
    case wire_type::fp8_e4m3:
      return "e4m3";
    case wire_type::fp8_e5m2:
      return "e5m2";
  }
  return "?";
}

void check_gradient_reduction(wire_type t, reduce_op op) {
  if (t == wire_type::fp8_e4m3 || t == wire_type::fp8_e5m2) {
    throw error("NCCL gradient type", std::string(wire_type_name(t)),
                "fp32 (default), bf16 or fp16: fp8 gradients need fp32 accumulation (an all-to-all then a local fp32 "
                "sum), not an fp8 ncclAllReduce that rounds every add");
  }
  if (op == reduce_op::avg && t != wire_type::fp32) {
    throw error("NCCL reduction op", "ncclAvg on " + std::string(wire_type_name(t)),
                "ncclSum then a division in fp32: ncclAvg multiplies by 1/N rounded to the data type (+0.2% in bf16 "
                "at N = 3), a bias on every gradient");
  }
}

nccl_id make_nccl_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  nccl_id out;
  std::memcpy(out.bytes.data(), &id, sizeof id);
  return out;
}

int nccl_version() {
  int v = 0;
  check(ncclGetVersion(&v), "ncclGetVersion");
  return v;
}

nccl_communicator::nccl_communicator(int rank, int size, const nccl_id& id, void* stream)
    : stream_(stream), rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw error("NCCL rank", std::to_string(rank) + " of " + std::to_string(size), "0 <= rank < size, size >= 1");
  }
  ncclUniqueId raw;
  std::memcpy(&raw, id.bytes.data(), sizeof raw);
  ncclComm_t c = nullptr;
  check(ncclCommInitRank(&c, size, raw, rank), "ncclCommInitRank");
  comm_ = c;
}

nccl_communicator::~nccl_communicator() {
  if (comm_ != nullptr) (void)ncclCommDestroy(comm_of(comm_));
}

void nccl_communicator::max_i32_in_place(std::int32_t* v) {
  check(ncclAllReduce(v, v, 1, ncclInt32, ncclMax, comm_of(comm_), stream_of(stream_)), "ncclAllReduce(int32, max)");
}
void nccl_communicator::min_u64_in_place(std::uint64_t* v) {
  check(ncclAllReduce(v, v, 1, ncclUint64, ncclMin, comm_of(comm_), stream_of(stream_)), "ncclAllReduce(uint64, min)");
}
void nccl_communicator::max_u64_in_place(std::uint64_t* v) {
  check(ncclAllReduce(v, v, 1, ncclUint64, ncclMax, comm_of(comm_), stream_of(stream_)), "ncclAllReduce(uint64, max)");
}

void nccl_communicator::reduce_gradients(void* data, std::size_t elements, wire_type t, reduce_op op) {
  check_gradient_reduction(t, op);
  check(ncclAllReduce(data, data, elements, nccl_type(t), op == reduce_op::avg ? ncclAvg : ncclSum, comm_of(comm_),
                      stream_of(stream_)),
        "ncclAllReduce(gradients)");
}

void agree_found_inf(nccl_communicator& c, device_loss_scaler& scaler) {
  if (c.stream() != scaler.memory().stream()) {
    throw error("agree_found_inf stream", "the NCCL communicator's stream differs from the scaler's",
                "one stream for both, so the all-reduce runs after the unscale kernel and before the step");
  }
  scaler_block* block = scaler.block_in_memory();
  if (block == nullptr) throw error("agree_found_inf: the device scaler has no memory yet (construct it first)");
  c.max_i32_in_place(&block->found_inf);
}

void check_scaler_consensus(nccl_communicator& c, device_loss_scaler& scaler) {
  const step_report last = scaler.last_report();  // one host wait, outside the step
  const std::uint64_t hash = scaler_consensus_hash(last);
  std::uint64_t* d = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&d), 2 * sizeof(std::uint64_t), stream_of(c.stream())),
        "cudaMallocAsync");
  const std::uint64_t both[2] = {hash, hash};
  std::uint64_t back[2] = {0, 0};
  try {
    check(cudaMemcpyAsync(d, both, sizeof both, cudaMemcpyHostToDevice, stream_of(c.stream())), "cudaMemcpyAsync");
    c.min_u64_in_place(d);
    c.max_u64_in_place(d + 1);
    check(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, stream_of(c.stream())), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream_of(c.stream())), "cudaStreamSynchronize");
  } catch (...) {
    (void)cudaFreeAsync(d, stream_of(c.stream()));
    throw;
  }
  (void)cudaFreeAsync(d, stream_of(c.stream()));
  if (back[0] != back[1]) {
    throw error("data parallel (NCCL): the loss-scaler state or skip decision diverged across ranks after step " +
                std::to_string(last.step) + " (MIN and MAX of the state hash differ; rank " + std::to_string(c.rank()) +
                " holds " + std::to_string(hash) + ")");
  }
}

}  // namespace safeamp::cuda
