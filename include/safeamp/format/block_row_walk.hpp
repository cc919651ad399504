// How the one-pass block kernels (block_avx2.hpp, block_avx512.hpp, block_nvfp4_avx2.hpp,
// block_nvfp4_avx512.hpp) walk one row: its whole blocks in groups, the stochastic words of each group made just
// before it is rounded (they stay in L1), then the short last block. The kernels give the per-block work.
#pragma once

#include <cstddef>
#include <cstdint>

#include "safeamp/config.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round_kernel.hpp"  // SAFEAMP_DETAIL_ALWAYS_INLINE
#include "safeamp/format/round_options.hpp"

namespace safeamp::detail {

/// A block fill of Philox4x32-10 words (philox_fill_avx2, philox_fill_avx512: the same words).
using philox_fill_function = void (*)(std::uint32_t* words, std::uint64_t first_block, std::size_t blocks,
                                      std::uint64_t seed, std::uint32_t stream) noexcept;

/// Rows of n elements in blocks of Block: whole(k, i, words) for block k (element i = k Block on), in groups of
/// Group blocks with start_group() before and finish_group(blocks) after each group; then tail(k, i, len, words)
/// for a short last block of len elements. Stochastic: words holds the Philox words of logical indices
/// key.offset + first_index + i on (4-word Philox blocks: up to 3 words before the first are skipped); else
/// nullptr. Always inlined, so that the kernels' lambdas compile under their own target.
template <rounding R, std::size_t Block, std::size_t Group, philox_fill_function Fill, class Whole, class Start,
          class Finish, class Tail>
SAFEAMP_DETAIL_ALWAYS_INLINE void walk_row(std::size_t n, std::uint64_t first_index, const philox_key& key,
                                           Whole&& whole, Start&& start_group, Finish&& finish_group,
                                           Tail&& tail) noexcept {
  alignas(64) std::uint32_t words[R == rounding::stochastic ? Group * Block + 4 : 1];
  std::size_t skip = 0;
  const auto fill = [&](std::size_t from, std::size_t count) noexcept {
    if constexpr (R == rounding::stochastic) {
      const std::uint64_t logical = key.offset + first_index + from;
      skip = static_cast<std::size_t>(logical & 3u);
      Fill(words, logical >> 2, (skip + count + 3) / 4, key.seed, key.stream);
    }
  };
  const std::size_t blocks = n / Block;
  for (std::size_t b = 0; b < blocks; b += Group) {
    const std::size_t last = blocks - b < Group ? blocks : b + Group;
    fill(b * Block, (last - b) * Block);
    start_group();
    for (std::size_t k = b; k < last; ++k) {
      const std::size_t i = k * Block;
      whole(k, i, R == rounding::stochastic ? words + skip + (i - b * Block) : nullptr);
    }
    finish_group(last - b);
  }
  if (const std::size_t len = n - blocks * Block; len != 0) {
    fill(blocks * Block, len);
    tail(blocks, blocks * Block, len, R == rounding::stochastic ? words + skip : nullptr);
  }
}

}  // namespace safeamp::detail
