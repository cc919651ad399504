// Token ids from the user's .npy files into a stack that starts with an embedding: the files are read as
// written (int32 and int64, rows of `context` ids), served in order as batches of sequences, a stack learns from
// them, and every bad file or setting is refused naming the field, the file and the element.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/npy.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp;
using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {

constexpr std::int32_t rows = 32, context = 4, vocab = 8;

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("safeamp-token-inputs-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

std::string int32_file(const fs::path& p, std::int64_t r, std::int64_t c, const std::vector<std::int32_t>& v) {
  const std::vector<std::int64_t> shape = {r, c};
  return write(p, npy_bytes(shape, v));
}

// x[r][k] = (3 r + k) mod 8; the target of each position is the next id, (x + 1) mod 8.
std::vector<std::int32_t> ids(std::int32_t shift) {
  std::vector<std::int32_t> v;
  for (std::int32_t r = 0; r < rows; ++r) {
    for (std::int32_t k = 0; k < context; ++k) v.push_back((3 * r + k + shift) % vocab);
  }
  return v;
}

// A stack over token files: embedding (width 8, context 4, vocab 8), one block, a final layer norm, the head.
run_config token_run(const std::string& inputs, const std::string& targets) {
  run_config c;
  c.model = model_kind::stack;
  c.data.inputs_path = inputs;
  c.data.targets_path = targets;
  layer_spec e;
  e.kind = layer_kind::embedding;
  e.width = 8;
  e.context = context;
  e.vocab = vocab;
  layer_spec b;
  b.kind = layer_kind::transformer_block;
  b.heads = 2;
  b.ffn_multiplier = 2;
  layer_spec n;
  n.kind = layer_kind::layer_norm;
  c.stack.layers = {e, b, n, layer_spec{}};  // the last: a linear head, its width the vocabulary
  c.policy = presets::fp16_mixed;
  c.scaler.kind = scaler_kind::dynamic;
  c.optimizer = torch_adamw(1e-2);
  c.steps = 80;
  c.batch_size = 8;
  c.data.probe_rows = 2;
  return c;
}

std::string error_of(const run_config& c) {
  try {
    check_data_files(c);
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("token files: read as written, served as batches of sequences in row order", "[tokens]") {
  const fs::path dir = temp_dir();
  const std::string x = int32_file(dir / "x.npy", rows, context, ids(0));
  // int64 targets, written with numpy's header by hand: '<i8', the same ids shifted by one.
  std::string y_bytes = npy_bytes(std::vector<std::int64_t>{rows, context}, ids(1));
  const std::string i4 = "'<i4'";
  y_bytes.replace(y_bytes.find(i4), i4.size(), "'<i8'");
  // The data start after the 10-byte preamble and the header length (little-endian uint16 at bytes 8-9); each
  // non-negative int32 becomes an int64 by four zero bytes above it.
  const std::size_t start = 10 + static_cast<unsigned char>(y_bytes[8]) + 256u * static_cast<unsigned char>(y_bytes[9]);
  const std::string data = y_bytes.substr(start);
  y_bytes.resize(start);
  for (std::size_t i = 0; i < data.size(); i += 4) y_bytes += data.substr(i, 4) + std::string(4, '\0');
  const std::string y = write(dir / "y.npy", y_bytes);
  REQUIRE(read_npy(y, "y").integers.size() == static_cast<std::size_t>(rows * context));

  const file_data d(token_run(x, y).data, loss_kind::cross_entropy, {.context = context, .vocab = vocab});
  CHECK(d.output_width() == vocab);
  CHECK(d.input_width() == 0);
  // Batch 1 of 3 sequences: rows 3, 4, 5 (rows [s B, s B + B)), each row's ids, then every position's target.
  const batch b = d.train_batch({.step = 1, .samples = 3});
  CHECK(b.samples == 3);
  REQUIRE(b.tokens.size() == 3u * context);
  CHECK(b.tokens[0] == 9 % vocab);                    // row 3, position 0: 3*3 + 0 = 9
  CHECK(b.tokens[context + 2] == (12 + 2) % vocab);   // row 4, position 2
  CHECK(b.targets[context + 2] == (12 + 3) % vocab);  // its next id
  CHECK(b.targets.size() == b.tokens.size());
  CHECK(b.slices == std::vector<std::int32_t>(3u * context, 0));
  CHECK(b.features.size() == 0);
  // Rows wrap around: batch 10 of 4 starts at row 40 mod 32 = 8.
  CHECK(d.train_batch({.step = 10, .samples = 4}).tokens[0] == (3 * 8) % vocab);
  CHECK(d.eval_set().tokens.size() == static_cast<std::size_t>(rows * context));
  CHECK(d.probe().samples == 2);
  fs::remove_all(dir);
}

TEST_CASE("a stack that starts with an embedding learns from token files", "[tokens]") {
  const fs::path dir = temp_dir();
  run_config c =
      token_run(int32_file(dir / "x.npy", rows, context, ids(0)), int32_file(dir / "y.npy", rows, context, ids(1)));
  CHECK_NOTHROW(check_data_files(c));
  const run_result r = train(c);
  // Next id = id + 1 mod 8 is a function of the current token: from ln 8 = 2.08 to every prediction right.
  INFO("first loss " << r.steps.front().loss << ", held-out " << r.final_eval.loss);
  CHECK(r.steps.front().loss > 1.5);
  CHECK(r.final_eval.loss < 0.2);
  CHECK(r.final_eval.accuracy == 1.0);
  CHECK(r.probe_logits.size() == 2u * context * vocab);

  // The vocabulary is part of the run's fingerprint (a reference of another vocabulary is not reused).
  const std::uint64_t before = run_fingerprint(c);
  c.stack.layers.front().vocab = vocab + 1;
  CHECK(run_fingerprint(c) != before);
  fs::remove_all(dir);
}

TEST_CASE("token files: every refusal names the field, the file and what is accepted", "[tokens]") {
  const fs::path dir = temp_dir();
  const std::string x = int32_file(dir / "x.npy", rows, context, ids(0));
  const std::string y = int32_file(dir / "y.npy", rows, context, ids(1));
  const std::vector<std::int32_t> x_ids = ids(0);
  const std::vector<float> as_float(x_ids.begin(), x_ids.end());
  const std::string xf = write(dir / "xf.npy", npy_bytes(std::vector<std::int64_t>{rows, context}, as_float));
  CHECK_THAT(error_of(token_run(xf, y)), Catch::Contains("data.inputs '" + xf + "' dtype is float of shape (32, 4)") &&
                                             Catch::Contains("int32 or int64 token ids of shape (rows, 4)"));
  std::vector<std::int32_t> bad = ids(1);
  bad[2 * context + 1] = vocab;  // row 2, position 1: one past the last id
  const std::string yr = int32_file(dir / "yr.npy", rows, context, bad);
  CHECK_THAT(error_of(token_run(x, yr)), Catch::Contains("data.targets '" + yr + "' element [2, 1] is 8") &&
                                             Catch::Contains("a token id in [0, 8)"));
  bad[2 * context + 1] = -1;
  const std::string xn = int32_file(dir / "xn.npy", rows, context, bad);
  CHECK_THAT(error_of(token_run(xn, y)), Catch::Contains("data.inputs '" + xn + "' element [2, 1] is -1"));
  const std::string x5 = int32_file(dir / "x5.npy", rows / 2, 2 * context, ids(0));
  CHECK_THAT(error_of(token_run(x5, y)),
             Catch::Contains("data.inputs '" + x5 + "' shape is (16, 8)") && Catch::Contains("(rows, 4)"));
  const std::string yfew = int32_file(dir / "yfew.npy", rows / 2, context, std::vector<std::int32_t>(64, 1));
  CHECK_THAT(error_of(token_run(x, yfew)), Catch::Contains("data.targets '" + yfew + "' shape is (16, 4)") &&
                                               Catch::Contains("one target row per input row (32 rows"));

  // Settings: the vocabulary is required with token files and refused on the corpus; token inputs are classified.
  run_config c = token_run(x, y);
  c.stack.layers.front().vocab = 0;
  CHECK_THROWS_WITH(validate(c), Catch::Contains("model.layers[0].vocab is 0"));
  c = token_run(x, y);
  c.loss = loss_kind::mse;
  CHECK_THROWS_WITH(validate(c), Catch::Contains("training loss is mse") && Catch::Contains("cross_entropy for token"));
  c = token_run(x, y);
  c.data.inputs_path.clear();
  c.data.targets_path.clear();
  CHECK_THROWS_WITH(validate(c), Catch::Contains("model.layers[0].vocab is 8") && Catch::Contains("on the corpus"));
  c.stack.layers.front().vocab = 0;
  CHECK_NOTHROW(validate(c));  // the corpus, as before
  // A head of another width than the vocabulary.
  c = token_run(x, y);
  c.stack.layers.back().out = 5;
  CHECK_THAT(error_of(c), Catch::Contains("model.layers[3].out is 5") && Catch::Contains("8 (the width of the data"));
  fs::remove_all(dir);
}

TEST_CASE("npy: the int32 writer round-trips through the reader", "[npy][tokens]") {
  const std::vector<std::int64_t> shape = {2, 3};
  const std::vector<std::int32_t> v = {0, 7, -3, 2147483647, -2147483647 - 1, 65};
  const npy_array a = parse_npy(npy_bytes(shape, v), "x");
  CHECK(a.is_integer);
  CHECK(a.shape == shape);
  CHECK(a.integers == std::vector<std::int64_t>(v.begin(), v.end()));
  CHECK(npy_bytes(shape, v).find("'descr': '<i4'") != std::string::npos);
}
