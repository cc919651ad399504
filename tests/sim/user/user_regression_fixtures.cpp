// Writes the .npy fixtures of scenarios/user-regression.json (a model of the user's own shape: 3 linear layers
// with GELU and layer norm, mse regression):
//   user_regression_fixtures --write-fixtures scenarios/user-regression
// x.npy (96, 6) float32: x[k] = sin(0.37 (k + 1)) over the row-major index k;
// y.npy (96, 2) float32: y0 = 0.5 (x0 + x1 + x2 + x3), y1 = -x0 per row (in double from the unrounded x, then
// rounded once to float). The CTest sim_user_regression_fixtures rewrites them into a temporary folder and
// compares the bytes with the committed ones; they are also byte for byte tests/sim/report/data/npy/user_x.npy
// and user_y.npy, written independently by make_fixtures.py with Python's struct module.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "safeamp/sim/npy.hpp"

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--write-fixtures") {
    std::fprintf(stderr, "usage: %s --write-fixtures DIR\n", argv[0]);
    return 2;
  }
  constexpr std::int64_t rows = 96, cols = 6;
  std::vector<double> x(static_cast<std::size_t>(rows * cols));
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.37 * static_cast<double>(k + 1));
  std::vector<float> xf(x.begin(), x.end()), yf;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    yf.push_back(static_cast<float>(0.5 * (row[0] + row[1] + row[2] + row[3])));
    yf.push_back(static_cast<float>(-row[0]));
  }
  const std::filesystem::path dir = argv[2];
  std::filesystem::create_directories(dir);
  const std::vector<std::int64_t> x_shape = {rows, cols}, y_shape = {rows, 2};
  std::ofstream(dir / "x.npy", std::ios::binary) << safeamp::sim::npy_bytes(x_shape, xf);
  std::ofstream(dir / "y.npy", std::ios::binary) << safeamp::sim::npy_bytes(y_shape, yf);
  return 0;
}
