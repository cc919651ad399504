// Hostile or corrupt checkpoints (issue 12, integrity): a real checkpoint from a short run is patched field
// by field (next step, update count, a negative second moment; NaN and inf are kept, as a diverged run saves them), its
// checksum recomputed, and the resume must throw a safeamp::error naming the field before any step runs.
// Resuming with a changed optimizer hyper-parameter, clip, step count, loss weight, rounding, data, scaler
// or faults is refused by the fingerprint. The stored step history is checked record by record.
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
#include "safeamp/sim/reference.hpp"
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
// the history (u64 n, n x (i64 step, f64 loss, f32 scale, u8 found_inf, u8 skipped, f64 norm before clip,
// f64 norm after, f64 seconds, u64 r, r x i32 overflowing rank, i64 wire overflows, u64 k, k x (u64 len + name,
// u64 elements, overflow, underflow, subnormal, nan))),
// u64 FNV-1a of everything before it.
struct record_at {
  std::size_t step = 0, scale = 0, found_inf = 0, skipped = 0, seconds = 0, overflow_ranks = 0, wire_overflows = 0,
              counters = 0;
  std::size_t first_name = 0, first_elements = 0, first_overflow = 0;  // of counter 0
};
struct layout {
  std::size_t next_step = 0;
  std::size_t updates = 0;
  std::size_t first_value[4] = {};  // parameters, first moment, second moment, master: first element of tensor 0
  std::size_t history_count = 0;
  std::vector<record_at> records;
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
  pos += word;
  pos += word + get_at<std::uint64_t>(b, pos);  // scaler JSON
  l.history_count = pos;
  const auto records = get_at<std::uint64_t>(b, pos);
  pos += word;
  for (std::uint64_t i = 0; i < records; ++i) {
    record_at r;
    r.step = pos;
    r.scale = pos + 16;
    r.found_inf = r.scale + 4;
    r.skipped = r.found_inf + 1;
    r.seconds = r.skipped + 1 + 16;
    r.overflow_ranks = r.seconds + word;
    r.wire_overflows =
        r.overflow_ranks + word + 4 * static_cast<std::size_t>(get_at<std::uint64_t>(b, r.overflow_ranks));
    r.counters = r.wire_overflows + word;
    pos = r.counters + word;
    const auto k = get_at<std::uint64_t>(b, r.counters);
    for (std::uint64_t c = 0; c < k; ++c) {
      const auto len = get_at<std::uint64_t>(b, pos);
      if (c == 0) {
        r.first_name = pos + word;
        r.first_elements = pos + word + len;
        r.first_overflow = r.first_elements + word;
      }
      pos += word + len + 5 * word;
    }
    l.records.push_back(r);
  }
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
  // The walk found one record per step, numbered, each with the loss gradient's and every parameter's counter.
  REQUIRE(s.fields.records.size() == static_cast<std::size_t>(save_after_step + 1));
  for (std::size_t i = 0; i < s.fields.records.size(); ++i) {
    REQUIRE(get_at<std::int64_t>(s.bytes, s.fields.records[i].step) == static_cast<std::int64_t>(i));
    REQUIRE(get_at<std::uint64_t>(s.bytes, s.fields.records[i].counters) ==
            7);  // loss.dlogits + fc0, fc1, head (weight, bias)
  }
  REQUIRE(s.bytes.substr(s.fields.records[0].first_name, 12) == "loss.dlogits");
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

template <class T>
std::string with(const saved_checkpoint& s, std::size_t pos, T v) {
  std::string b = s.bytes;
  put_at(b, pos, v);
  reseal(b);
  return b;
}

// The checkpoint with record `i`'s overflowing ranks replaced by `ranks` (bytes inserted), resealed.
std::string with_overflow_ranks(const saved_checkpoint& s, std::size_t i, const std::vector<std::int32_t>& ranks,
                                std::uint64_t count) {
  std::string b = s.bytes;
  const std::size_t at = s.fields.records[i].overflow_ranks;
  REQUIRE(get_at<std::uint64_t>(b, at) == 0);  // a plain run's records list none
  put_at(b, at, count);
  std::string inserted(4 * ranks.size(), '\0');
  for (std::size_t k = 0; k < ranks.size(); ++k) put_at(inserted, 4 * k, ranks[k]);
  b.insert(at + 8, inserted);
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
  // In range but without a record for every step before it.
  CHECK_THAT(refused_field(with_step(s, run_steps), s.dir), Catch::Contains("step records"));
  std::filesystem::remove_all(s.dir);
}

TEST_CASE("a checkpoint saved after the last step resumes to the same result without running a step") {
  const auto dir = temp_dir();
  auto cfg = adamw_config();
  const run_result full = train(cfg);
  cfg.checkpoint.save_path = (dir / "last.ckpt").string();
  cfg.checkpoint.save_after_step = run_steps - 1;
  (void)train(cfg);
  auto resume = adamw_config();
  resume.checkpoint.resume_path = cfg.checkpoint.save_path;
  const run_result again = train(resume);
  REQUIRE(again.steps.size() == full.steps.size());
  for (std::size_t i = 0; i < full.steps.size(); ++i) CHECK(again.steps[i] == full.steps[i]);
  CHECK(again.weights_hash == full.weights_hash);
  CHECK(again.final_eval == full.final_eval);
  CHECK(again.probe_logits == full.probe_logits);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a step history that does not match the steps run is refused by name") {
  const saved_checkpoint s = save_good();
  const auto& r0 = s.fields.records[0];
  const auto& r1 = s.fields.records[1];
  CHECK_THAT(refused_field(with(s, s.fields.history_count, std::uint64_t{2}), s.dir), Catch::Contains("step records"));
  CHECK_THAT(refused_field(with(s, r1.step, std::int64_t{5}), s.dir), Catch::Contains("step record 1 step"));
  CHECK_THAT(refused_field(with(s, r0.scale, std::numeric_limits<float>::quiet_NaN()), s.dir),
             Catch::Contains("scale"));
  CHECK_THAT(refused_field(with(s, r0.scale, 0.0f), s.dir), Catch::Contains("scale"));
  CHECK_THAT(refused_field(with(s, r0.scale, -2.0f), s.dir), Catch::Contains("scale"));
  CHECK(refused_field(with(s, r0.scale, 2.0f), s.dir).empty());  // another valid scale: accepted
  CHECK_THAT(refused_field(with(s, r0.found_inf, std::uint8_t{2}), s.dir), Catch::Contains("found_inf"));
  CHECK_THAT(refused_field(with(s, r0.skipped, std::uint8_t{1}), s.dir), Catch::Contains("skipped"));
  CHECK_THAT(refused_field(with(s, r0.seconds, -1.0), s.dir), Catch::Contains("seconds"));
  CHECK_THAT(refused_field(with(s, r0.counters, std::uint64_t{8}), s.dir), Catch::Contains("gradient counters"));
  // Overflowing ranks (data parallel): ascending, each below 4096 (at most one rank per micro-batch); the wire
  // overflow count not negative. Ranks and counts a run could have recorded are accepted.
  CHECK(refused_field(with_overflow_ranks(s, 1, {1, 3}, 2), s.dir).empty());
  CHECK(refused_field(with(s, r0.wire_overflows, std::int64_t{12}), s.dir).empty());
  CHECK_THAT(refused_field(with_overflow_ranks(s, 1, {3, 1}, 2), s.dir), Catch::Contains("overflowing rank"));
  CHECK_THAT(refused_field(with_overflow_ranks(s, 1, {2, 2}, 2), s.dir), Catch::Contains("overflowing rank"));
  CHECK_THAT(refused_field(with_overflow_ranks(s, 1, {-1}, 1), s.dir), Catch::Contains("overflowing rank"));
  CHECK_THAT(refused_field(with_overflow_ranks(s, 1, {4096}, 1), s.dir), Catch::Contains("overflowing rank"));
  CHECK_THAT(refused_field(with_overflow_ranks(s, 1, {}, 4097), s.dir), Catch::Contains("overflowing ranks"));
  CHECK_THAT(refused_field(with(s, r0.wire_overflows, std::int64_t{-1}), s.dir), Catch::Contains("wire overflows"));
  CHECK_THAT(refused_field(with(s, r0.first_name, 'L'), s.dir), Catch::Contains("counter name"));
  const auto elements = get_at<std::uint64_t>(s.bytes, r0.first_elements);
  CHECK_THAT(refused_field(with(s, r0.first_overflow, elements + 1), s.dir), Catch::Contains("counters of"));
  CHECK(refused_field(with(s, r0.first_overflow, elements), s.dir).empty());
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

// A diverged run holds NaN and inf in its weights and moments: they are restored as saved (its resume must return
// what the uninterrupted run does; faults_determinism_test resumes one). A negative second moment comes from no run.
TEST_CASE("a negative second moment is refused by name; NaN or inf in weights, moments or master weights is kept") {
  const saved_checkpoint s = save_good();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  CHECK_THAT(refused_field(with_value(s, 2, -1.0f), s.dir), Catch::Contains("second moment"));
  CHECK_THAT(refused_field(with_value(s, 2, -inf), s.dir), Catch::Contains("second moment"));
  CHECK(refused_field(with_value(s, 0, nan), s.dir).empty());
  CHECK(refused_field(with_value(s, 0, -inf), s.dir).empty());
  CHECK(refused_field(with_value(s, 1, inf), s.dir).empty());
  CHECK(refused_field(with_value(s, 2, nan), s.dir).empty());
  CHECK(refused_field(with_value(s, 2, inf), s.dir).empty());
  CHECK(refused_field(with_value(s, 3, nan), s.dir).empty());
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
  // Settings the fingerprint of version 1 left out.
  CHECK(refused([](run_config& c) { c.loss_weight = 2.0; }));
  CHECK(refused([](run_config& c) { c.rounding.mode = rounding::stochastic; }));
  CHECK(refused([](run_config& c) { c.rounding.flush_subnormals = true; }));
  CHECK(refused([](run_config& c) { c.data.cluster_spread = 0.5; }));
  CHECK(refused([](run_config& c) { c.data.eval_samples = 100; }));
  CHECK(refused([](run_config& c) { c.scaler.dynamic.growth_interval = 7; }));
  CHECK(refused([](run_config& c) {
    c.faults = {{.kind = fault_kind::gradient_nan, .steps = {4}, .target = "", .factor = 1.0}};
  }));
  CHECK_FALSE(refused([](run_config& c) { c.label = "renamed"; }));
  std::filesystem::remove_all(s.dir);
}

TEST_CASE("the fingerprint carries the build's bit-changing flags and library version, not its machine") {
  // A -ffast-math build's checkpoint of a reference was resumed by an IEEE build, which then locked the result.
  const run_config cfg = adamw_config();
  const build_environment here = current_environment();
  CHECK(run_fingerprint(cfg) == run_fingerprint(cfg, here));
  build_environment other = here;
  other.float_flags = "-ffast-math";
  CHECK(run_fingerprint(cfg, other) != run_fingerprint(cfg, here));
  other = here;
  other.library_version += ".1";
  CHECK(run_fingerprint(cfg, other) != run_fingerprint(cfg, here));
  other = here;  // what changes no bit: the compiler, its ISA flags, the CPU
  other.compiler = "another compiler";
  other.compiler_flags = "-O1";
  other.hardware = "another CPU";
  CHECK(run_fingerprint(cfg, other) == run_fingerprint(cfg, here));
}
