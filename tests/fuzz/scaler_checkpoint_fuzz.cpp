// libFuzzer: checkpoint_from_json (the core's std-only reader plus validation) accepts a checkpoint or throws
// safeamp::error; an accepted checkpoint is written and read back to the same value.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/scaling.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const safeamp::scaler_checkpoint c = safeamp::checkpoint_from_json(text);
    if (!(safeamp::checkpoint_from_json(safeamp::to_json(c)) == c)) __builtin_trap();
  } catch (const safeamp::error&) {
  }
  return 0;
}
