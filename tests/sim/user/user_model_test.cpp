// Bring your own model: the .npy reader (what numpy.save writes, byte by byte, and every refusal), a described
// layer stack that spells out the MLP or the transformer preset trains to the preset's bits, a regression stack
// of the user's shape (3 linear layers, GELU, layer norm, mse) learns from .npy files, initial weights are loaded
// as given.
#include <unistd.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/models.hpp"
#include "safeamp/sim/npy.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp;
using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {

// A .npy file built by hand: magic, version 1.0, header length (LE uint16), header text, data bytes.
std::string npy_file(const std::string& header_dict, const std::string& data) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

std::string le32(std::uint32_t v) {
  std::string s;
  for (int k = 0; k < 4; ++k) s += static_cast<char>((v >> (8 * k)) & 0xff);
  return s;
}
std::string be64(std::uint64_t v) {
  std::string s;
  for (int k = 7; k >= 0; --k) s += static_cast<char>((v >> (8 * k)) & 0xff);
  return s;
}

std::string error_of(const std::string& bytes) {
  try {
    (void)parse_npy(bytes, "data.inputs 'x.npy'");
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "no error";
}

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("safeamp-user-model-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

}  // namespace

TEST_CASE("npy: what numpy.save writes is read exactly", "[npy]") {
  // numpy.save(f, np.array([[1, 2, 3], [4, 5, 6.5]], dtype='<f4')): little-endian float32, C order.
  std::string data;
  for (const float v : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.5f}) data += le32(std::bit_cast<std::uint32_t>(v));
  const npy_array a = parse_npy(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data), "x");
  REQUIRE(a.shape == std::vector<std::int64_t>{2, 3});
  CHECK(a.values == std::vector<float>{1, 2, 3, 4, 5, 6.5f});
  CHECK_FALSE(a.is_integer);

  // Big-endian float64 and Fortran order: column-major [[1, 2], [3, 4]] is stored 1, 3, 2, 4.
  std::string d64;
  for (const double v : {1.0, 3.0, 2.0, 4.0}) d64 += be64(std::bit_cast<std::uint64_t>(v));
  const npy_array b = parse_npy(npy_file("{'descr': '>f8', 'fortran_order': True, 'shape': (2, 2), }", d64), "x");
  CHECK(b.values == std::vector<float>{1, 2, 3, 4});

  // int64 class indices, shape (3,).
  std::string di;
  for (const std::int64_t v : {0, 2, 1}) di += le32(static_cast<std::uint32_t>(v)) + le32(0);
  const npy_array c = parse_npy(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", di), "y");
  CHECK(c.is_integer);
  CHECK(c.integers == std::vector<std::int64_t>{0, 2, 1});

  // The writer round-trips through the reader.
  const std::vector<std::int64_t> shape = {2, 2};
  const std::vector<float> v = {0.25f, -1.0f, 3.0f, 1e-3f};
  const npy_array w = parse_npy(npy_bytes(shape, v), "w");
  CHECK(w.shape == shape);
  CHECK(w.values == v);
  CHECK(npy_bytes(shape, v).size() % 64 == 16);  // 64-byte aligned header (10 + 54 + ...) then 16 data bytes
}

TEST_CASE("npy: bad files are refused naming the file and the field", "[npy]") {
  const std::string one = le32(std::bit_cast<std::uint32_t>(1.0f));
  const std::string ok_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  CHECK_THAT(error_of("PK\x03\x04 not npy"), Catch::Contains("data.inputs 'x.npy' magic"));
  CHECK_THAT(error_of(npy_file("{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", one)),
             Catch::Contains("dtype is '<i2'") && Catch::Contains("float32 or float64"));
  CHECK_THAT(error_of(npy_file(ok_header, one)),
             Catch::Contains("data is truncated: 4 bytes") && Catch::Contains("8 bytes (2 elements of 4 bytes)"));
  CHECK_THAT(error_of(npy_file(ok_header, one + one + one)), Catch::Contains("longer than its header says"));
  const std::string nan = le32(0x7fc00000u);
  CHECK_THAT(error_of(npy_file(ok_header, one + nan)), Catch::Contains("element [1] is NaN"));
  // A (4, 3) array in Fortran order stores column by column: its 3rd stored value is element [2, 0], not [0, 2].
  std::string column_major;
  for (int k = 0; k < 12; ++k) column_major += k == 2 ? nan : one;
  CHECK_THAT(error_of(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }", column_major)),
             Catch::Contains("element [2, 0] is NaN"));
  CHECK_THAT(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", column_major)),
             Catch::Contains("element [0, 2] is NaN"));
  CHECK_THAT(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }", one)),
             Catch::Contains("shape is more than 67108864 elements"));
  CHECK_THAT(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2), }", one + one)),
             Catch::Contains("3 dimensions"));
  CHECK_THAT(error_of(npy_file("{'descr': '<f4', 'shape': (2,), }", one + one)),
             Catch::Contains("missing 'fortran_order'"));
  CHECK_THAT(error_of(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,", "")),
             Catch::Contains("header is malformed"));
  // float64 beyond float's range.
  std::string huge =
      npy_file("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", be64(std::bit_cast<std::uint64_t>(1e300)));
  CHECK_THAT(error_of(huge), Catch::Contains("beyond float's range"));
  // Header length beyond the file.
  CHECK_THAT(error_of(std::string("\x93NUMPY\x01\x00\xff\x00{", 11)), Catch::Contains("header is truncated"));
}

