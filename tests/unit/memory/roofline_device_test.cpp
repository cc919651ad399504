// roofline(device_spec, format, cost) validates a hand-built device as the planner does: a zero, negative, NaN or
// infinite bandwidth or peak throws safeamp::error naming the field (it gave an inf, NaN or zero verdict before), and
// a valid device still gives the hand-derived point.
#include <catch2/catch.hpp>
#include <limits>
#include <string>

#include "safeamp/memory/devices.hpp"
#include "safeamp/memory/roofline.hpp"
#include "toy_device.hpp"

using namespace safeamp;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
const double not_a_number = std::numeric_limits<double>::quiet_NaN();
// 100 FLOPs over 10 bytes: intensity 10 FLOP/byte.
constexpr kernel_cost ten_per_byte{.flops = 100.0, .bytes = 10.0};

/// roofline on `d` for the 10 FLOP/byte kernel, for the CHECK_THROWS_* macros.
roofline_point roofline_of(const device_spec& d, format_spec compute = fp16) {
  return roofline(d, compute, ten_per_byte);
}
}  // namespace

TEST_CASE("roofline on a valid hand-built device: the hand-derived point") {
  // toy: 1 TB/s, 40 TFLOPS fp16: ridge 40 FLOP/byte; intensity 10 is memory-bound at 10 x 1e12 = 1e13 FLOP/s.
  const device_spec d = toy_device("toy", 24'000'000'000ULL);
  const roofline_point p = roofline(d, fp16, ten_per_byte);
  CHECK(p.ridge_flops_per_byte == 40.0);
  CHECK(p.attainable_flops == 1e13);
  CHECK(p.min_seconds == 100.0 / 1e13);
  CHECK(p.bound == bound_kind::memory);
}

TEST_CASE("roofline refuses a device whose bandwidth or FP32 peak is zero, negative, NaN or infinite") {
  const device_spec good = toy_device("toy", 24'000'000'000ULL);
  struct bad_value {
    double value;
    const char* shown;  // std::to_string's text, as validate(device_spec) prints it
  };
  for (const bad_value& v : {bad_value{0.0, "0.000000"}, bad_value{-1e12, "-1000000000000.000000"},
                             bad_value{not_a_number, "nan"}, bad_value{inf, "inf"}, bad_value{-inf, "-inf"}}) {
    INFO(v.shown);
    device_spec d = good;
    d.memory_bytes_per_second = v.value;
    CHECK_THROWS_WITH(roofline_of(d),
                      std::string("device memory_bytes_per_second is ") + v.shown + "; accepted: a finite number > 0");
    d = good;
    d.peak_fp32_flops = v.value;
    CHECK_THROWS_WITH(roofline_of(d, fp32),
                      std::string("device peak_fp32_flops is ") + v.shown + "; accepted: a finite number > 0");
    CHECK_THROWS_WITH(roofline_of(d, fp16),  // the whole device is checked, whichever peak the format reads
                      std::string("device peak_fp32_flops is ") + v.shown + "; accepted: a finite number > 0");
  }
}

TEST_CASE("roofline refuses a tensor-core peak that is negative, NaN or infinite, and names a peak of 0") {
  const device_spec good = toy_device("toy", 24'000'000'000ULL);
  for (const double v : {-1.0, not_a_number, inf}) {
    INFO(v);
    device_spec d = good;
    d.peak_fp16_flops = v;
    CHECK_THROWS_WITH(roofline_of(d), Catch::StartsWith("device peak_fp16_flops is ") &&
                                          Catch::EndsWith("; accepted: a finite number >= 0 (0: unsupported)"));
    d = good;
    d.peak_fp8_flops = v;
    CHECK_THROWS_WITH(roofline_of(d, fp8_e4m3), Catch::StartsWith("device peak_fp8_flops is "));
  }
  // 0 is "no such units": the toy device has no FP8.
  CHECK_THROWS_WITH(
      roofline_of(good, fp8_e4m3),
      "compute format is e4m3 on 'toy'; accepted: a format the device has math units for (its peak is 0: unsupported)");
  // The device's name is outside input: quoted bounded, control characters escaped.
  const std::string long_name(300, 'N');
  const device_spec named = toy_device(long_name.c_str(), 24'000'000'000ULL);
  CHECK_THROWS_WITH(roofline_of(named, fp8_e4m3), Catch::Contains("e4m3 on '" + std::string(80, 'N') + "...'"));
  device_spec zero_capacity = good;
  zero_capacity.capacity_bytes = 0;
  CHECK_THROWS_WITH(roofline_of(zero_capacity), "device capacity_bytes is 0; accepted: > 0 bytes");
}

TEST_CASE("roofline refuses a bandwidth so far from the peak that the ridge point is not finite and > 0") {
  device_spec d = toy_device("toy", 24'000'000'000ULL);
  d.memory_bytes_per_second = 1e-300;  // 40e12 / 1e-300 overflows: every kernel would be memory-bound at ~0 FLOP/s
  CHECK_THROWS_WITH(roofline_of(d),
                    "device memory_bytes_per_second is 1e-300 B/s against a fp16 peak of 4e+13 FLOP/s (ridge point inf "
                    "FLOP/byte); accepted: a bandwidth whose ridge point peak / bandwidth is a finite number > 0");
  d = toy_device("toy", 24'000'000'000ULL);
  d.memory_bytes_per_second = 1e308;
  d.peak_fp16_flops = 1e-20;  // 1e-20 / 1e308 underflows to 0
  CHECK_THROWS_WITH(roofline_of(d),
                    Catch::Contains("(ridge point 0 FLOP/byte); accepted: a bandwidth whose ridge point"));
}

TEST_CASE("check_measurement validates the device through roofline") {
  device_spec d = toy_device("toy", 24'000'000'000ULL);
  d.memory_bytes_per_second = 0.0;
  CHECK_THROWS_WITH(check_measurement(d, fp16, ten_per_byte, 1.0),
                    Catch::StartsWith("device memory_bytes_per_second is 0.000000"));
  CHECK_THROWS_AS(check_measurement(d, fp16, ten_per_byte, 1.0), error);  // safeamp's one exception type
}
