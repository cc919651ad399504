// Hostile or corrupt checkpoints (issue 12, integrity): a real checkpoint from a short run is patched field
// by field (next step, update count, NaN/inf/negative values in weights, moments and master weights), its
// checksum recomputed, and the resume must throw a safeamp::error naming the field before any step runs.
// Resuming with a changed optimizer hyper-parameter, clip or step count is refused by the fingerprint.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/sim/trainer.hpp"
#include "sim/engine/sim_test_util.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

constexpr std::int64_t run_steps = 6;
constexpr std::int64_t save_after_step = 2;  // the checkpoint's next step is 3, its update count 3 (no faults)

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("safeamp_ckpt_integrity_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// AdamW with fp16 parameters and fp32 master weights: the checkpoint holds every kind of tensor.
run_config adamw_config() {
  auto cfg = sim_test::mlp_config(presets::fp16_pure_master, run_steps);
  cfg.batch_size = 64;
  cfg.optimizer.kind = optimizer_kind::adamw;
  cfg.optimizer.learning_rate = 3e-3;
  cfg.scaler.kind = scaler_kind::dynamic;
  cfg.scaler.dynamic = scaler_presets::pytorch;
  return cfg;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {(std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()};
}

template <class T>
T get_at(const std::string& b, std::size_t pos) {
  T v;
  std::memcpy(&v, b.data() + pos, sizeof v);
  return v;
}

template <class T>
void put_at(std::string& b, std::size_t pos, T v) {
  std::memcpy(b.data() + pos, &v, sizeof v);
}

// Byte offsets of the fields, walked with the layout of save_checkpoint: magic[16], u32 version,
// u64 fingerprint, i64 next_step, u64 count, count x (u64 len + name, i64 rows, i64 cols, float[rows*cols]),
// then first/second/master as (u64 n, n x (i64 rows, i64 cols, float[...])), i64 updates, scaler string,
// u64 FNV-1a of everything before it.
struct layout {
  std::size_t next_step = 0;
  std::size_t updates = 0;
  std::size_t first_value[4] = {};  // parameters, first moment, second moment, master: first element of tensor 0
};

layout walk(const std::string& b) {
  constexpr std::size_t word = 8;
  layout l;
  l.next_step = 16 + 4 + word;
  std::size_t pos = l.next_step + word;
  const auto count = get_at<std::uint64_t>(b, pos);
  pos += word;
  const auto skip_matrix = [&](std::size_t& first) {
    const auto rows = get_at<std::int64_t>(b, pos);
    const auto cols = get_at<std::int64_t>(b, pos + word);
    if (first == 0) first = pos + 2 * word;
    pos += 2 * word + static_cast<std::size_t>(rows * cols) * sizeof(float);
  };
  for (std::uint64_t i = 0; i < count; ++i) {
    pos += word + get_at<std::uint64_t>(b, pos);
    skip_matrix(l.first_value[0]);
  }
  for (int kind = 1; kind <= 3; ++kind) {
    const auto n = get_at<std::uint64_t>(b, pos);
    pos += word;
    for (std::uint64_t i = 0; i < n; ++i) skip_matrix(l.first_value[kind]);
  }
  l.updates = pos;
  return l;
}

void reseal(std::string& b) {
  const std::size_t body = b.size() - 8;
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < body; ++i) {
    h ^= static_cast<std::uint8_t>(b[i]);
    h *= 0x100000001b3ull;
  }
  put_at(b, body, h);
}

// The field named by the error of resuming from `bytes`, or "" when the run went through.
std::string refused_field(const std::string& bytes, const std::filesystem::path& dir) {
  const std::string path = (dir / "patched.ckpt").string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  auto cfg = adamw_config();
  cfg.checkpoint.resume_path = path;
  try {
    (void)train(cfg);
  } catch (const safeamp::error& e) {
    INFO(e.what());
    return e.field();
  }
  return "";
}

struct saved_checkpoint {
  std::filesystem::path dir;
  std::string path;
  std::string bytes;
  layout fields;
};

saved_checkpoint save_good() {
  saved_checkpoint s;
  s.dir = temp_dir();
  s.path = (s.dir / "good.ckpt").string();
  auto cfg = adamw_config();
  cfg.checkpoint.save_path = s.path;
  cfg.checkpoint.save_after_step = save_after_step;
  (void)train(cfg);
  s.bytes = read_bytes(s.path);
  REQUIRE(s.bytes.size() > 100);
  s.fields = walk(s.bytes);
  REQUIRE(get_at<std::int64_t>(s.bytes, s.fields.next_step) == save_after_step + 1);
  REQUIRE(get_at<std::int64_t>(s.bytes, s.fields.updates) == save_after_step + 1);
  for (const std::size_t f : s.fields.first_value) REQUIRE(f != 0);
  return s;
}

std::string with_step(const saved_checkpoint& s, std::int64_t next_step) {
  std::string b = s.bytes;
  put_at(b, s.fields.next_step, next_step);
  reseal(b);
  return b;
}

std::string with_updates(const saved_checkpoint& s, std::int64_t updates) {
  std::string b = s.bytes;
  put_at(b, s.fields.updates, updates);
  reseal(b);
  return b;
}

std::string with_value(const saved_checkpoint& s, int kind, float v) {
  std::string b = s.bytes;
  put_at(b, s.fields.first_value[kind], v);
  reseal(b);
  return b;
}

}  // namespace