TEST_CASE("a described stack that spells out the MLP preset trains to the preset's bits", "[stack]") {
  run_config preset;
  preset.model = model_kind::mlp;
  preset.mlp = mlp_shape{
      .input_dim = 8, .hidden_dim = 16, .hidden_layers = 2, .classes = 4, .activation = activation_kind::gelu};
  preset.policy = presets::fp16_mixed;
  preset.scaler.kind = scaler_kind::dynamic;
  preset.steps = 6;
  preset.batch_size = 32;
  preset.data.eval_samples = 64;
  run_config described = preset;
  described.model = model_kind::stack;
  described.stack.input_dim = 8;
  const auto layer = [](layer_kind k, std::string name, std::int64_t out) {
    layer_spec l;
    l.kind = k;
    l.name = std::move(name);
    l.out = out;
    return l;
  };
  described.stack.layers = {layer(layer_kind::linear, "fc0", 16), layer(layer_kind::activation, "", 0),
                            layer(layer_kind::linear, "fc1", 16), layer(layer_kind::activation, "", 0),
                            layer(layer_kind::linear, "head", 0)};
  const run_result a = train(preset);
  const run_result b = train(described);
  CHECK(a.weights_hash == b.weights_hash);
  REQUIRE(a.steps.size() == b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) CHECK(a.steps[i].loss == b.steps[i].loss);
  CHECK(a.probe_logits == b.probe_logits);
  // A different stack (ReLU in place of the second GELU) gives other bits: the comparison can fail.
  described.stack.layers[3].activation = activation_kind::relu;
  CHECK(train(described).weights_hash != a.weights_hash);
}

TEST_CASE("a described embedding + transformer_block stack trains to the transformer preset's bits", "[stack]") {
  // The preset: pre-norm decoder, 2 blocks of width 16 and 2 heads, context 8, on the GPL-3 corpus; fp16-mixed
  // with dynamic scaling and AdamW so every layer's casts, the scaler and the optimizer are on the path.
  run_config preset;
  preset.model = model_kind::transformer;
  preset.transformer = transformer_shape{.context = 8, .width = 16, .heads = 2, .layers = 2, .ffn_multiplier = 2};
  preset.policy = presets::fp16_mixed;
  preset.scaler.kind = scaler_kind::dynamic;
  preset.optimizer.kind = optimizer_kind::adamw;
  preset.optimizer.learning_rate = 3e-3;
  preset.steps = 5;
  preset.batch_size = 4;
  preset.data.eval_samples = 8;
  preset.data.probe_rows = 2;
  // The same model spelled out layer by layer, as a scenario's "layers" would give it: embedding (width,
  // context), two transformer_block layers (heads, ffn_multiplier), a final layer norm and the head (out 0:
  // the vocabulary). The names are the preset's; the bits do not depend on them (parameters draw their
  // initial values from their position in the stack).
  run_config described = preset;
  described.model = model_kind::stack;
  const auto layer = [&described](layer_kind k, std::string name) -> layer_spec& {
    layer_spec& l = described.stack.layers.emplace_back();
    l.kind = k;
    l.name = std::move(name);
    return l;
  };
  layer_spec& e = layer(layer_kind::embedding, "embed");
  e.width = 16;
  e.context = 8;
  for (int i = 0; i < 2; ++i) {
    layer_spec& b = layer(layer_kind::transformer_block, "block" + std::to_string(i));
    b.heads = 2;
    b.ffn_multiplier = 2;
  }
  layer(layer_kind::layer_norm, "final_ln");
  layer(layer_kind::linear, "head");
  REQUIRE(preset_stack(described) == preset_stack(preset));  // the spelled-out stack is the preset's expansion
  const run_result a = train(preset);
  const run_result b = train(described);
  REQUIRE(a.steps.size() == 5);
  CHECK(a.weights_hash == b.weights_hash);
  REQUIRE(a.steps.size() == b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    CHECK(a.steps[i].loss == b.steps[i].loss);
    CHECK(a.steps[i].scale == b.steps[i].scale);
  }
  CHECK(a.probe_logits == b.probe_logits);
  CHECK(a.final_eval.loss == b.final_eval.loss);
  // Other bits when the stack differs in a way the parameter shapes do not show (4 heads of width 4 in the
  // second block in place of 2 of width 8: the same weights, another attention), or in an FFN width: the
  // comparison can fail.
  run_config other = described;
  other.stack.layers[2].heads = 4;
  CHECK(train(other).weights_hash != a.weights_hash);
  other = described;
  other.stack.layers[1].ffn_multiplier = 3;
  CHECK(train(other).weights_hash != a.weights_hash);
}

