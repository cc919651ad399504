// Host-side checks of the device loss scaler (no GPU needed): the device block is the core scaler_block, the
// memory satisfies the deferred-memory concept, its address ranges, and a bad config refused before the
// device is touched; without a GPU a valid config fails with a clear cuda_error, not a crash.
#include <catch2/catch.hpp>
#include <type_traits>

#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/device_scaler.hpp"
#include "safeamp/cuda/status.hpp"

using namespace safeamp;
using namespace safeamp::cuda;

static_assert(std::is_same_v<device_amp_state, scaler_block>, "the old device state is the one block type");
static_assert(std::is_trivially_copyable_v<scaler_block>, "the block is copied to and from device memory as bytes");
static_assert(deferred_memory<device_memory>);
static_assert(!deferred_memory<host_memory>);
static_assert(std::is_same_v<device_loss_scaler, basic_loss_scaler<dynamic_scale_rule, device_memory>>);

TEST_CASE("device memory: byte ranges of gradient buffers", "[cuda][host][scaler]") {
  float storage[8] = {};
  const auto [b0, b1] = device_memory::address(tensor_span{storage + 1, 4});
  CHECK(b0 == reinterpret_cast<std::uintptr_t>(storage) + 4);
  CHECK(b1 - b0 == 16);
  const auto [e0, e1] = device_memory::address(tensor_span{storage, 0});
  CHECK(e0 == e1);
}

TEST_CASE("device scaler: a bad config is refused before the device is touched", "[cuda][host][scaler]") {
  CHECK_THROWS_WITH(device_loss_scaler(scaler_config{.growth_interval = 0}, device_memory()),
                    Catch::Contains("growth_interval") && Catch::Contains(">= 1"));
  CHECK_THROWS_WITH(device_loss_scaler(scaler_config{.max_overflows_at_min = -1}, device_memory()),
                    Catch::Contains("max_overflows_at_min"));
  if (device_count() == 0) {
    // no GPU: the first allocation fails with the runtime's status named, as a safeamp error
    CHECK_THROWS_AS(device_loss_scaler(scaler_config{}, device_memory()), cuda_error);
  }
}
