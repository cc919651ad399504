// The seed's mixed-precision step in C++ with safeamp's autocast: Linear(16, 1), AdamW (PyTorch's update and
// defaults), dynamic loss scaling, fp16 autocast, mse loss, unscale, clip to 1.0 (torch's clip_grad_norm_),
// step, update. The PyTorch version, for comparison, is 14 lines:
//   import torch
//   import torch.nn.functional as F
//   model = torch.nn.Linear(16, 1).cuda()
//   opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
//   scaler = torch.cuda.amp.GradScaler()
//   for step in range(200):
//       opt.zero_grad()
//       with torch.autocast("cuda", dtype=torch.float16):
//           loss = F.mse_loss(model(x), y)
//       scaler.scale(loss).backward()
//       scaler.unscale_(opt)
//       torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
//       scaler.step(opt)
//       scaler.update()
// The C++ step is 20 lines (1.43x), counted by the same rule on both sides: every line that is not blank and not
// only a comment, from the imports (here the first three #includes and the two using-directives) to the end of
// the loop (its closing brace too), less what neither side shows: the data x and y, the fixture writer and the
// argument handling, this example's own checks, and the headers they need (the lines marked `// not counted`).
// The 20 include one line torch does not have: the deterministic initial weight (torch's Linear draws its
// own), which the scenario's fixtures need. The CTest example_sim_seed_amp_step_lines counts the lines of the
// blocks that start with `// seed step` comments and end at a blank line or `// end of the seed step`.
// (torch's Linear.weight is (1, 16); here the weight is (in, out) = (16, 1), its transpose. Under a stochastic
// rounding policy, call ac.begin_step(step) first in the loop: the random bits are keyed by the step.)
// The same step runs as a scenario: scenarios/seed-amp-step.json, whose .npy fixtures (x, y, the initial weight
// and bias) this program writes with `example_sim_seed_amp_step --write-fixtures scenarios/seed-amp-step`.
// Exits 1 unless the loss falls by 100x with no step skipped after the first few.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "safeamp/sim/npy.hpp"  // for the fixture writer

// seed step imports:
#include "safeamp/safeamp.hpp"
#include "safeamp/sim/autocast.hpp"
#include "safeamp/sim/optimizer.hpp"
using namespace safeamp;
using namespace safeamp::sim;

namespace {

constexpr int rows = 64, features = 16;

// The seed's data, a pure function of the indices: x = sin(0.37 k), y = x . w_true + 0.1.
void make_data(matrix& x, matrix& y) {
  x.resize(rows, features);
  y.resize(rows, 1);
  for (int r = 0; r < rows; ++r) {
    double t = 0.1;
    for (int j = 0; j < features; ++j) {
      x(r, j) = static_cast<float>(std::sin(0.37 * (r * features + j + 1)));
      t += x(r, j) * ((j % 4) - 1.5) / 4.0;
    }
    y(r, 0) = static_cast<float>(t);
  }
}

void write_fixtures(const std::filesystem::path& dir, const matrix& x, const matrix& y, const parameter_list& params) {
  std::filesystem::create_directories(dir);
  const auto save = [&dir](const char* name, std::vector<std::int64_t> shape, const matrix& m) {
    std::ofstream(dir / name, std::ios::binary) << npy_bytes(shape, span_of(m));
  };
  save("x.npy", {rows, features}, x);
  save("y.npy", {rows, 1}, y);
  save("weight.npy", {features, 1}, params[0].value);
  save("bias.npy", {1}, params[1].value);
}

}  // namespace

int main(int argc, char** argv) {
  matrix x, y;
  make_data(x, y);
  // seed step: Linear(16, 1) as fc.weight (16, 1) = 0.05 cos(j) and fc.bias 0
  parameter_list params;
  (void)make_linear(params, "fc", features, 1);
  for (int j = 0; j < features; ++j) params[0].value(j, 0) = static_cast<float>(0.05 * std::cos(j));
  if (argc == 3 && std::string(argv[1]) == "--write-fixtures") {  // not counted
    write_fixtures(argv[2], x, y, params);                        // not counted
    return 0;                                                     // not counted
  }                                                               // not counted
  autocast ac(presets::fp16_mixed);
  sim::optimizer opt(torch_adamw(1e-2), ac.policy(), true, params);
  loss_scaler scaler(scaler_presets::pytorch);
  double first = 0.0, last = 0.0;  // not counted
  int skipped_late = 0;            // not counted
  for (int step = 0; step < 200; ++step) {
    matrix dy;
    const double loss = ac.mse_loss(ac.linear(x, params[0].value, params[1].value), y, scaler.scale(), &dy);
    ac.linear_backward(x, params[0], params[1], dy);
    for (const std::span<float> g : grad_spans(params)) (void)scaler.unscale(g);
    (void)clip_grad_norm_torch(grad_spans(params), 1.0);
    const step_report r = scaler.step([&] { opt.step(ac.context(), params); });
    (void)scaler.update();
    first = step == 0 ? loss : first;                    // not counted
    last = loss;                                         // not counted
    skipped_late += (!r.applied && step >= 20) ? 1 : 0;  // not counted
  }
  // end of the seed step
  std::printf(
      "seed step: mse %.6g -> %.6g after 200 steps, scale %g, %llu casts (%llu underflows in the loss "
      "gradient), %d late skips\n",
      first, last, static_cast<double>(scaler.scale()), static_cast<unsigned long long>(ac.casts()),
      static_cast<unsigned long long>(ac.counts(op_class::loss).underflow), skipped_late);
  return last < first / 100.0 && skipped_late == 0 ? 0 : 1;
}
