// Prints the bits of short simulator runs, one line per run, so that two builds of the simulator (default
// flags and -march=native, see CMakeLists.txt) can be compared by compare_bits.cmake. Runs: the MLP and the
// transformer in fp32, fp16-mixed with dynamic scaling (and clipping) and bf16 parameters with stochastic
// casts and stochastic write-back; plus the emulated GEMM alone. Exit 1 when a run is not a real test of the
// numerics (non-finite loss, nothing learned); `--skip <reason>` exits 77 (CTest's skip code). Its casts are fp16
// and bf16: the -march=native copy compiles only those kernel units (CMakeLists.txt); a run of another format needs
// its unit added there.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "safeamp/policy.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/trainer.hpp"
#include "sim/engine/sim_test_util.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

std::uint64_t bits_of(double v) { return safeamp::bit_cast<std::uint64_t>(v); }

run_config fp16_dynamic(run_config c) {
  c.policy = presets::fp16_mixed;
  c.scaler.kind = scaler_kind::dynamic;
  c.scaler.dynamic = scaler_presets::pytorch;
  c.scaler.dynamic.growth_interval = 3;
  c.clip_norm = 1.0;  // the global norm (a double sum of squares) is on the path too
  return c;
}

run_config bf16_stochastic(run_config c) {
  c.policy = presets::bf16_mixed;
  c.policy.param = bf16;  // bf16 weights, so that the write-back rounds
  c.rounding.mode = rounding::stochastic;
  c.optimizer.kind = optimizer_kind::adamw;
  c.optimizer.learning_rate = 3e-3;
  c.optimizer.weight_decay = 0.01;
  c.optimizer.stochastic_write_back = true;
  return c;
}

// One line: label, weights hash, every step's loss bits, held-out loss bits, a hash of the probe logits.
bool print_run(const std::string& label, const run_config& cfg) {
  const run_result r = train(cfg);
  std::printf("%s weights=%016" PRIx64 " losses=", label.c_str(), r.weights_hash);
  for (const step_record& s : r.steps) std::printf("%016" PRIx64 ",", bits_of(s.loss));
  std::printf(" norm=%016" PRIx64 " eval=%016" PRIx64 " probe=%016" PRIx64 "\n",
              bits_of(r.steps.back().grad_norm_before_clip), bits_of(r.final_eval.loss), hash_bits(r.probe_logits));
  const bool ok = std::isfinite(r.final_eval.loss) && r.final_eval.loss < r.steps.front().loss;
  if (!ok) std::fprintf(stderr, "%s: the run did not learn (held-out loss %g)\n", label.c_str(), r.final_eval.loss);
  return ok;
}

// The emulated GEMM alone: (300 x 513) (513 x 70) with alpha and beta, 2 threads (three row blocks), K long
// enough for any blocking of K to show.
void print_gemm(const std::string& label, const gemm_formats& f) {
  matrix a(300, 513), b(513, 70), d(300, 70);
  init_normal(a, 1.0, 7, 1, fp32);
  init_normal(b, 1.0, 7, 2, fp32);
  init_normal(d, 1.0, 7, 3, fp32);
  (void)gemm(f, a, b, d, {.alpha = 0.75f, .beta = 0.25f, .threads = 2});
  std::printf("%s d=%016" PRIx64 "\n", label.c_str(), hash_bits(span_of(d)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--skip") == 0) {
    std::printf("skipped: %s\n", argv[2]);
    return 77;
  }
#if defined(__FMA__) || defined(__AVX512F__)
  std::fprintf(stderr, "bits_probe: built with FMA%s\n",
#if defined(__AVX512F__)
               " and AVX-512"
#else
               ""
#endif
  );
#endif
  print_gemm("gemm-fp32", {fp32, fp32, fp32});
  print_gemm("gemm-bf16", {bf16, fp32, bf16});

  run_config mlp = sim_test::mlp_config(presets::fp32, 8);
  mlp.threads = 2;
  run_config tf = sim_test::transformer_config(presets::fp32, 4);
  tf.threads = 2;
  bool ok = true;
  ok = print_run("mlp-fp32", mlp) && ok;
  ok = print_run("mlp-fp16-dynamic", fp16_dynamic(mlp)) && ok;
  ok = print_run("mlp-bf16-stochastic", bf16_stochastic(mlp)) && ok;
  ok = print_run("transformer-fp32", tf) && ok;
  ok = print_run("transformer-fp16-dynamic", fp16_dynamic(tf)) && ok;
  ok = print_run("transformer-bf16-stochastic", bf16_stochastic(tf)) && ok;
  return ok ? 0 : 1;
}
