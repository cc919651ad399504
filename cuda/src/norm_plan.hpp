// The global norm's fixed partition and its launch size. A buffer's sum of squares is cut into parts by its element
// count alone, and each part's lanes meet in a fixed tree, so the norm's bits are the same on every run and every GPU
// (replicated data-parallel ranks clip by the same factor; a run resumed on another card reproduces). Only the number
// of blocks that work through the parts comes from the device (its SM count, cached per device). Host-only and free
// of CUDA, so the partition, the launch size and the CPU reference of the summation order are tested on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "safeamp/cuda/amp_ops.hpp"

namespace safeamp::cuda::detail {

/// Lanes of one part (the threads of a block); their 256 sums meet in a fixed tree.
inline constexpr unsigned norm_threads = 256;
/// Elements a lane sums at least before its sum meets the others' (while a buffer has fewer than the most parts).
inline constexpr std::uint64_t norm_min_elements_per_lane = 16;
/// The most parts of one buffer (amp_ops.hpp's norm_scratch_per_buffer: one partial sum each).
inline constexpr std::uint64_t norm_max_parts = norm_scratch_per_buffer;
static_assert((norm_threads & (norm_threads - 1)) == 0, "the lane tree halves the lanes down to one");
static_assert(max_tensors_per_launch * norm_max_parts < (std::uint64_t{1} << 32), "a group's parts fit 32 bits");

/// Parts of a buffer of `elements` elements: ceil(elements / (256 lanes x 16)), at least 1, at most 1024. Lane j of
/// part p of P sums elements p * 256 + j + k * 256 P (k = 0, 1, ...) in that order.
[[nodiscard]] constexpr std::uint64_t norm_parts(std::uint64_t elements) noexcept {
  constexpr std::uint64_t per_part = norm_threads * norm_min_elements_per_lane;
  const std::uint64_t parts = elements / per_part + (elements % per_part != 0 ? 1 : 0);
  return std::clamp<std::uint64_t>(parts, 1, norm_max_parts);
}

/// What sizes a launch on the current device (cudaDevAttrMultiProcessorCount, cudaDevAttrMaxThreadsPerMultiProcessor).
struct device_geometry {
  int multiprocessors = 0;
  int max_threads_per_multiprocessor = 0;

  friend constexpr bool operator==(const device_geometry&, const device_geometry&) = default;
};

/// Blocks of 256 threads for a launch over `total_parts` parts: as many as the device holds at once (multiprocessors
/// x resident blocks of 256 threads), but no more than there are parts, and at least one. The result does not depend
/// on it: a block works through parts b, b + blocks, ... and each part's sum is the same whichever block makes it.
[[nodiscard]] constexpr unsigned norm_blocks(std::uint64_t total_parts, device_geometry g) noexcept {
  const std::uint64_t per_multiprocessor = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::max(g.max_threads_per_multiprocessor, 0)) / norm_threads);
  const std::uint64_t resident = static_cast<std::uint64_t>(std::max(g.multiprocessors, 1)) * per_multiprocessor;
  return static_cast<unsigned>(std::max<std::uint64_t>(1, std::min(total_parts, resident)));
}

/// The current device's geometry, queried once per device and cached (device.cpp). Throws cuda_error.
[[nodiscard]] device_geometry current_device_geometry();

/// global_norm_and_clip with the launch sized for `geometry` instead of the current device's: tests force a few
/// blocks to check that the norm's bits do not depend on the launch (amp_kernels.cu).
void global_norm_and_clip_on(std::span<const gradient_span> buffers, double max_norm, double* scratch,
                             scaler_block* state, void* stream, device_geometry geometry);

/// Part `part` of `parts` of `count` values (term(i) gives value i) summed in the kernels' order: lane j (of 256) adds
/// values part * 256 + j + k * 256 parts, k = 0, 1, ..., in order from 0; then the lane sums meet pairwise,
/// s[j] += s[j + half] for half = 128, 64, ..., 1. Every sum rounded to double on its own.
template <class Term>
[[nodiscard]] double norm_lane_tree_sum(std::uint64_t count, std::uint64_t part, std::uint64_t parts, Term&& term) {
  double lane[norm_threads];
  for (unsigned j = 0; j < norm_threads; ++j) {
    double acc = 0.0;
    for (std::uint64_t i = part * norm_threads + j; i < count; i += parts * norm_threads) acc += term(i);
    lane[j] = acc;
  }
  for (unsigned half = norm_threads / 2; half > 0; half /= 2) {
    for (unsigned j = 0; j < half; ++j) lane[j] += lane[j + half];
  }
  return lane[0];
}

/// CPU reference of the norm's sum of squares (before the square root) over buffers given as their decoded values,
/// in the device's order: per buffer, each of its norm_parts(n) parts by norm_lane_tree_sum of the squares; the
/// part sums by norm_lane_tree_sum (one part); the buffers' sums added in list order. Empty buffers add nothing.
[[nodiscard]] inline double norm_sum_of_squares_reference(std::span<const std::vector<float>> buffers) {
  double running = 0.0;
  for (const std::vector<float>& b : buffers) {
    if (b.empty()) continue;
    const std::uint64_t n = b.size(), parts = norm_parts(n);
    std::vector<double> part_sums(parts);
    for (std::uint64_t p = 0; p < parts; ++p) {
      part_sums[p] = norm_lane_tree_sum(n, p, parts, [&b](std::uint64_t i) {
        const auto v = static_cast<double>(b[i]);
        const double square = v * v;  // exact: a float's square fits a double's 53 bits
        return square;
      });
    }
    running += norm_lane_tree_sum(parts, 0, 1, [&part_sums](std::uint64_t q) { return part_sums[q]; });
  }
  return running;
}

}  // namespace safeamp::cuda::detail
