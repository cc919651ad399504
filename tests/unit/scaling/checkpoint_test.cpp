// Checkpoints: a non-default value in every field round-trips bit-exactly; resuming continues exactly as an
// uninterrupted run; malformed, truncated, wrong-version and out-of-range input is rejected and the scaler
// keeps its previous state.
#include <catch2/catch.hpp>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "safeamp/scaling.hpp"

using namespace safeamp;

namespace {
scaler_checkpoint all_fields_non_default() {
  scaler_checkpoint c;
  c.config = scaler_config{.init_scale = 3000.5f,
                           .growth_factor = 1.7,
                           .backoff_factor = 0.3,
                           .growth_interval = 17,
                           .hysteresis = 4,
                           .mode = hysteresis_mode::since_growth,
                           .min_scale = 0.1f,
                           .max_scale = 1.0e30f,
                           .max_overflows_at_min = 9};
  // overflows_at_min stays 0 here: a count of overflows at the floor needs scale == min_scale and both trackers
  // 0 (validate refuses anything else), so its non-default value is in at_the_floor() below.
  c.state = scaler_state{.scale = 123.456f, .growth_tracker = 11, .hysteresis_tracker = 3, .overflows_at_min = 0};
  c.stats = scaler_stats{.steps = 1000,
                         .applied_steps = 900,
                         .skipped_steps = 100,
                         .consecutive_skips = 3,
                         .growth_events = 12,
                         .growth_refusals = 2,
                         .backoff_events = 40,
                         .absorbed_overflows = 58,
                         .floor_hits = 5,
                         .non_finite_norms = 7,
                         .last_overflow_step = 998};
  return c;
}
/// The same checkpoint two overflows into a stay at the floor: the state in which overflows_at_min is not 0.
scaler_checkpoint at_the_floor() {
  scaler_checkpoint c = all_fields_non_default();
  c.state = scaler_state{.scale = 0.1f, .growth_tracker = 0, .hysteresis_tracker = 0, .overflows_at_min = 2};
  return c;
}
}  // namespace

TEST_CASE("every field differs from its default in the fixture") {
  const scaler_checkpoint d;
  const scaler_checkpoint c = all_fields_non_default();
  CHECK(c.config.init_scale != d.config.init_scale);
  CHECK(c.config.growth_factor != d.config.growth_factor);
  CHECK(c.config.backoff_factor != d.config.backoff_factor);
  CHECK(c.config.growth_interval != d.config.growth_interval);
  CHECK(c.config.hysteresis != d.config.hysteresis);
  CHECK(c.config.mode != d.config.mode);
  CHECK(c.config.min_scale != d.config.min_scale);
  CHECK(c.config.max_scale != d.config.max_scale);
  CHECK(c.config.max_overflows_at_min != d.config.max_overflows_at_min);
  CHECK(c.state.scale != d.state.scale);
  CHECK(c.state.growth_tracker != d.state.growth_tracker);
  CHECK(c.state.hysteresis_tracker != d.state.hysteresis_tracker);
  CHECK(at_the_floor().state.overflows_at_min != d.state.overflows_at_min);
  CHECK(c.stats.last_overflow_step != d.stats.last_overflow_step);
  CHECK_NOTHROW(validate(c));
  CHECK_NOTHROW(validate(at_the_floor()));
}

TEST_CASE("checkpoint JSON round-trips bit-exactly") {
  const scaler_checkpoint c = all_fields_non_default();
  const std::string j = to_json(c);
  INFO(j);
  const scaler_checkpoint back = checkpoint_from_json(j);
  CHECK(back == c);
  CHECK(std::memcmp(&back.config.growth_factor, &c.config.growth_factor, sizeof(double)) == 0);
  CHECK(to_json(back) == j);
  // Floats that need all 9 significant digits, and doubles that need 17.
  scaler_checkpoint d = c;
  d.config.backoff_factor = 0.1 + 0.2;                // 0.30000000000000004
  d.state.scale = std::nextafter(123.456f, 1000.0f);  // next float
  CHECK(checkpoint_from_json(to_json(d)) == d);
  const scaler_checkpoint f = at_the_floor();
  CHECK(checkpoint_from_json(to_json(f)) == f);
}