TEST_CASE("the unpatched checkpoint resumes (the patching itself is sound)") {
  const saved_checkpoint s = save_good();
  CHECK(refused_field(s.bytes, s.dir).empty());
  std::filesystem::remove_all(s.dir);
}

TEST_CASE("a next step below 0 or beyond the run's steps is refused by name") {
  const saved_checkpoint s = save_good();
  CHECK_THAT(refused_field(with_step(s, -1), s.dir), Catch::Contains("next step"));
  CHECK_THAT(refused_field(with_step(s, run_steps + 1), s.dir), Catch::Contains("next step"));
  CHECK(refused_field(with_step(s, run_steps), s.dir).empty());  // nothing left to run: accepted
  std::filesystem::remove_all(s.dir);
}

TEST_CASE("a next step of INT64_MIN is refused instead of running for ever") {
  const saved_checkpoint s = save_good();
  CHECK_THAT(refused_field(with_step(s, std::numeric_limits<std::int64_t>::min()), s.dir), Catch::Contains("next step"));
  std::filesystem::remove_all(s.dir);
}

TEST_CASE("a negative or impossible optimizer update count is refused by name") {
  const saved_checkpoint s = save_good();
  CHECK_THAT(refused_field(with_updates(s, -1), s.dir), Catch::Contains("updates"));  // AdamW bias correction 0
  CHECK_THAT(refused_field(with_updates(s, std::numeric_limits<std::int64_t>::min()), s.dir), Catch::Contains("updates"));
  CHECK_THAT(refused_field(with_updates(s, save_after_step + 2), s.dir), Catch::Contains("updates"));
  CHECK(refused_field(with_updates(s, 0), s.dir).empty());  // every step so far skipped: consistent
  std::filesystem::remove_all(s.dir);
}

TEST_CASE("NaN or inf in weights or moments or master weights (or a negative second moment) is refused by name") {
  const saved_checkpoint s = save_good();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  CHECK_THAT(refused_field(with_value(s, 0, nan), s.dir), Catch::Contains("parameter"));
  CHECK_THAT(refused_field(with_value(s, 0, -inf), s.dir), Catch::Contains("parameter"));
  CHECK_THAT(refused_field(with_value(s, 1, inf), s.dir), Catch::Contains("first moment"));
  CHECK_THAT(refused_field(with_value(s, 2, nan), s.dir), Catch::Contains("second moment"));
  CHECK_THAT(refused_field(with_value(s, 2, -1.0f), s.dir), Catch::Contains("second moment"));
  CHECK_THAT(refused_field(with_value(s, 3, nan), s.dir), Catch::Contains("master weights"));
  CHECK(refused_field(with_value(s, 2, 0.0f), s.dir).empty());
  std::filesystem::remove_all(s.dir);
}

TEST_CASE("a resume with a changed optimizer hyper-parameter or clip or step count is refused") {
  const saved_checkpoint s = save_good();
  const auto refused = [&](auto change) {
    auto cfg = adamw_config();
    change(cfg);
    cfg.checkpoint.resume_path = s.path;
    try {
      (void)train(cfg);
    } catch (const safeamp::error& e) {
      INFO(e.what());
      return std::string(e.what()).find("configuration") != std::string::npos;
    }
    return false;
  };
  CHECK_FALSE(refused([](run_config&) {}));
  CHECK_FALSE(refused([](run_config& c) { c.threads = 2; }));
  CHECK(refused([](run_config& c) { c.optimizer.beta2 = 0.99; }));
  CHECK(refused([](run_config& c) { c.optimizer.beta1 = 0.8; }));
  // One ulp away: std::to_string(double) printed both as "0.003000".
  CHECK(refused([](run_config& c) { c.optimizer.learning_rate = std::nextafter(3e-3, 1.0); }));
  CHECK(refused([](run_config& c) { c.optimizer.epsilon = 2e-8; }));  // "0.000000" under std::to_string
  CHECK(refused([](run_config& c) { c.optimizer.weight_decay = 0.01; }));
  CHECK(refused([](run_config& c) { c.optimizer.momentum = 0.5; }));
  CHECK(refused([](run_config& c) { c.optimizer.stochastic_write_back = true; }));
  CHECK(refused([](run_config& c) { c.clip_norm = 1.0; }));
  CHECK(refused([](run_config& c) { c.steps = run_steps + 4; }));
  std::filesystem::remove_all(s.dir);
}