TEST_CASE("the user's shape: 3 linear layers, GELU and layer norm, mse regression from .npy files", "[stack][files]") {
  const fs::path dir = temp_dir();
  // y = sum of the first 4 inputs scaled by 0.5, a second column -x0; 128 rows of 6 features.
  constexpr std::size_t rows = 128, in = 6;
  std::vector<float> x(rows * in), y(rows * 2);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < in; ++j) x[r * in + j] = std::sin(0.37f * static_cast<float>(r * in + j + 1));
    y[r * 2] = 0.5f * (x[r * in] + x[r * in + 1] + x[r * in + 2] + x[r * in + 3]);
    y[r * 2 + 1] = -x[r * in];
  }
  write(dir / "x.npy", npy_bytes(std::vector<std::int64_t>{rows, in}, x));
  write(dir / "y.npy", npy_bytes(std::vector<std::int64_t>{rows, 2}, y));
  run_config c;
  c.model = model_kind::stack;
  c.loss = loss_kind::mse;
  c.data.inputs_path = (dir / "x.npy").string();
  c.data.targets_path = (dir / "y.npy").string();
  c.stack.input_dim = static_cast<std::int64_t>(in);
  const auto add = [&c](layer_kind k, std::int64_t out) {
    layer_spec& l = c.stack.layers.emplace_back();
    l.kind = k;
    l.out = out;
  };
  add(layer_kind::linear, 32);
  add(layer_kind::activation, 0);
  add(layer_kind::layer_norm, 0);
  add(layer_kind::linear, 32);
  add(layer_kind::activation, 0);
  add(layer_kind::linear, 0);  // the head: width 2 from the targets
  c.policy = presets::fp16_mixed;
  c.scaler.kind = scaler_kind::dynamic;
  c.optimizer = torch_defaults(optimizer_kind::adamw_torch);
  c.optimizer.learning_rate = 3e-3;
  c.steps = 150;
  c.batch_size = 32;
  c.clip_norm = 1.0;
  c.clip = clip_mode::torch;
  const run_result r = train(c);
  INFO("first loss " << r.steps.front().loss << ", held-out " << r.final_eval.loss);
  CHECK(std::isfinite(r.final_eval.loss));
  CHECK(r.final_eval.loss < 0.1 * r.steps.front().loss);
  CHECK(r.probe_cols == 2);
  CHECK(r.steps.back().grads.size() == 1 + 8);  // dlogits; linear0, layer_norm2, linear3, linear5: 2 each

  // Initial weights: the head's bias from a file, shape (2,) for a (1, 2) parameter; a wrong shape is refused.
  write(dir / "b.npy", npy_bytes(std::vector<std::int64_t>{2}, std::vector<float>{0.5f, -0.25f}));
  c.data.initial_weights = {{"linear5.bias", (dir / "b.npy").string()}};
  parameter_list params;
  (void)add_parameter(params, "linear5.bias", 1, 2);
  load_initial_weights(c.data, params, fp32);
  CHECK(params[0].value(0, 0) == 0.5f);
  CHECK(params[0].value(0, 1) == -0.25f);
  CHECK_NOTHROW(check_data_files(c));
  c.data.initial_weights = {{"linear0.weight", (dir / "b.npy").string()}};
  CHECK_THROWS_WITH(check_data_files(c), Catch::Contains("data.initial_weights.linear0.weight") &&
                                             Catch::Contains("shape is (2,)") && Catch::Contains("(6, 32)"));
  c.data.initial_weights = {{"linear9.weight", (dir / "b.npy").string()}};
  CHECK_THROWS_WITH(check_data_files(c), Catch::Contains("an unknown parameter") && Catch::Contains("linear5.bias"));
  fs::remove_all(dir);
}

