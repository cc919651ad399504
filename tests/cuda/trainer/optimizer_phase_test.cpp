// The GPU trainer's optimizer phase (examples/cuda/optimizer_phase.hpp) on a host backend that does what the
// predicated device kernels do: a skipped step (found_inf raised) leaves the weights, the master copy and the
// optimizer state bit-for-bit unchanged, every write of the phase is handed the scaler's flag, and a clean
// step updates and writes back. No GPU or nvcc needed.
#include "optimizer_phase.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"

using namespace safeamp;
using namespace safeamp::gpu_trainer;

namespace {

// Host stand-in for the device kernels: each pass returns at once when *skip_if != 0; a null skip_if is an
// unpredicated pass (what the trainer had before: it ran on skipped steps too).
struct host_backend {
  const std::int32_t* expected_flag = nullptr;
  int calls = 0, calls_with_flag = 0;
  std::uint64_t key = 0;  // stochastic write-back bits: a fresh stream per call

  bool skip(const std::int32_t* f) {
    ++calls;
    calls_with_flag += f == expected_flag ? 1 : 0;
    return f != nullptr && *f != 0;
  }
  void sgd(float* w, const float* g, float* v, std::uint64_t n, const std::int32_t* skip_if) {
    if (skip(skip_if)) return;
    for (std::uint64_t i = 0; i < n; ++i) {
      v[i] = 0.9f * v[i] + g[i];
      w[i] = w[i] - 0.01f * v[i];
    }
  }
  void adamw(float* w, const float* g, float* m, float* v, std::uint64_t n, const std::int32_t* skip_if) {
    if (skip(skip_if)) return;
    for (std::uint64_t i = 0; i < n; ++i) {
      m[i] = 0.9f * m[i] + 0.1f * g[i];
      v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
      w[i] = w[i] - 0.001f * m[i] / (std::sqrt(v[i]) + 1e-8f);
    }
  }
  void write_back(const float* from, float* to, std::uint64_t n, const std::int32_t* skip_if) {
    const std::uint64_t stream = key++;
    if (skip(skip_if)) return;
    for (std::uint64_t i = 0; i < n; ++i) {
      to[i] = round_to(bf16, from[i], round_options{.mode = rounding::stochastic},
                       stochastic_bits(7, static_cast<std::uint32_t>(stream), i));
    }
  }
};

struct host_parameter {
  std::vector<float> value, grad, first, second, master;
  explicit host_parameter(std::uint32_t seed, std::size_t n) : value(n), grad(n), first(n), second(n), master(n) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = [&](std::uint32_t s) {
        return static_cast<float>(stochastic_bits(seed, s, i) % 2001u) / 1000.0f - 1.0f;
      };
      master[i] = r(0) + 1.0f / 3.0f;  // not representable in bf16: a stochastic write-back moves it
      value[i] = round_to(bf16, master[i]);
      grad[i] = r(1);
      first[i] = r(2);
      second[i] = r(3) * r(3);
    }
  }
  parameter_buffers buffers(bool adamw, bool master_weights) {
    return {.value = value.data(),
            .grad = grad.data(),
            .first = first.data(),
            .second = adamw ? second.data() : nullptr,
            .master = master_weights ? master.data() : nullptr,
            .elements = value.size()};
  }
  bool operator==(const host_parameter&) const = default;
};

}  // namespace

TEST_CASE("optimizer phase: a skipped step writes nothing, a clean step updates and writes back") {
  for (const bool adamw : {false, true}) {
    for (const bool master : {false, true}) {
      for (const bool param_fp32 : {false, true}) {
        if (master && param_fp32) continue;  // the trainer keeps master weights only for a non-fp32 parameter
        INFO("adamw " << adamw << ", master weights " << master << ", fp32 parameter " << param_fp32);
        const optimizer_phase_options o{.adamw = adamw, .master_weights = master, .param_is_fp32 = param_fp32};
        std::vector<host_parameter> params = {host_parameter(1, 300), host_parameter(2, 17)};
        const std::vector<host_parameter> before = params;
        std::vector<parameter_buffers> bufs;
        for (host_parameter& p : params) bufs.push_back(p.buffers(adamw, master));

        std::int32_t found_inf = 1;
        host_backend backend{.expected_flag = &found_inf};
        optimizer_phase(backend, bufs, o, &found_inf);
        CHECK(params == before);  // weights, master copy, momentum and second moment: bit for bit
        const int writes_per_parameter = 1 + (master || !param_fp32 ? 1 : 0);
        CHECK(backend.calls == 2 * writes_per_parameter);
        CHECK(backend.calls_with_flag == backend.calls);  // every write predicated on the scaler's flag

        found_inf = 0;
        optimizer_phase(backend, bufs, o, &found_inf);
        CHECK(params[0].first != before[0].first);  // the optimizer ran
        if (master) {
          CHECK(params[0].master != before[0].master);
          CHECK(params[0].value != before[0].value);  // written back from the updated master
        } else {
          CHECK(params[0].value != before[0].value);
          CHECK(params[0].master == before[0].master);  // no master copy: untouched
        }
      }
    }
  }
}