TEST_CASE("resume from a checkpoint continues exactly as the uninterrupted run") {
  const scaler_config cfg{.init_scale = 4096.0f,
                          .growth_factor = 2.0,
                          .backoff_factor = 0.5,
                          .growth_interval = 5,
                          .hysteresis = 2,
                          .mode = hysteresis_mode::since_growth,
                          .min_scale = 1.0f};
  std::mt19937 rng(7);
  std::bernoulli_distribution overflow(0.2);
  std::vector<bool> flags(400);
  for (std::size_t i = 0; i < flags.size(); ++i) flags[i] = overflow(rng);
  const auto run = [&](loss_scaler& s, std::size_t from, std::size_t to, std::vector<step_report>& out) {
    for (std::size_t i = from; i < to; ++i) {
      s.record_found_inf(flags[i]);
      s.step([] {});
      out.push_back(s.update());
    }
  };
  loss_scaler straight(cfg);
  std::vector<step_report> a;
  run(straight, 0, flags.size(), a);

  loss_scaler first(cfg);
  std::vector<step_report> b;
  run(first, 0, 173, b);
  const std::string saved = first.save_json();
  loss_scaler resumed;  // default-constructed: loading before the first step is legal
  resumed.load_json(saved);
  run(resumed, 173, flags.size(), b);
  CHECK(a == b);
  CHECK(straight.stats() == resumed.stats());
  CHECK(straight.rule().state == resumed.rule().state);
}

TEST_CASE("bad checkpoints are rejected and the scaler keeps its previous state") {
  loss_scaler s(scaler_config{.init_scale = 512.0f});
  s.record_found_inf(true);
  s.step([] {});
  s.update();
  const scaler_checkpoint before = s.checkpoint();
  const std::string good = to_json(all_fields_non_default());
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const std::size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    return t;
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {good.substr(0, good.size() / 2), "malformed"},  // truncated
      {good.substr(0, good.size() - 1), "truncated"},  // last brace missing
      {"", "end of input"},
      {"[1,2]", "not a JSON object"},
      {good + "x", "trailing"},
      {replace("\"version\":1", "\"version\":2"), "version"},
      {replace("safeamp.loss_scaler", "torch.GradScaler"), "format"},
      {replace("\"growth_factor\":1.7", "\"growth_factor\":0.9"), "growth_factor"},
      {replace("\"backoff_factor\":0.3", "\"backoff_factor\":1"), "backoff_factor"},
      {replace("\"growth_interval\":17", "\"growth_interval\":0"), "growth_interval"},
      {replace("\"growth_interval\":17", "\"growth_interval\":1e99"), "growth_interval"},
      {replace("\"growth_interval\":17", "\"growth_interval\":99999999999"), "growth_interval"},
      {replace("\"hysteresis\":4", "\"hysteresis\":-4"), "hysteresis"},
      {replace("\"mode\":\"since_growth\"", "\"mode\":\"sometimes\""), "mode"},
      {replace("\"scale\":123.456", "\"scale\":1e39"), "scale"},
      {replace("\"scale\":123.456", "\"scale\":\"big\""), "scale"},
      {replace("\"growth_tracker\":11", "\"growth_tracker\":17"), "growth_tracker"},
      {replace("\"hysteresis_tracker\":3", "\"hysteresis_tracker\":5"), "hysteresis_tracker"},
      {replace("\"steps\":1000", "\"steps\":999"), "steps"},
      {replace("\"last_overflow_step\":998", "\"last_overflow_step\":1000"), "last_overflow_step"},
      {replace("\"hysteresis_tracker\"", "\"hysterisis_tracker\""),
       "member is 'hysterisis_tracker' (unknown)"},  // NeMo's typo
      {replace(",\"max_overflows_at_min\":9", ""), "missing"},
      {replace("\"min_scale\":0.1", "\"min_scale\":0.1,\"min_scale\":0.2"), "duplicate"},
  };
  for (const auto& [text, expected] : bad) {
    INFO(text);
    CHECK_THROWS_WITH(s.load_json(text), Catch::Contains(expected));
    CHECK(s.checkpoint() == before);
  }
  // An unknown member's name is quoted like every other input: control bytes escaped, cut (a raw ESC and 60 bytes
  // of the key reached the message until 2026-12-06), and the known members listed.
  const std::string hostile = replace("\"hysteresis_tracker\"", "\"\\u001b[31m" + std::string(200, 'k') + "\"");
  try {
    s.load_json(hostile);
    FAIL("no error");
  } catch (const error& e) {
    const std::string m = e.what();
    CHECK(m.find('\x1b') == std::string::npos);
    CHECK_THAT(m, Catch::Contains("\\x1b[31m") && Catch::Contains("hysteresis_tracker"));
    CHECK(m.size() < 600);
  }
  CHECK(s.checkpoint() == before);
}

