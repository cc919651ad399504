// AdamW with an fp32 update (the bulk kernels of sim/src/optimizer_kernels*.{hpp,cpp}) against the documented
// per-element order written out here, bit for bit, on lengths that end in every vector tail and on parameters
// the update cuts into chunks (on one thread and on two); run once per CPU path (sim_optimizer_kernels_test_portable,
// _avx2, _avx512).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "safeamp/format.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/optimizer.hpp"
#include "safeamp/sim/parameter.hpp"
#include "sim/engine/sim_test_util.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

using sim_test::bits_of;
using sim_test::hex;

// Wide-range values (2^-20..2^4 in magnitude, both signs) from a fixed linear congruential sequence; every
// seventh one zero, so that some gradients are zero.
float value(std::uint64_t& state, bool zeros) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  const auto r = static_cast<std::uint32_t>(state >> 33);
  if (zeros && r % 7 == 0) return 0.0f;
  const float mantissa = 1.0f + static_cast<float>(r & 0xFFFFu) * 0x1p-16f;
  const int exponent = static_cast<int>((r >> 16) % 25) - 20;
  return ((r >> 31) != 0 ? -1.0f : 1.0f) * std::ldexp(mantissa, exponent);
}

}  // namespace

TEST_CASE("AdamW's fp32 update has the documented per-element bits on every length and kernel path") {
  INFO("kernel path " << cpu_path_name(active_cpu_path()));
  const optimizer_config cfg{.kind = optimizer_kind::adamw,
                             .learning_rate = 3e-3,
                             .beta1 = 0.9,
                             .beta2 = 0.95,
                             .epsilon = 1e-12,
                             .weight_decay = 0.01};
  // 1..17 cover every AVX2 and AVX-512 tail; 100 and 1000 whole vectors and a tail; 2 x 8192 + 77 and 3 x 8192
  // are cut into chunks of 8192 (optimizer.cpp's adamw_chunk), the last one partial or whole.
  std::vector<Eigen::Index> lengths;
  for (Eigen::Index n = 1; n <= 17; ++n) lengths.push_back(n);
  lengths.push_back(100);
  lengths.push_back(1000);
  lengths.push_back(2 * 8192 + 77);
  lengths.push_back(3 * 8192);
  parameter_list params;
  for (const Eigen::Index n : lengths) (void)add_parameter(params, std::string("p").append(std::to_string(n)), 1, n);
  std::uint64_t state = 12345;
  for (parameter& p : params) {
    for (Eigen::Index k = 0; k < p.value.size(); ++k) p.value.data()[k] = value(state, false);
  }
  optimizer opt(cfg, presets::fp32, false, params);
  // The documented order (optimizer.hpp, optimizer.cpp): the moments, then w + (-lr) (m c1 / (sqrt(v c2) + eps)
  // + wd w), every operation one fp32 rounding.
  const auto b1 = static_cast<float>(cfg.beta1), b2 = static_cast<float>(cfg.beta2);
  const auto lr = static_cast<float>(cfg.learning_rate), eps = static_cast<float>(cfg.epsilon);
  const auto wd = static_cast<float>(cfg.weight_decay);
  std::vector<std::vector<float>> m(params.size()), v(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    m[i].assign(static_cast<std::size_t>(params[i].value.size()), 0.0f);
    v[i] = m[i];
  }
  exec_context ctx;
  for (int t = 1; t <= 3; ++t) {
    const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta1, t)));
    const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta2, t)));
    std::vector<std::vector<float>> want(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      parameter& p = params[i];
      for (Eigen::Index k = 0; k < p.grad.size(); ++k) p.grad.data()[k] = value(state, true);
      for (Eigen::Index k = 0; k < p.value.size(); ++k) {
        const auto e = static_cast<std::size_t>(k);
        const float g = p.grad.data()[k], w = p.value.data()[k];
        const float m_decayed = b1 * m[i][e];
        const float g_part = (1.0f - b1) * g;
        m[i][e] = m_decayed + g_part;
        const float v_decayed = b2 * v[i][e];
        const float g2_part = ((1.0f - b2) * g) * g;
        v[i][e] = v_decayed + g2_part;
        const float denominator = std::sqrt(v[i][e] * c2) + eps;
        const float ratio = (m[i][e] * c1) / denominator;
        const float decayed = ratio + wd * w;
        want[i].push_back(w + (-lr) * decayed);
      }
    }
    ctx.begin_step(t);
    ctx.threads = t == 2 ? 2 : 1;  // the chunks of step 2 shared between two threads
    opt.step(ctx, params);
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO("step " << t << " on " << ctx.threads << " threads, " << params[i].name);
      std::int64_t mismatches = 0;
      for (Eigen::Index k = 0; k < params[i].value.size(); ++k) {
        const float got = params[i].value.data()[k];
        const float expected = want[i][static_cast<std::size_t>(k)];
        if (bits_of(got) != bits_of(expected) && ++mismatches <= 3) {
          UNSCOPED_INFO("w[" << k << "] = " << hex(got) << ", documented order " << hex(expected));
        }
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("with fp32 master weights the bulk update keeps the master and writes its fp16 rounding to the parameter") {
  // fp16_pure_master: fp16 parameters, an fp32 master copy, an fp32 update (the bulk kernel). 3 x 8192 + 5 elements
  // are four chunks, shared between two threads in step 2: each chunk's results are copied into the parameter by
  // the thread that computed them.
  INFO("kernel path " << cpu_path_name(active_cpu_path()));
  const optimizer_config cfg{.kind = optimizer_kind::adamw, .learning_rate = 1e-3, .beta1 = 0.9, .beta2 = 0.999};
  parameter_list params;
  (void)add_parameter(params, "w", 1, 3 * 8192 + 5);
  parameter& p = params.front();
  std::uint64_t state = 777;
  for (Eigen::Index k = 0; k < p.value.size(); ++k) p.value.data()[k] = round_to<fp16>(value(state, false));
  optimizer opt(cfg, presets::fp16_pure_master, true, params);
  REQUIRE(opt.keeps_master());
  // The same updates without a master (fp32 parameters) give the master's expected values.
  parameter_list plain = params;
  optimizer reference(cfg, presets::fp32, false, plain);
  exec_context ctx, ref_ctx;
  for (int t = 1; t <= 3; ++t) {
    for (Eigen::Index k = 0; k < p.grad.size(); ++k) p.grad.data()[k] = value(state, true);
    plain.front().grad = p.grad;
    ctx.begin_step(t);
    ref_ctx.begin_step(t);
    ctx.threads = t == 2 ? 2 : 1;
    opt.step(ctx, params);
    reference.step(ref_ctx, plain);
    INFO("step " << t << " on " << ctx.threads << " threads");
    const matrix& master = opt.state().master.front();
    std::int64_t master_wrong = 0, param_wrong = 0;
    for (Eigen::Index k = 0; k < p.value.size(); ++k) {
      const float want = plain.front().value.data()[k];
      if (bits_of(master.data()[k]) != bits_of(want) && ++master_wrong <= 3) {
        UNSCOPED_INFO("master[" << k << "] = " << hex(master.data()[k]) << ", fp32 update " << hex(want));
      }
      if (bits_of(p.value.data()[k]) != bits_of(round_to<fp16>(want)) && ++param_wrong <= 3) {
        UNSCOPED_INFO("w[" << k << "] = " << hex(p.value.data()[k]) << ", fp16 of the update "
                           << hex(round_to<fp16>(want)));
      }
    }
    CHECK(master_wrong == 0);
    CHECK(param_wrong == 0);
  }
}

TEST_CASE("lost updates are counted over every chunk of a parameter, on one thread and on two") {
  // SGD on bf16 parameters without a master: w = 1 + k ulp-free values; a gradient of 1e-6 moves w = 1 by 1e-7 (lr
  // 0.1), far below bf16's half ulp at 1 (2^-8), so the update is lost; a gradient of 1 moves it by 0.1, kept; a
  // zero gradient is no lost update. 40000 elements: three chunks of the count (16384) on two threads.
  const optimizer_config cfg{.kind = optimizer_kind::sgd_momentum, .learning_rate = 0.1, .momentum = 0.0};
  precision_policy pol = presets::fp32;
  pol.param = bf16;
  constexpr Eigen::Index n = 40000;
  for (const int threads : {1, 2}) {
    INFO("threads " << threads);
    parameter_list params;
    (void)add_parameter(params, "w", 1, n);
    parameter& p = params.front();
    std::uint64_t expected = 0;
    for (Eigen::Index k = 0; k < n; ++k) {
      p.value.data()[k] = 1.0f;
      const int kind = static_cast<int>((k * 7 + k / 1000) % 3);  // an uneven pattern across the chunks
      p.grad.data()[k] = kind == 0 ? 1e-6f : (kind == 1 ? 1.0f : 0.0f);
      expected += kind == 0 ? 1u : 0u;
    }
    optimizer opt(cfg, pol, false, params);
    exec_context ctx;
    ctx.begin_step(1);
    ctx.threads = threads;
    opt.step(ctx, params);
    CHECK(opt.lost_updates() == expected);
    // The kept updates did move their element: 1 - 0.1 in bf16.
    CHECK(p.value.data()[1] == round_to<bf16>(0.9f));
  }
}