TEST_CASE("the run fingerprint follows the model stack and the bytes of the data files", "[stack][files]") {
  const fs::path dir = temp_dir();
  write(dir / "x.npy", npy_bytes(std::vector<std::int64_t>{4, 2}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  write(dir / "y.npy", npy_bytes(std::vector<std::int64_t>{4}, std::vector<float>{1, 0, 1, 0}));
  run_config c;
  c.model = model_kind::stack;
  c.loss = loss_kind::mse;
  c.stack.input_dim = 2;
  c.stack.layers.emplace_back();  // one linear head
  c.data.inputs_path = (dir / "x.npy").string();
  c.data.targets_path = (dir / "y.npy").string();
  const std::uint64_t before = run_fingerprint(c);
  CHECK(run_fingerprint(c) == before);
  // The same path with other bytes: a checkpoint of the first run is refused on resume.
  write(dir / "y.npy", npy_bytes(std::vector<std::int64_t>{4}, std::vector<float>{1, 0, 1, 1}));
  const std::uint64_t changed = run_fingerprint(c);
  CHECK(changed != before);
  c.stack.layers.front().out = 1;
  CHECK(run_fingerprint(c) != changed);
  c.stack.layers.front().out = 0;
  c.loss = loss_kind::huber;
  CHECK(run_fingerprint(c) != changed);
  // The same bytes in another folder, named by another path (a scenario folder moved, or a run from another
  // working directory): the same settings and fingerprint; the file's name, size and hash, not its folder.
  const std::vector<manifest_setting> here = run_settings(c);
  const fs::path moved = dir / "moved";
  fs::create_directories(moved);
  fs::copy_file(dir / "x.npy", moved / "x.npy");
  fs::copy_file(dir / "y.npy", moved / "y.npy");
  const std::uint64_t fingerprint_here = run_fingerprint(c);
  c.data.inputs_path = (moved / "." / "x.npy").string();
  c.data.targets_path = (moved / "y.npy").string();
  CHECK(run_fingerprint(c) == fingerprint_here);
  CHECK(run_settings(c) == here);
  CHECK(here[2].field == "data.inputs");
  CHECK(here[2].value.rfind("x.npy (", 0) == 0);
  // A file that cannot be read is an error naming its field, not a setting that reads "(unreadable)".
  c.data.targets_path = (moved / "missing.npy").string();
  CHECK_THROWS_WITH(run_fingerprint(c), Catch::Contains("data.targets") && Catch::Contains("cannot be opened"));
  fs::remove_all(dir);
}

// The files' hash reads them in pieces with no size cap: an array file above the 2 GiB that the fingerprint read
// whole until 2026-12-06 (it said "(unreadable)" then, so a changed file went unnoticed) is hashed, in constant
// memory. A sparse file: it takes no disk space; reading its 2^31 + 3 bytes takes a second or two (hidden from the
// program's default run, which the sanitizer build repeats; CTest runs it as sim_user_model_big_file).
TEST_CASE("data files over 2 GiB are hashed whole, and a changed byte at their end changes the hash", "[.][big]") {
  const fs::path dir = temp_dir();
  const fs::path big = dir / "big.npz";
  const std::uintmax_t size = (std::uintmax_t{1} << 31) + 3;
  { std::ofstream(big, std::ios::binary) << "PK"; }
  fs::resize_file(big, size);
  const file_digest d = digest_input_file(big, "data.inputs");
  CHECK(d.bytes == size);
  // FNV-1a 64 of "PK" then zeros, computed here independently of the library: a zero byte leaves h ^ 0 = h, so
  // the zeros multiply h by the prime 2^31 + 1 times (square and multiply, mod 2^64).
  const std::uint64_t prime = 1099511628211ull;
  std::uint64_t h = 14695981039346656037ull;
  h = (h ^ 'P') * prime;
  h = (h ^ 'K') * prime;
  std::uint64_t power = 1, base = prime;
  for (std::uintmax_t e = size - 2; e != 0; e >>= 1, base *= base) {
    if ((e & 1) != 0) power *= base;
  }
  CHECK(d.fnv1a64 == h * power);
  {
    std::fstream f(big, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(size - 1));
    f.put('\x01');
  }
  CHECK(digest_input_file(big, "data.inputs").fnv1a64 != d.fnv1a64);
  // A small file: the same hash as the whole-file reader's bytes.
  write(dir / "s.npy", "abc");
  CHECK(digest_input_file(dir / "s.npy", "f").fnv1a64 == fnv1a64("abc"));
  CHECK(digest_input_file(dir / "s.npy", "f").bytes == 3);
  CHECK_THROWS_WITH(digest_input_file(dir, "data.targets"),
                    Catch::Contains("data.targets") && Catch::Contains("a directory"));
  fs::remove_all(dir);
}

TEST_CASE("a described model in scenario JSON: layers, loss, torch defaults by name, paths beside the scenario",
          "[stack][scenario]") {
  const std::string dir = SAFEAMP_SCENARIOS_DIR;
  const scenario s = parse_scenario(read_whole_file(dir + "/user-regression.json"), dir + "/user-regression.json");
  const run_config& c = s.base;
  CHECK(c.model == model_kind::stack);
  REQUIRE(c.stack.layers.size() == 6);
  CHECK(c.stack.layers[2].kind == layer_kind::layer_norm);
  CHECK(c.stack.layers[5].name == "head");
  CHECK(c.loss == loss_kind::mse);
  CHECK(c.clip == clip_mode::torch);
  CHECK(c.optimizer.kind == optimizer_kind::adamw_torch);
  CHECK(c.optimizer.weight_decay == 0.01);  // PyTorch's default, not given in the file
  CHECK(c.optimizer.learning_rate == 0.003);
  CHECK(c.data.inputs_path == (fs::path(dir) / "user-regression/x.npy").lexically_normal().string());
  const std::string bad = R"({"model": {"kind": "stack", "layers": [{"type": "gelus"}, {"type": "linear"}]},
                              "candidates": [{"name": "a", "policy": "fp16-mixed"}]})";
  CHECK_THROWS_WITH(parse_scenario(bad, "bad.json"),
                    Catch::Contains("model.layers[0].type") && Catch::Contains("did you mean 'gelu'"));
  const std::string regression_without_files = R"({"model": {"kind": "mlp"}, "training": {"loss": "mse"},
                              "candidates": [{"name": "a", "policy": "fp16-mixed"}]})";
  CHECK_THROWS_WITH(parse_scenario(regression_without_files, "r.json"), Catch::Contains("training loss is mse"));
}