TEST_CASE("checkpoint files are written atomically and read back") {
  const std::string path = "scaling_checkpoint_test.json";
  const scaler_checkpoint c = all_fields_non_default();
  write_file_atomically(path, to_json(c));
  CHECK(checkpoint_from_json(read_file_text(path)) == c);
  CHECK_THROWS_AS(write_file_atomically("/nonexistent-dir/x.json", "{}"), error);
  CHECK_THROWS_AS(read_file_text("/nonexistent-dir/x.json"), error);
  std::remove(path.c_str());
}

TEST_CASE("counters near INT64_MAX are refused without overflowing the sum") {
  // applied + skipped would wrap past INT64_MAX (undefined behaviour; UBSan reports it): refused before adding.
  scaler_checkpoint c = all_fields_non_default();
  c.stats.applied_steps = std::numeric_limits<std::int64_t>::max();
  c.stats.skipped_steps = 1;
  c.stats.steps = 5;
  c.stats.consecutive_skips = 0;
  c.stats.last_overflow_step = -1;
  CHECK_THROWS_WITH(validate(c), Catch::Contains("applied_steps + skipped_steps") && Catch::Contains("INT64_MAX"));
  CHECK_THROWS_WITH(checkpoint_from_json(to_json(c)), Catch::Contains("INT64_MAX"));
  // The largest sum that fits is refused too: the next update could not count steps (see the next test).
  c.stats.applied_steps = std::numeric_limits<std::int64_t>::max() - 1;
  c.stats.steps = std::numeric_limits<std::int64_t>::max();
  CHECK_THROWS_WITH(validate(c), Catch::Contains("counters.steps") && Catch::Contains("INT64_MAX - 1"));
  // One step less is accepted.
  c.stats.applied_steps = std::numeric_limits<std::int64_t>::max() - 2;
  c.stats.steps = std::numeric_limits<std::int64_t>::max() - 1;
  CHECK_NOTHROW(validate(c));
  CHECK(checkpoint_from_json(to_json(c)) == c);
}

