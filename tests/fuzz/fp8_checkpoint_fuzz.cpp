// libFuzzer: fp8_checkpoint_from_json (the core's std-only reader plus validation against three fixed tensor configs)
// accepts a checkpoint or throws safeamp::error; an accepted checkpoint is written and read back to the same value,
// loads into tensors whose snapshots are the checkpoint again, and both forms then run a step.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/scaling.hpp"

namespace {
// The configs the seed corpus (corpus/fp8_checkpoint) was saved under: a ring that wraps, no window at all, and the
// largest margin (whose lowest scale is 0: 448 x 2^-126 / FLT_MAX underflows).
const std::vector<safeamp::delayed_scaling_config>& configs() {
  static const std::vector<safeamp::delayed_scaling_config> c = {
      {.format = safeamp::fp8_e4m3, .history_length = 4, .algorithm = safeamp::amax_algorithm::max, .margin = 0},
      {.format = safeamp::fp8_e5m2,
       .history_length = 1,
       .algorithm = safeamp::amax_algorithm::most_recent,
       .margin = 1},
      {.format = safeamp::fp8_e4m3,
       .history_length = 3,
       .algorithm = safeamp::amax_algorithm::most_recent,
       .margin = 126}};
  return c;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const safeamp::fp8_checkpoint c = safeamp::fp8_checkpoint_from_json(text, configs());
    if (!(safeamp::fp8_checkpoint_from_json(safeamp::to_json(c), configs()) == c)) __builtin_trap();
    std::vector<safeamp::delayed_scaling> tensors;
    for (const safeamp::delayed_scaling_config& cfg : configs()) tensors.emplace_back(cfg);
    safeamp::restore(tensors, c);
    if (!(safeamp::checkpoint_of(tensors) == c)) __builtin_trap();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      // The plain form of the same tensor agrees with the object after one more step.
      const safeamp::delayed_scaling_config& cfg = configs()[i];
      safeamp::delayed_scaling_state s{};
      std::vector<float> ring(static_cast<std::size_t>(cfg.history_length - 1));
      safeamp::restore(c.tensors[i], cfg, s, ring);
      tensors[i].record_amax(3.0f);
      (void)tensors[i].update();
      s.amax_bits = safeamp::amax_fold(0, 3.0f);
      safeamp::delayed_scaling_step(safeamp::make_delayed_scaling_params(cfg), s, ring.data());
      if (!(safeamp::snapshot_of(cfg, s, ring) == tensors[i].snapshot())) __builtin_trap();
    }
  } catch (const safeamp::error&) {
  }
  return 0;
}