// Two layers of one name (given twice, or given as the name another layer gets by default) would give two layers the
// same parameter names, so initial weights and faults named by parameter would reach the first alone and the
// telemetry would list it twice: refused when the scenario is read, naming both layers.
TEST_CASE("layer names are unique: given twice, or given as another layer's default name", "[stack][scenario]") {
  const auto error_of = [](const std::string& layers) {
    try {
      (void)parse_scenario(R"({"model": {"kind": "stack", "input_dim": 4, "layers": )" + layers +
                               R"(}, "data": {"inputs": "x.npy", "targets": "y.npy"}, "training": {"loss": "mse"},
                               "candidates": [{"name": "a", "policy": "fp16-mixed"}]})",
                           "s.json");
    } catch (const safeamp::error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(error_of(R"([{"type": "linear", "name": "fc", "out": 8}, {"type": "gelu"},
                          {"type": "linear", "name": "fc"}])"),
             Catch::Contains("model.layers[2].name is 'fc' (the name of model.layers[0] too)") &&
                 Catch::Contains("a name no other layer has"));
  CHECK_THAT(error_of(R"([{"type": "linear", "name": "linear2", "out": 8}, {"type": "gelu"}, {"type": "linear"}])"),
             Catch::Contains("model.layers[2].name is 'linear2' (the name of model.layers[0] too)"));
  CHECK(error_of(R"([{"type": "linear", "name": "fc", "out": 8}, {"type": "gelu"}, {"type": "linear"}])") ==
        "accepted");
  // Distinct layer names that still spell one parameter name: refused when the model is built.
  model_stack s;
  s.input_dim = 0;
  layer_spec embedding{.kind = layer_kind::embedding, .name = {}, .width = 8, .context = 4};
  layer_spec block{.kind = layer_kind::transformer_block, .name = "b"};
  layer_spec clash{.kind = layer_kind::linear, .name = "b.qkv", .out = 24};
  layer_spec head{.kind = layer_kind::linear, .name = {}};
  s.layers = {embedding, block, clash, head};
  CHECK_THROWS_WITH(make_stack_model(s, 16, 16, 1, fp32),
                    Catch::Contains("parameter 'b.qkv.weight' twice") && Catch::Contains("model.layers"));
}