TEST_CASE("counters at their maximum are refused on load, and counting saturates instead of overflowing") {
  constexpr std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
  // The reviewer's checkpoint: steps = applied_steps = INT64_MAX (skipped 0), accepted before; the next
  // update() computed INT64_MAX + 1 (undefined behaviour).
  loss_scaler s;
  scaler_checkpoint c = s.checkpoint();
  c.stats.steps = max64;
  c.stats.applied_steps = max64;
  try {
    s.restore(c);
    FAIL("accepted steps = INT64_MAX");
  } catch (const error& e) {
    CHECK(e.field() == "scaler checkpoint counters.steps");
    CHECK_THAT(e.what(), Catch::Contains("9223372036854775807; accepted: an integer in [0, 9223372036854775806]"));
  }
  // Every event counter counts at most one event per step, so none can exceed steps (here 1000).
  for (std::int64_t scaler_stats::*counter :
       {&scaler_stats::growth_events, &scaler_stats::growth_refusals, &scaler_stats::backoff_events,
        &scaler_stats::absorbed_overflows, &scaler_stats::floor_hits, &scaler_stats::non_finite_norms}) {
    scaler_checkpoint bad = all_fields_non_default();
    bad.stats.*counter = max64;
    CHECK_THROWS_WITH(validate(bad), Catch::Contains("[0, steps] = [0, 1000]"));
    bad.stats.*counter = 1001;  // one event more than steps
    CHECK_THROWS_WITH(validate(bad), Catch::Contains("[0, steps] = [0, 1000]"));
    bad.stats.*counter = 1000;
    CHECK_NOTHROW(validate(bad));
  }
  // The largest accepted checkpoint runs one more step exactly: steps INT64_MAX - 1 -> INT64_MAX.
  c.stats.steps = max64 - 1;
  c.stats.applied_steps = max64 - 1;
  s.restore(c);
  s.record_found_inf(false);
  s.step([] {});
  const step_report r = s.update();
  CHECK(r.step == max64 - 1);
  CHECK(s.stats().steps == max64);
  CHECK(s.stats().applied_steps == max64);
}

TEST_CASE("counting stops at INT64_MAX instead of overflowing") {
  // count_step runs on the device too, so it cannot throw: past INT64_MAX it stays there (a wrap is undefined).
  constexpr std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
  scaler_stats full{.steps = max64,
                    .applied_steps = max64,
                    .skipped_steps = max64,
                    .consecutive_skips = max64,
                    .growth_events = max64,
                    .growth_refusals = max64,
                    .backoff_events = max64,
                    .absorbed_overflows = max64,
                    .floor_hits = max64,
                    .non_finite_norms = max64,
                    .last_overflow_step = 5};
  const scaler_config cfg{.init_scale = 1.0f};
  const scale_transition overflow_at_floor = transition(cfg, scaler_state{1.0f, 0, 0, 0}, true);
  REQUIRE(overflow_at_floor.event == scale_event::clamped_at_min);
  step_report skipped{.step = 9, .applied = false, .found_inf = true, .reason = skip_reason::non_finite_norm};
  count_step(full, skipped, overflow_at_floor);
  step_report applied{.step = 10, .applied = true};
  count_step(full, applied, transition(cfg, scaler_state{1.0f, cfg.growth_interval - 1, 1, 0}, false));
  CHECK(full == scaler_stats{.steps = max64,
                             .applied_steps = max64,
                             .skipped_steps = max64,
                             .consecutive_skips = 0,
                             .growth_events = max64,
                             .growth_refusals = max64,
                             .backoff_events = max64,
                             .absorbed_overflows = max64,
                             .floor_hits = max64,
                             .non_finite_norms = max64,
                             .last_overflow_step = 9});
}

TEST_CASE("overflows_at_min stops at INT32_MAX and the floor error still fires") {
  constexpr std::int32_t max32 = std::numeric_limits<std::int32_t>::max();
  const scaler_config cfg{.init_scale = 1.0f, .min_scale = 1.0f};
  const scaler_state at_max{.scale = 1.0f, .growth_tracker = 0, .hysteresis_tracker = 0, .overflows_at_min = max32};
  const scale_transition t = transition(cfg, at_max, true);  // INT32_MAX + 1 wrapped to INT32_MIN before
  CHECK(t.next.overflows_at_min == max32);
  CHECK(t.event == scale_event::clamped_at_min);
  // The reviewer's checkpoint (max_overflows_at_min 0): a state the transition reaches, so it loads; the next
  // overflow at the floor is counted as a floor hit and the count stays at INT32_MAX.
  scaler_checkpoint c{.config = cfg, .state = at_max, .stats = {}};
  loss_scaler s;
  s.restore(c);
  s.record_found_inf(true);
  s.step([] {});
  CHECK(s.update().overflows_at_min == max32);
  CHECK(s.stats().floor_hits == 1);
  // With K = 5 the error still fires (a wrapped, negative count never reached K).
  c.config.max_overflows_at_min = 5;
  loss_scaler k;
  k.restore(c);
  k.record_found_inf(true);
  k.step([] {});
  CHECK_THROWS_WITH(k.update(), Catch::Contains("2147483647 consecutive overflows"));
}

