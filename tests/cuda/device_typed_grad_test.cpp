// The scaler's passes on gradients in f16 and bf16 (gradient_span), and on more buffers than one launch takes:
// unscale-and-check, norm and clip against CPU references built from the core rounding routine (the stored
// result of each element, bit for bit), the optimizers reading 16-bit gradients exactly as their fp32 values,
// the predicated 16-bit write-back, and device_loss_scaler clipping hundreds of tensors in one call.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ios>
#include <limits>
#include <vector>

#include "device_util.hpp"
#include "norm_plan.hpp"
#include "safeamp/cuda/amp_ops.hpp"
#include "safeamp/cuda/core_kernels.hpp"
#include "safeamp/cuda/device_scaler.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/scaling/unscale.hpp"

using namespace safeamp;
using namespace safeamp::cuda;
using safeamp::cuda::testing::device_array;

namespace {

format_spec format_of(device_dtype t) { return t == device_dtype::f16 ? fp16 : t == device_dtype::bf16 ? bf16 : fp32; }

// One gradient buffer on the host: its values as floats (exactly representable in its type) and on the device
// in its own storage (16-bit codes or floats).
struct typed_buffer {
  device_dtype type = device_dtype::f32;
  std::vector<float> values;
  device_array<std::uint16_t> codes{1};
  device_array<float> floats{1};

  typed_buffer(device_dtype t, std::size_t n, std::uint32_t stream, float magnitude) : type(t), values(n) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::int32_t>(stochastic_bits(31, stream, i));
      const float v = static_cast<float>(r) * 0x1p-31f * magnitude;
      values[i] = t == device_dtype::f32 ? v : round_to(format_of(t), v);
    }
    upload();
  }
  void upload() {
    if (type == device_dtype::f32) {
      floats = device_array<float>(values.empty() ? std::vector<float>{0.0f} : values);
      return;
    }
    std::vector<std::uint16_t> c(values.size() + 1);
    for (std::size_t i = 0; i < values.size(); ++i)
      c[i] = static_cast<std::uint16_t>(encode(format_of(type), values[i]));
    codes = device_array<std::uint16_t>(c);
  }
  [[nodiscard]] gradient_span span() const {
    void* p = type == device_dtype::f32 ? static_cast<void*>(floats.data()) : static_cast<void*>(codes.data());
    return gradient_span{.data = p, .elements = values.size(), .type = type};
  }
  [[nodiscard]] std::vector<float> download() const {
    std::vector<float> out(values.size());
    if (type == device_dtype::f32) {
      const std::vector<float> f = floats.download();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = f[i];
    } else {
      const std::vector<std::uint16_t> c = codes.download();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = decode(format_of(type), c[i]);
    }
    return out;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (bit_cast<std::uint32_t>(a[i]) != bit_cast<std::uint32_t>(b[i])) return false;
  }
  return true;
}

// x op y as stored in a buffer of type t (the core's nearest-even rounding; fp32 unchanged).
float stored(device_dtype t, float v) { return t == device_dtype::f32 ? v : round_to(format_of(t), v); }

// 200 buffers in f32, f16, bf16 in turn, sizes 0..1200 (every 25th empty): more than three launch groups.
std::vector<typed_buffer> many_buffers(float magnitude) {
  std::vector<typed_buffer> b;
  for (std::uint32_t i = 0; i < 200; ++i) {
    const std::size_t n = i % 25 == 0 ? 0 : (i * 397u) % 1200u + 1u;
    b.emplace_back(static_cast<device_dtype>(i % 3), n, i, magnitude);
  }
  return b;
}

