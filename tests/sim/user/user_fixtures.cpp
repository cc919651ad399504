// Writes the .npy fixtures of the bring-your-own-model scenarios, so that neither CI nor regenerating them needs
// Python:
//   user_fixtures regression --write-fixtures scenarios/user-regression
//     x.npy (96, 6) float32: x[k] = sin(0.37 (k + 1)) over the row-major index k; y.npy (96, 2) float32:
//     y0 = 0.5 (x0 + x1 + x2 + x3), y1 = -x0 per row (in double from the unrounded x, then rounded once to
//     float). Byte for byte tests/sim/report/data/npy/user_x.npy and user_y.npy, which make_fixtures.py writes
//     independently with Python's struct module.
//   user_fixtures tokens --write-fixtures tests/sim/user/data/tokens
//     x.npy (64, 8) int32 token ids x[r][k] = (5 r + 3 k) mod 16, y.npy (64, 8) int32 the next id of each
//     position, (x + 3) mod 16 (scenario user_tokens.json, vocab 16, context 8); and one broken file per refusal
//     of token inputs: bad_float.npy (the ids as float32), bad_range.npy (x with id 16 at [5, 3]),
//     bad_shape.npy (64, 7).
// The CTests sim_user_regression_fixtures and sim_user_token_fixtures rewrite them into a temporary folder and
// compare the bytes with the committed ones.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "safeamp/sim/npy.hpp"

namespace {

namespace fs = std::filesystem;

template <class T>
void save(const fs::path& file, std::int64_t rows, std::int64_t cols, const std::vector<T>& values) {
  const std::vector<std::int64_t> shape = {rows, cols};
  std::ofstream(file, std::ios::binary) << safeamp::sim::npy_bytes(shape, values);
}

void write_regression(const fs::path& dir) {
  constexpr std::int64_t rows = 96, cols = 6;
  std::vector<double> x(static_cast<std::size_t>(rows * cols));
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.37 * static_cast<double>(k + 1));
  const std::vector<float> xf(x.begin(), x.end());
  std::vector<float> yf;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    yf.push_back(static_cast<float>(0.5 * (row[0] + row[1] + row[2] + row[3])));
    yf.push_back(static_cast<float>(-row[0]));
  }
  save(dir / "x.npy", rows, cols, xf);
  save(dir / "y.npy", rows, 2, yf);
}

void write_tokens(const fs::path& dir) {
  constexpr std::int32_t rows = 64, context = 8, vocab = 16;
  std::vector<std::int32_t> x, y;
  for (std::int32_t r = 0; r < rows; ++r) {
    for (std::int32_t k = 0; k < context; ++k) {
      x.push_back((5 * r + 3 * k) % vocab);
      y.push_back((5 * r + 3 * (k + 1)) % vocab);
    }
  }
  save(dir / "x.npy", rows, context, x);
  save(dir / "y.npy", rows, context, y);
  save(dir / "bad_float.npy", rows, context, std::vector<float>(x.begin(), x.end()));
  std::vector<std::int32_t> out_of_range = x;
  out_of_range[5 * context + 3] = vocab;
  save(dir / "bad_range.npy", rows, context, out_of_range);
  save(dir / "bad_shape.npy", rows, context - 1, std::vector<std::int32_t>(x.begin(), x.end() - rows));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string set = argc == 4 ? argv[1] : "";
  if ((set != "regression" && set != "tokens") || std::string(argv[2]) != "--write-fixtures") {
    std::fprintf(stderr, "usage: %s regression|tokens --write-fixtures DIR\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[3];
  fs::create_directories(dir);
  if (set == "regression") {
    write_regression(dir);
  } else {
    write_tokens(dir);
  }
  return 0;
}
