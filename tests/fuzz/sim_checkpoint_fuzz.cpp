// libFuzzer: the simulator's binary checkpoint reader (load_checkpoint), for a fixed small model (MLP 4-8-3,
// AdamW with fp32 master weights: every kind of tensor). Either it throws safeamp::error and leaves the model
// untouched, or everything it restored is in range: next step within the run, one history record per step,
// finite parameters. The input is written to a file first (the reader takes a path), in /dev/shm where there is
// one. Inputs whose first byte is even get their trailing checksum recomputed, so that mutations reach the field
// checks behind it instead of all stopping at the checksum; odd ones are written as they are.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "safeamp/error.hpp"
#include "safeamp/sim/checkpoint.hpp"
#include "safeamp/sim/models.hpp"
#include "safeamp/sim/optimizer.hpp"
#include "safeamp/sim/report_files.hpp"

namespace {

constexpr std::int64_t run_steps = 50;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace safeamp::sim;
  static const std::string path = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                                   "/safeamp-fuzz-sim-checkpoint-" + std::to_string(::getpid()) + ".ckpt";
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size > 8 && (data[0] & 1u) == 0) {
    const std::uint64_t sum = fnv1a64(std::string_view(bytes).substr(0, size - 8));
    std::memcpy(bytes.data() + size - 8, &sum, sizeof sum);
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) (void)std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);

  run_config cfg;
  cfg.mlp = mlp_shape{.input_dim = 4, .hidden_dim = 8, .hidden_layers = 1, .classes = 3,
                      .activation = activation_kind::gelu};
  cfg.optimizer.kind = optimizer_kind::adamw;
  cfg.policy = safeamp::precision_policy{};
  const auto net = make_mlp(cfg.mlp, 1, cfg.policy.param);
  parameter_list params = net->parameters();
  optimizer opt(cfg.optimizer, cfg.policy, /*master_weights=*/true, params);
  optimizer_state state = opt.state();
  const parameter_list before = params;
  try {
    const checkpoint_data meta = load_checkpoint(path, params, state, run_steps);
    if (meta.next_step < 0 || meta.next_step > run_steps) __builtin_trap();
    if (meta.history.size() != static_cast<std::size_t>(meta.next_step)) __builtin_trap();
    if (state.updates < 0 || state.updates > meta.next_step) __builtin_trap();
    for (const parameter& p : params) {
      for (Eigen::Index i = 0; i < p.value.size(); ++i) {
        if (!std::isfinite(p.value.data()[i])) __builtin_trap();
      }
    }
  } catch (const safeamp::error& e) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!(params[i].value == before[i].value)) __builtin_trap();  // a refused file restores nothing
    }
    if (std::string(e.what()).size() > 8192) __builtin_trap();
  }
  return 0;
}