// A step trains on min(training.batch_size, the file's rows): with 50 rows and a batch of 64, 4 micro-batches do not
// divide the step's 50 samples. Refused by the check the tool makes before anything trains (it failed at the first
// step, with a message naming the batch size 50 the scenario never gave); 5 micro-batches divide them.
TEST_CASE("data-parallel micro-batches must divide the rows a step trains on", "[files][data_parallel]") {
  const fs::path dir = temp_dir();
  constexpr std::int64_t rows = 50;
  std::vector<float> x(rows * 2), y(rows);
  for (std::int64_t i = 0; i < rows; ++i) {
    x[static_cast<std::size_t>(2 * i)] = static_cast<float>(i) / rows;
    x[static_cast<std::size_t>(2 * i + 1)] = 1.0f;
    y[static_cast<std::size_t>(i)] = static_cast<float>(i % 3);
  }
  write(dir / "x.npy", npy_bytes(std::vector<std::int64_t>{rows, 2}, x));
  write(dir / "y.npy", npy_bytes(std::vector<std::int64_t>{rows, 1}, y));
  run_config c;
  c.model = model_kind::stack;
  c.loss = loss_kind::mse;
  c.stack.input_dim = 2;
  c.stack.layers.emplace_back();
  c.data.inputs_path = (dir / "x.npy").string();
  c.data.targets_path = (dir / "y.npy").string();
  c.batch_size = 64;
  c.data_parallel = data_parallel_setup{.ranks = 1, .config = {}};
  c.data_parallel->config.micro_batches = 4;
  CHECK_THROWS_WITH(check_data_files(c), Catch::Contains("data_parallel.micro_batches is 4") &&
                                             Catch::Contains("training.batch_size 64 is above the 50 rows"));
  c.data_parallel->config.micro_batches = 5;
  CHECK_NOTHROW(check_data_files(c));
  // A batch below the rows: the scenario's own check (micro-batches divide the batch size) is the one that applies.
  c.batch_size = 48;
  c.data_parallel->config.micro_batches = 4;
  CHECK_NOTHROW(check_data_files(c));
  // Trained, a batch of 64 over 50 rows is a batch of 50: the activations a step rounds (the decision's memory
  // figure) are those of 50 samples, not 64.
  c.data_parallel.reset();
  c.steps = 1;
  c.batch_size = 64;
  const run_result over = train(c);
  c.batch_size = 50;
  const run_result exact = train(c);
  CHECK(over.activation_elements == exact.activation_elements);
  CHECK(over.activation_elements > 0);
  fs::remove_all(dir);
}