TEST_CASE("checkpoint JSON: deep nesting, out-of-range numbers and huge input are refused cleanly") {
  const std::string good = to_json(all_fields_non_default());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THROWS_WITH(checkpoint_from_json(deep), Catch::Contains("nested too deeply"));
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"growth_factor\":1.7", "\"growth_factor\":1e400"},
           {"\"growth_factor\":1.7", "\"growth_factor\":-1e400"},
           {"\"scale\":123.456", "\"scale\":1e400"},
           {"\"steps\":1000", "\"steps\":9223372036854775808"},
           {"\"last_overflow_step\":998", "\"last_overflow_step\":-9223372036854775809"},
       }) {
    INFO(to);
    CHECK_THROWS_WITH(checkpoint_from_json(with(from, to)), Catch::Contains("representable"));
  }
  // A long number or member name is quoted only in part.
  std::string long_number(100001, '0');
  long_number.front() = '1';
  try {
    (void)checkpoint_from_json(with("\"steps\":1000", "\"steps\":" + long_number));
    FAIL("accepted a 100001-digit counter");
  } catch (const error& e) {
    CHECK(std::string(e.what()).size() < 300);
  }
  // An object of many members is checked for duplicates quickly (not quadratically) and the duplicate is found.
  std::string many = "{";
  for (int i = 0; i < 200000; ++i) many += "\"k" + std::to_string(i) + "\":0,";
  many += "\"k7\":1}";
  CHECK_THROWS_WITH(json::parse(many), Catch::Contains("duplicate member 'k7'"));
}

TEST_CASE("the atomic writer uses a unique temporary, removes it on failure and names the caller's field") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path("scaling_atomic_writer_test");
  fs::remove_all(dir);
  fs::create_directories(dir / "target_is_a_folder" / "child");
  const auto temporaries = [&] {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp") != std::string::npos;
    return n;
  };
  // Rename onto a non-empty folder fails: the error names the field and the temporary is gone.
  CHECK_THROWS_WITH(write_file_atomically((dir / "target_is_a_folder").string(), "{}", "scaler checkpoint file"),
                    Catch::StartsWith("scaler checkpoint file is '") && Catch::Contains("rename failed"));
  CHECK(temporaries() == 0);
  CHECK_THROWS_WITH(write_file_atomically("/nonexistent-dir/x.json", "{}", "--save"), Catch::StartsWith("--save is"));
  // Two writers of one path at the same time never share a temporary: every write succeeds, nothing is left.
  const std::string path = (dir / "shared.json").string();
  std::atomic<int> failures{0};
  const auto writer = [&](char fill) {
    for (int i = 0; i < 200; ++i) {
      try {
        write_file_atomically(path, std::string(4096, fill));
      } catch (const error&) {
        ++failures;
      }
    }
  };
  std::thread a(writer, 'a');
  std::thread b(writer, 'b');
  a.join();
  b.join();
  CHECK(failures == 0);
  CHECK(temporaries() == 0);
  const std::string last = read_file_text(path);
  CHECK((last == std::string(4096, 'a') || last == std::string(4096, 'b')));
  fs::remove_all(dir);
}

TEST_CASE("read_file_text reads regular files only, up to a cap") {
  namespace fs = std::filesystem;
  const std::string path = "scaling_read_cap_test.json";
  write_file_atomically(path, std::string(100, 'x'));
  CHECK(read_file_text(path, 100).size() == 100);
  CHECK_THROWS_WITH(read_file_text(path, 99), Catch::Contains("larger than the limit") && Catch::Contains("99 bytes"));
  CHECK_THROWS_WITH(read_file_text(".", 1000, "--load"), Catch::StartsWith("--load is '.' (not a regular file)"));
  if (fs::exists("/dev/zero")) CHECK_THROWS_WITH(read_file_text("/dev/zero"), Catch::Contains("not a regular file"));
  std::remove(path.c_str());
}
