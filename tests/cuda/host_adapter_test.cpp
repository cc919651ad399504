// Host-side checks of the adapter example's parameter checks (examples/cuda/amp_adapter.hpp): what a libtorch
// loop could hand over by mistake is refused before the device is touched, naming the parameter and the field.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "amp_adapter.hpp"
#include "safeamp/cuda/device.hpp"
#include "safeamp/cuda/status.hpp"

using namespace safeamp;
using safeamp::cuda::device_dtype;
using safeamp::cuda_adapter::amp_adapter;
using safeamp::cuda_adapter::check_parameters;
using safeamp::cuda_adapter::parameter_view;

namespace {

// Stand-in addresses: the checks never dereference them.
std::uint16_t value_storage[8], grad_storage[8];

std::vector<parameter_view> good_params() {
  return {parameter_view{
              .name = "embed", .value = value_storage, .grad = grad_storage, .elements = 4, .type = device_dtype::bf16},
          parameter_view{.name = "head",
                         .value = value_storage + 4,
                         .grad = grad_storage + 4,
                         .elements = 2,
                         .type = device_dtype::f32}};
}

}  // namespace

TEST_CASE("adapter: parameters checked before the device is touched", "[cuda][host][adapter]") {
  CHECK_NOTHROW(check_parameters(good_params()));
  CHECK_THROWS_WITH(check_parameters({}), Catch::Contains("parameters") && Catch::Contains("at least one"));

  auto p = good_params();
  p[1].type = device_dtype::f8_e5m2;
  CHECK_THROWS_WITH(check_parameters(p), Catch::Contains("parameter 1 'head' type") && Catch::Contains("f8_e5m2") &&
                                             Catch::Contains("f32, f16 or bf16"));
  p = good_params();
  p[0].elements = 0;
  CHECK_THROWS_WITH(check_parameters(p), Catch::Contains("parameter 0 'embed' elements") && Catch::Contains(">= 1"));
  p = good_params();
  p[0].grad = nullptr;
  CHECK_THROWS_WITH(check_parameters(p), Catch::Contains("parameter 0 'embed' grad") && Catch::Contains("nullptr"));
  p = good_params();
  p[1].value = nullptr;
  CHECK_THROWS_WITH(check_parameters(p), Catch::Contains("parameter 1 'head' value"));
  p = good_params();
  p[1].grad = p[1].value;
  CHECK_THROWS_WITH(check_parameters(p), Catch::Contains("'head' grad") && Catch::Contains("separate gradient"));
  p = good_params();
  p[1].name = "embed";
  CHECK_THROWS_WITH(check_parameters(p), Catch::Contains("parameter 1 'embed' name") && Catch::Contains("used twice"));
}

TEST_CASE("adapter: bad options and configs refused before the device is touched", "[cuda][host][adapter]") {
  CHECK_THROWS_WITH(amp_adapter(good_params(), {.max_grad_norm = -1.0}),
                    Catch::Contains("max_grad_norm") && Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(amp_adapter(good_params(), {.scaler = scaler_config{.backoff_factor = 1.5}}),
                    Catch::Contains("backoff_factor"));
  auto bad = good_params();
  bad[0].type = device_dtype::f8_e4m3;
  CHECK_THROWS_WITH(amp_adapter(bad, {}), Catch::Contains("'embed' type"));
  if (cuda::device_count() == 0) {
    // valid input and no GPU: the scaler's first allocation fails with the runtime's status, as a safeamp error
    CHECK_THROWS_AS(amp_adapter(good_params(), {}), cuda::cuda_error);
  }
}