// Refusals of file data name the file and the quantity that is wrong, with the numbers that would be right.
TEST_CASE("file data refusals name the field at fault: target shapes, eval columns, initial weights' range",
          "[files]") {
  const fs::path dir = temp_dir();
  std::vector<float> x(8 * 2, 0.5f);
  write(dir / "x.npy", npy_bytes(std::vector<std::int64_t>{8, 2}, x));
  write(dir / "y0.npy", npy_bytes(std::vector<std::int64_t>{8, 0}, std::vector<float>{}));
  write(dir / "y1.npy", npy_bytes(std::vector<std::int64_t>{8, 1}, std::vector<float>(8, 1.0f)));
  write(dir / "y2.npy", npy_bytes(std::vector<std::int64_t>{8, 2}, std::vector<float>(16, 1.0f)));
  write(dir / "c2.npy", npy_bytes(std::vector<std::int64_t>{8, 2}, std::vector<std::int32_t>(16, 1)));
  const auto error_of_files = [&](loss_kind loss, const char* targets, const char* eval_targets) {
    data_config d;
    d.inputs_path = (dir / "x.npy").string();
    d.targets_path = (dir / targets).string();
    if (eval_targets != nullptr) {
      d.eval_inputs_path = d.inputs_path;
      d.eval_targets_path = (dir / eval_targets).string();
    }
    try {
      const file_data f(d, loss);
    } catch (const safeamp::error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // Regression targets without a column: the targets' shape, not the head's width.
  CHECK_THAT(error_of_files(loss_kind::mse, "y0.npy", nullptr),
             Catch::Contains("data.targets") && Catch::Contains("shape is (8, 0)"));
  // Integer class targets of two columns: the shape is wrong, not the dtype.
  CHECK_THAT(error_of_files(loss_kind::cross_entropy, "c2.npy", nullptr),
             Catch::Contains("data.targets") && Catch::Contains("shape is (8, 2)") && Catch::Contains("(rows, 1)"));
  // Held-out targets of another width: named as data.eval_targets, with the width of data.targets.
  CHECK_THAT(
      error_of_files(loss_kind::mse, "y1.npy", "y2.npy"),
      Catch::Contains("data.eval_targets") && Catch::Contains("columns is 2; accepted: 1, those of data.targets"));
  CHECK(error_of_files(loss_kind::mse, "y1.npy", "y1.npy") == "accepted");
  // An initial weight beyond the parameter format's range would start the run at inf: refused, naming the format.
  write(dir / "b.npy", npy_bytes(std::vector<std::int64_t>{2}, std::vector<float>{1.0e5f, 0.5f}));
  data_config d;
  d.initial_weights = {{"head.bias", (dir / "b.npy").string()}};
  parameter_list params;
  (void)add_parameter(params, "head.bias", 1, 2);
  CHECK_THROWS_WITH(load_initial_weights(d, params, fp16), Catch::Contains("data.initial_weights.head.bias") &&
                                                               Catch::Contains("1 value(s) beyond fp16") &&
                                                               Catch::Contains("65504"));
  CHECK_NOTHROW(load_initial_weights(d, params, bf16));  // within bf16's range
  fs::remove_all(dir);
}

// With data from files the head's width comes from the labels: a model.classes is refused instead of ignored. The
// manifest's data line says where the held-out metrics come from.
TEST_CASE("file data: model.classes is refused, and the data line says the held-out rows are the training rows",
          "[files][scenario]") {
  const std::string files = R"("data": {"inputs": "x.npy", "targets": "y.npy"},
                               "candidates": [{"name": "a", "policy": "fp16-mixed"}]})";
  CHECK_THROWS_WITH(
      parse_scenario(
          R"({"model": {"kind": "stack", "input_dim": 2, "classes": 5, "layers": [{"type": "linear"}]}, )" + files,
          "s.json"),
      Catch::Contains("model.classes is 5") && Catch::Contains("the labels of data.targets"));
  const scenario s = parse_scenario(
      R"({"model": {"kind": "stack", "input_dim": 2, "layers": [{"type": "linear"}]}, )" + files, "s.json");
  // manifest_for reads the files (their hash): write them.
  const fs::path dir = temp_dir();
  write(dir / "x.npy", npy_bytes(std::vector<std::int64_t>{4, 2}, std::vector<float>(8, 0.5f)));
  write(dir / "y.npy", npy_bytes(std::vector<std::int64_t>{4}, std::vector<std::int32_t>{0, 1, 0, 1}));
  run_config c = reference_config(s);
  c.data.inputs_path = (dir / "x.npy").string();
  c.data.targets_path = (dir / "y.npy").string();
  CHECK_THAT(manifest_for(s, c).data, Catch::Contains("held-out metrics are measured on the training rows"));
  c.data.eval_inputs_path = c.data.inputs_path;
  c.data.eval_targets_path = c.data.targets_path;
  CHECK_THAT(manifest_for(s, c).data, Catch::Contains("eval_inputs=") && !Catch::Contains("held out: none"));
  fs::remove_all(dir);
}
