// NCCL behind safeamp::device_rank_communicator (see nccl_communicator.hpp).
#include "nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

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

// The codes of a wire format as NCCL moves them: bytes (send/recv and all-gather are pure data movement).
std::size_t bytes_of(std::size_t elements, device_dtype t) {
  return elements * static_cast<std::size_t>(dtype_bytes(t));
}

}  // namespace

void check_gradient_reduction(device_dtype t, reduce_op op) {
  if (op == reduce_op::avg && t != device_dtype::f32) {
    throw error("NCCL reduction op", "ncclAvg on " + std::string(dtype_name(t)),
                "sum (fp32 accumulation for bf16, f16, f8_e4m3 and f8_e5m2) then a division in fp32, or f32 with "
                "sum or avg: ncclAvg multiplies by 1/N rounded to the data type (+0.2% in bf16 at N = 3), a bias on "
                "every gradient");
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

void nccl_communicator::allgather_u64(const std::uint64_t* mine, std::uint64_t* all) {
  check(ncclAllGather(mine, all, 1, ncclUint64, comm_of(comm_), stream_of(stream_)), "ncclAllGather(uint64)");
}

void nccl_communicator::reduce_gradients(void* data, std::size_t elements, device_dtype t, reduce_op op) {
  check_gradient_reduction(t, op);
  if (t == device_dtype::f32) {
    check(ncclAllReduce(data, data, elements, ncclFloat32, op == reduce_op::avg ? ncclAvg : ncclSum, comm_of(comm_),
                        stream_of(stream_)),
          "ncclAllReduce(fp32 gradients)");
    return;
  }
  // Low precision on the wire, fp32 accumulation (wire_sum.hpp). Rank r owns chunk r of the elements.
  auto* codes = static_cast<std::byte*>(data);
  const wire_chunk mine = wire_chunk_of(elements, size_, rank_);
  const std::size_t row = wire_chunk_capacity(elements, size_);  // codes per row of the receive buffer
  std::byte* received = nullptr;
  if (size_ > 1) {
    check(cudaMallocAsync(reinterpret_cast<void**>(&received), wire_workspace_bytes(elements, t, size_),
                          stream_of(stream_)),
          "cudaMallocAsync(wire reduction workspace)");
  }
  // One grouped exchange with every other rank j: send `out(j)`, receive `in(j)` (each a byte range; empty
  // ranges are skipped on both sides alike, since every rank computes the same chunks).
  struct bytes_at {
    std::byte* at;
    std::size_t count;
  };
  const auto exchange = [&](const auto& out, const auto& in, const char* what) {
    check(ncclGroupStart(), "ncclGroupStart");
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      const bytes_at o = out(j), i = in(j);
      if (o.count > 0) check(ncclSend(o.at, o.count, ncclUint8, j, comm_of(comm_), stream_of(stream_)), what);
      if (i.count > 0) check(ncclRecv(i.at, i.count, ncclUint8, j, comm_of(comm_), stream_of(stream_)), what);
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  };
  const auto chunk_of = [&](int j) {
    const wire_chunk c = wire_chunk_of(elements, size_, j);
    return bytes_at{codes + bytes_of(c.begin, t), bytes_of(c.count, t)};
  };
  const auto my_chunk = [&](int) { return chunk_of(rank_); };
  try {
    // 1. All-to-all: chunk j of this rank's codes to rank j; chunk r of rank j's into row j.
    if (size_ > 1) {
      exchange(
          chunk_of,
          [&](int j) {
            return bytes_at{received + bytes_of(static_cast<std::size_t>(j) * row, t), bytes_of(mine.count, t)};
          },
          "ncclSend/ncclRecv(wire codes)");
    }
    // 2. This rank's chunk summed over the ranks in rank order in fp32, rounded once, in place.
    check(static_cast<cudaError_t>(
              launch_wire_sum(t, codes + bytes_of(mine.begin, t), received, mine.count, row, size_, rank_, stream_)),
          "wire_sum kernel launch");
    // 3. All-gather of the reduced chunks (uneven sizes: grouped send/recv), each into its place.
    if (size_ > 1) exchange(my_chunk, chunk_of, "ncclSend/ncclRecv(reduced chunks)");
  } catch (...) {
    if (received != nullptr) (void)cudaFreeAsync(received, stream_of(stream_));
    throw;
  }
  if (received != nullptr)
    check(cudaFreeAsync(received, stream_of(stream_)), "cudaFreeAsync(wire reduction workspace)");
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
  const auto n = static_cast<std::size_t>(c.size());
  // Device words: [0] MIN, [1] MAX, [2] this rank's hash, [3, 3 + n) every rank's (on a mismatch).
  std::uint64_t* d = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&d), (3 + n) * sizeof(std::uint64_t), stream_of(c.stream())),
        "cudaMallocAsync");
  const std::uint64_t three[3] = {hash, hash, hash};
  std::uint64_t back[2] = {0, 0};
  std::vector<std::uint64_t> all(n, 0);
  try {
    check(cudaMemcpyAsync(d, three, sizeof three, cudaMemcpyHostToDevice, stream_of(c.stream())), "cudaMemcpyAsync");
    c.min_u64_in_place(d);
    c.max_u64_in_place(d + 1);
    check(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, stream_of(c.stream())), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream_of(c.stream())), "cudaStreamSynchronize");
    if (back[0] != back[1]) {  // every rank sees the same MIN and MAX, so every rank joins the all-gather
      c.allgather_u64(d + 2, d + 3);
      check(
          cudaMemcpyAsync(all.data(), d + 3, n * sizeof(std::uint64_t), cudaMemcpyDeviceToHost, stream_of(c.stream())),
          "cudaMemcpyAsync");
      check(cudaStreamSynchronize(stream_of(c.stream())), "cudaStreamSynchronize");
    }
  } catch (...) {
    (void)cudaFreeAsync(d, stream_of(c.stream()));
    throw;
  }
  (void)cudaFreeAsync(d, stream_of(c.stream()));
  if (back[0] != back[1]) throw scaler_divergence_error(all, last.step);
}

}  // namespace safeamp::cuda