void wait() { TEST_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace

TEST_CASE("typed gradients: unscale of 200 f32/f16/bf16 buffers, every stored result as on the CPU",
          "[cuda][gpu][amp][typed]") {
  const scaler_config cfg{.init_scale = 3.0f * 1024.0f};  // not a power of two: 1/scale and the results are rounded
  std::vector<typed_buffer> bufs = many_buffers(60000.0f);
  std::vector<gradient_span> spans;
  for (const typed_buffer& b : bufs) spans.push_back(b.span());
  device_array<scaler_block> state(1);
  amp_reset(state.data(), cfg, nullptr);
  multi_tensor_unscale(spans, state.data(), nullptr);
  wait();
  const float inv = inverse_scale(cfg.init_scale);
  std::size_t differ = 0;
  for (const typed_buffer& b : bufs) {
    std::vector<float> want(b.values.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = stored(b.type, b.values[i] * inv);
    differ += same_bits(b.download(), want) ? 0 : 1;
  }
  CHECK(differ == 0);
  CHECK(state.download()[0].found_inf == 0);

  // an f16 value that is finite but overflows once unscaled by a scale below 1 raises the flag (the stored
  // result is inf); the same value in bf16 does not
  const scaler_config small{.init_scale = 0.25f, .min_scale = 0.125f};
  for (const device_dtype t : {device_dtype::f16, device_dtype::bf16}) {
    typed_buffer one(t, 1, 0, 1.0f);
    one.values[0] = 60000.0f;  // exact in fp16 (a multiple of its spacing 32 there); bf16 holds 59904
    one.values[0] = stored(t, one.values[0]);
    one.upload();
    amp_reset(state.data(), small, nullptr);
    const gradient_span s[] = {one.span()};
    multi_tensor_unscale(s, state.data(), nullptr);
    wait();
    INFO(dtype_name(t));
    CHECK(state.download()[0].found_inf == (t == device_dtype::f16 ? 1 : 0));
  }
}

TEST_CASE("typed gradients: norm and clip over 200 buffers in one call", "[cuda][gpu][amp][typed]") {
  std::vector<typed_buffer> bufs = many_buffers(2.0f);
  std::vector<gradient_span> spans;
  double sum = 0.0;
  std::size_t elements = 0;
  for (const typed_buffer& b : bufs) {
    spans.push_back(b.span());
    for (const float v : b.values) sum += static_cast<double>(v) * static_cast<double>(v);
    elements += b.values.size();
  }
  const double host_norm = std::sqrt(sum);
  const double max_norm = host_norm / 3.0;  // clipping on
  device_array<scaler_block> state(1);
  device_array<double> scratch(norm_scratch_doubles);
  amp_reset(state.data(), scaler_config{}, nullptr);
  global_norm_and_clip(spans, max_norm, scratch.data(), state.data(), nullptr);
  wait();
  const scaler_block r = state.download()[0];
  // the device sums the same squares in double in another order: relative (n - 1) 2^-53 bounds the difference
  CHECK(r.norm_before == Approx(host_norm).epsilon(static_cast<double>(elements) * 0x1p-53));
  CHECK(r.found_inf == 0);
  // each element clipped with the device's factor and stored in its type, bit for bit
  const auto factor = static_cast<float>(max_norm / r.norm_before);
  CHECK(r.norm_after == r.norm_before * static_cast<double>(factor));
  std::size_t differ = 0;
  for (const typed_buffer& b : bufs) {
    std::vector<float> want(b.values.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = stored(b.type, b.values[i] * factor);
    differ += same_bits(b.download(), want) ? 0 : 1;
  }
  CHECK(differ == 0);
}

TEST_CASE("typed gradients: device_loss_scaler clips 300 tensors in one call", "[cuda][gpu][scaler][typed]") {
  device_loss_scaler scaler(scaler_config{.init_scale = 2.0f}, device_memory(nullptr));
  std::vector<typed_buffer> bufs;
  std::vector<gradient_span> spans;
  for (std::uint32_t i = 0; i < 300; ++i)
    bufs.emplace_back(static_cast<device_dtype>(i % 3), 17 + i % 5, 100 + i, 1.0f);
  for (const typed_buffer& b : bufs) spans.push_back(b.span());
  scaler.unscale(spans);
  scaler.clip_grad_norm(spans, 1.0);  // refused above 64 buffers before issue 19
  scaler.step([] {});
  scaler.update();
  const step_report last = scaler.last_report();
  CHECK(last.applied);
  CHECK(last.grad_norm_before_clip > 1.0);
  CHECK(last.grad_norm_after_clip == Approx(1.0).epsilon(0x1p-20));
}

TEST_CASE("typed gradients: the optimizers read f16/bf16 gradients as their fp32 values", "[cuda][gpu][amp][typed]") {
  const std::size_t n = 2048;
  device_array<scaler_block> state(1);
  amp_reset(state.data(), scaler_config{}, nullptr);
  for (const device_dtype t : {device_dtype::f16, device_dtype::bf16}) {
    INFO(dtype_name(t));
    const typed_buffer g(t, n, 7, 3.0f);
    const device_array<float> g32(g.values);  // the same values in fp32: the reference path
    const std::vector<float> w0(n, 0.5f), zeros(n, 0.0f);
    device_array<float> wa(w0), ma(zeros), va(zeros), wb(w0), mb(zeros), vb(zeros);
    const adamw_options o{.learning_rate = 1e-2f, .weight_decay = 0.1f};
    adamw_step({wa.data(), n}, g.span(), ma.data(), va.data(), o, state.data(), nullptr);
    adamw_step({wb.data(), n}, g32.data(), mb.data(), vb.data(), o, state.data(), nullptr);
    CHECK(same_bits(wa.download(), wb.download()));
    CHECK(same_bits(va.download(), vb.download()));
    sgd_momentum_step({wa.data(), n}, g.span(), va.data(), sgd_options{}, state.data(), nullptr);
    sgd_momentum_step({wb.data(), n}, g32.data(), vb.data(), sgd_options{}, state.data(), nullptr);
    CHECK(same_bits(wa.download(), wb.download()));
    CHECK(wa.download() != w0);  // the steps were applied
    CHECK_THROWS_WITH(adamw_step({wa.data(), n - 1}, g.span(), ma.data(), va.data(), o, state.data(), nullptr),
                      Catch::Contains("gradient elements") && Catch::Contains("2048"));
  }
}

TEST_CASE("the 16-bit write-back writes nothing when the flag is raised", "[cuda][gpu][cast][typed]") {
  const std::size_t n = 1000;
  std::vector<float> master(n);
  for (std::size_t i = 0; i < n; ++i) master[i] = static_cast<float>(i) * 0.013f - 6.0f;
  const device_array<float> d_master(master);
  const std::vector<std::uint16_t> old(n, 0x1234);
  device_array<std::uint16_t> out(old), ref(n);
  device_array<std::int32_t> flag(std::vector<std::int32_t>{1});
  REQUIRE(launch_encode16_unless(flag.data(), bf16, round_options{}, philox_key{}, d_master.data(), out.data(), n,
                                 nullptr) == 0);
  CHECK(out.download() == old);  // raised: untouched
  flag.upload({0});
  REQUIRE(launch_encode16_unless(flag.data(), bf16, round_options{}, philox_key{}, d_master.data(), out.data(), n,
                                 nullptr) == 0);
  REQUIRE(launch_encode16(bf16, round_options{}, philox_key{}, d_master.data(), ref.data(), n, nullptr) == 0);
  CHECK(out.download() == ref.download());
  CHECK(launch_encode16_unless(nullptr, bf16, round_options{}, philox_key{}, d_master.data(), out.data(), n,
                               nullptr) != 0);  // an unpredicated write-back is launch_encode16
}

TEST_CASE("norm: the same bits on any launch, those of the CPU reference of its order", "[cuda][gpu][amp][norm]") {
  // Buffers around the partition's edges (one part: 1, 255, 4096; two: 4097; 18: 70001; the most: 5 Mi + 3) and the
  // 200 buffers of four launch groups. The norm is summed in parts fixed by each buffer's size; the device's SM count
  // only decides how many blocks work through them, so forcing 1, 6 or 8000 blocks must give the same bits, and those
  // of norm_sum_of_squares_reference (its square root: IEEE sqrt on both sides).
  std::vector<typed_buffer> bufs = many_buffers(4.0f);
  const std::size_t sizes[] = {1, 255, 4096, 4097, 70001, (std::size_t{5} << 20) + 3};
  for (std::uint32_t i = 0; i < std::size(sizes); ++i) {
    bufs.emplace_back(static_cast<device_dtype>(i % 3), sizes[i], 1000 + i, 8.0f);
  }
  std::vector<gradient_span> spans;
  std::vector<std::vector<float>> values;
  for (const typed_buffer& b : bufs) {
    spans.push_back(b.span());
    values.push_back(b.values);
  }
  const double want = std::sqrt(cuda::detail::norm_sum_of_squares_reference(values));
  device_array<scaler_block> state(1);
  device_array<double> scratch(norm_scratch_doubles);
  const auto bits = [](double x) { return bit_cast<std::uint64_t>(x); };
  const auto norm_on = [&](const cuda::detail::device_geometry* geometry) {
    amp_reset(state.data(), scaler_config{}, nullptr);
    if (geometry == nullptr) {
      global_norm_and_clip(spans, 0.0, scratch.data(), state.data(), nullptr);  // this device's launch
    } else {
      cuda::detail::global_norm_and_clip_on(spans, 0.0, scratch.data(), state.data(), nullptr, *geometry);
    }
    wait();
    return state.download()[0].norm_before;
  };
  const double on_this_device = norm_on(nullptr);
  INFO("device 0x" << std::hex << bits(on_this_device) << ", reference 0x" << bits(want));
  CHECK(bits(on_this_device) == bits(want));
  const cuda::detail::device_geometry forced[] = {
      {.multiprocessors = 1, .max_threads_per_multiprocessor = 256},       // 1 block
      {.multiprocessors = 3, .max_threads_per_multiprocessor = 512},       // 6 blocks
      {.multiprocessors = 1000, .max_threads_per_multiprocessor = 2048}};  // 8000 blocks
  for (const cuda::detail::device_geometry& g : forced) {
    const double got = norm_on(&g);
    INFO(g.multiprocessors << " SMs: 0x" << std::hex << bits(got));
    CHECK(bits(got) == bits(on_this_device));
  }
}
