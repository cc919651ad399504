// FP8 delayed-scaling checkpoints: a hand-written JSON text, the round trip with a non-default value in every field,
// and a resume at many steps (through the window's wrap-around, with zero, inf, NaN and tiny amaxes) that continues
// bit for bit, for the delayed_scaling objects and for the plain state and its ring (delayed_scaling_step).
#include "safeamp/scaling/fp8_checkpoint.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "safeamp/format/philox.hpp"

using namespace safeamp;

namespace {

std::uint32_t bits(float x) { return safeamp::bit_cast<std::uint32_t>(x); }

/// Step i's amax for tensor `tensor`: mostly normal values over 2^-20 .. 2^20, sometimes 0 (unused), inf, NaN, or the
/// smallest subnormal (448 over it overflows: the scale is clamped).
float random_amax(std::uint32_t tensor, std::uint64_t i) {
  const std::uint32_t r = stochastic_bits(49, tensor, i);
  switch (r % 29u) {
    case 0:
      return 0.0f;
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return std::numeric_limits<float>::quiet_NaN();
    case 3:
      return 1e-45f;
    default:
      return std::ldexp(1.0f + static_cast<float>(r >> 12) / 1048576.0f, static_cast<int>((r >> 5) % 40u) - 20);
  }
}

/// One step of every tensor: one to three observations each, then update().
void run_step(std::vector<delayed_scaling>& tensors, std::uint64_t step) {
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const int observations = 1 + static_cast<int>((step + t) % 3);
    for (int o = 0; o < observations; ++o) {
      tensors[t].record_amax(random_amax(static_cast<std::uint32_t>(t), step * 4 + static_cast<std::uint64_t>(o)));
    }
    (void)tensors[t].update();
  }
}

/// Same scale, inverse scale, counters and window, compared as bits.
void require_same(const delayed_scaling& a, const delayed_scaling& b) {
  REQUIRE(bits(a.scale()) == bits(b.scale()));
  REQUIRE(bits(a.scale_inv()) == bits(b.scale_inv()));
  REQUIRE(a.counters() == b.counters());
  REQUIRE(a.history().size() == b.history().size());
  for (std::size_t i = 0; i < a.history().size(); ++i) REQUIRE(bits(a.history()[i]) == bits(b.history()[i]));
}

std::vector<delayed_scaling> make_tensors(const std::vector<delayed_scaling_config>& configs) {
  std::vector<delayed_scaling> out;
  for (const delayed_scaling_config& c : configs) out.emplace_back(c);
  return out;
}

/// The message of the safeamp::error that `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

/// `text` with its one occurrence of `from` replaced by `to` (a REQUIRE fails when `from` is not there once).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  return text.replace(at, from.size(), to);
}

// Two steps by hand: E4M3 (max 448), L = 3, max, margin 0. Amax 2: scale 448 / 2 = 224, window [2]; amax 4: the max
// of 4 and the window's 2 is 4, scale 448 / 4 = 112, window [2, 4].
constexpr delayed_scaling_config small{.format = fp8_e4m3, .history_length = 3, .algorithm = amax_algorithm::max};
const std::string small_text =
    R"({"format":"safeamp.fp8_delayed_scaling","version":1,"tensors":[{"config":{"format":"e4m3","history_length":3,)"
    R"("algorithm":"max","margin":0},"scale":112,"history":[2,4],"counters":{"updates":2,"unused_steps":0,)"
    R"("non_finite_amax":0,"clamped_scales":0}}]})";

}  // namespace

TEST_CASE("fp8 checkpoint: two hand-worked steps give the hand-written JSON, and it loads back") {
  std::vector<delayed_scaling> t = make_tensors({small});
  t[0].record_amax(-2.0f);
  (void)t[0].update();
  t[0].record_amax(4.0f);
  (void)t[0].update();
  CHECK(t[0].scale() == 112.0f);
  CHECK(save_fp8_json(t) == small_text);
  std::vector<delayed_scaling> fresh = make_tensors({small});
  load_fp8_json(small_text, fresh);
  CHECK(fresh[0].scale() == 112.0f);
  CHECK(fresh[0].history() == std::vector<float>{2.0f, 4.0f});
  CHECK(fresh[0].counters() == delayed_scaling_counters{.updates = 2});
}

TEST_CASE("fp8 checkpoint: every field non-default round-trips bit-exactly") {
  // E5M2 (max 57344), L = 5, most_recent, margin 3; 40 steps reach every counter and a subnormal in the window.
  const delayed_scaling_config cfg{
      .format = fp8_e5m2, .history_length = 5, .algorithm = amax_algorithm::most_recent, .margin = 3};
  const delayed_scaling_config defaults{};
  CHECK(cfg.format != defaults.format);
  CHECK(cfg.history_length != defaults.history_length);
  CHECK(cfg.algorithm != defaults.algorithm);
  CHECK(cfg.margin != defaults.margin);
  std::vector<delayed_scaling> t = make_tensors({cfg});
  const std::vector<float> amaxes = {3.0f,   0.0f,  std::numeric_limits<float>::infinity(),
                                     1e-45f, 0.1f,  std::numeric_limits<float>::quiet_NaN(),
                                     7.5f,   1e30f, 1e-45f,
                                     6.0f};
  for (const float a : amaxes) {
    t[0].record_amax(a);
    (void)t[0].update();
  }
  const fp8_checkpoint c = checkpoint_of(t);
  const delayed_scaling_snapshot& s = c.tensors[0];
  // By hand (scaled max 57344 / 2^3 = 7168; window of L - 1 = 4): 3 rolls [3]; 0 unused; inf non-finite; 1e-45
  // rolls, 7168 / 1e-45 overflows (clamped) [3, 1e-45]; 0.1 rolls; NaN non-finite; 7.5 rolls (window full); 1e30
  // pushes 3 out; 1e-45 pushes 1e-45 out (clamped again); 6 pushes 0.1 out and sets the scale 7168 / 6.
  CHECK(s.counters ==
        delayed_scaling_counters{.updates = 10, .unused_steps = 1, .non_finite_amax = 2, .clamped_scales = 2});
  CHECK(s.history == std::vector<float>{7.5f, 1e30f, 1e-45f, 6.0f});
  CHECK(s.scale == 7168.0f / 6.0f);
  const fp8_checkpoint back = fp8_checkpoint_from_json(to_json(c), std::vector<delayed_scaling_config>{cfg});
  REQUIRE(back == c);
  REQUIRE(bits(back.tensors[0].scale) == bits(s.scale));
  for (std::size_t i = 0; i < s.history.size(); ++i) CHECK(bits(back.tensors[0].history[i]) == bits(s.history[i]));
}

TEST_CASE("fp8 checkpoint: a resume at any step continues bit for bit (objects)") {
  // Three tensors with different configs in one checkpoint; every window wraps around many times.
  const std::vector<std::vector<delayed_scaling_config>> setups = {
      {{.history_length = 1}, {.history_length = 2, .margin = 3}, {.format = fp8_e5m2, .history_length = 5}},
      {{.history_length = 16, .algorithm = amax_algorithm::most_recent},
       {.format = fp8_e5m2, .history_length = 2, .algorithm = amax_algorithm::most_recent, .margin = 1},
       {.history_length = 7, .margin = 126}},
      {{}},  // Transformer Engine's default: L = 1024, max, margin 0
  };
  delayed_scaling_counters seen{};  // over all runs: every branch of the update was reached
  for (const std::vector<delayed_scaling_config>& configs : setups) {
    const std::uint64_t steps = configs[0].history_length == 1024 ? 2600 : 700;
    // The uninterrupted run, kept at every step.
    std::vector<std::vector<delayed_scaling>> reference = {make_tensors(configs)};
    for (std::uint64_t step = 0; step < steps; ++step) {
      std::vector<delayed_scaling> next = reference.back();
      run_step(next, step);
      reference.push_back(next);
    }
    const std::vector<std::uint64_t> resume_at = configs[0].history_length == 1024
                                                     ? std::vector<std::uint64_t>{0, 1, 1022, 1023, 1024, 1025, 2000}
                                                     : std::vector<std::uint64_t>{0, 1, 2, 4, 5, 6, 15, 16, 17, 333};
    for (const std::uint64_t k : resume_at) {
      INFO("resumed after step " << k);
      const std::string text = save_fp8_json(reference[k]);
      std::vector<delayed_scaling> resumed = make_tensors(configs);
      load_fp8_json(text, resumed);
      for (std::size_t t = 0; t < configs.size(); ++t) require_same(resumed[t], reference[k][t]);
      for (std::uint64_t step = k; step < steps; ++step) {
        run_step(resumed, step);
        INFO("step " << step);
        for (std::size_t t = 0; t < configs.size(); ++t) require_same(resumed[t], reference[step + 1][t]);
      }
      CHECK(save_fp8_json(resumed) == save_fp8_json(reference.back()));
    }
    for (const delayed_scaling& t : reference.back()) {
      seen.unused_steps += t.counters().unused_steps;
      seen.non_finite_amax += t.counters().non_finite_amax;
      seen.clamped_scales += t.counters().clamped_scales;
    }
  }
  CHECK(seen.unused_steps > 0);
  CHECK(seen.non_finite_amax > 0);
  CHECK(seen.clamped_scales > 0);
}

TEST_CASE("fp8 checkpoint: the plain state and its ring resume bit for bit, and convert to and from the objects") {
  for (const std::int32_t length : {1, 2, 5, 16}) {
    for (const amax_algorithm algo : {amax_algorithm::max, amax_algorithm::most_recent}) {
      const delayed_scaling_config cfg{.history_length = length, .algorithm = algo, .margin = 2};
      const delayed_scaling_params p = make_delayed_scaling_params(cfg);
      const auto ring = static_cast<std::size_t>(length - 1);
      // The uninterrupted plain run, and the object run (its reference) beside it.
      std::vector<delayed_scaling_state> states = {delayed_scaling_state{}};
      std::vector<std::vector<float>> windows = {std::vector<float>(ring, 0.0f)};
      std::vector<std::vector<delayed_scaling>> objects = {make_tensors({cfg})};
      constexpr std::uint64_t steps = 300;
      for (std::uint64_t step = 0; step < steps; ++step) {
        delayed_scaling_state s = states.back();
        std::vector<float> w = windows.back();
        std::vector<delayed_scaling> o = objects.back();
        run_step(o, step);
        for (int i = 0; i < 1 + static_cast<int>(step % 3); ++i) {
          s.amax_bits = amax_fold(s.amax_bits, random_amax(0, step * 4 + static_cast<std::uint64_t>(i)));
        }
        delayed_scaling_step(p, s, w.data());
        states.push_back(s);
        windows.push_back(w);
        objects.push_back(o);
      }
      for (const std::uint64_t k : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{4}, std::uint64_t{5},
                                    std::uint64_t{17}, std::uint64_t{150}}) {
        INFO("length " << length << ", " << amax_algorithm_name(algo) << ", resumed after step " << k);
        const delayed_scaling_snapshot snap = snapshot_of(cfg, states[k], windows[k]);
        CHECK(snap == objects[k][0].snapshot());  // the two forms hold the same state
        // Through JSON into a fresh plain state: the same state, ring position included.
        const fp8_checkpoint back = fp8_checkpoint_from_json(to_json(fp8_checkpoint{.tensors = {snap}}),
                                                             std::vector<delayed_scaling_config>{cfg});
        delayed_scaling_state s{};
        std::vector<float> w(ring, 0.0f);
        restore(back.tensors[0], cfg, s, w);
        for (std::uint64_t step = k; step < steps; ++step) {
          INFO("step " << step);
          REQUIRE(bits(s.scale) == bits(states[step].scale));
          REQUIRE(bits(s.scale_inv) == bits(states[step].scale_inv));
          REQUIRE(s.counters == states[step].counters);
          REQUIRE(s.window_count == states[step].window_count);
          REQUIRE(s.window_oldest == states[step].window_oldest);
          REQUIRE(s.amax_bits == states[step].amax_bits);
          for (std::size_t i = 0; i < ring; ++i) REQUIRE(bits(w[i]) == bits(windows[step][i]));
          for (int i = 0; i < 1 + static_cast<int>(step % 3); ++i) {
            s.amax_bits = amax_fold(s.amax_bits, random_amax(0, step * 4 + static_cast<std::uint64_t>(i)));
          }
          delayed_scaling_step(make_delayed_scaling_params(cfg), s, w.data());
        }
        // The object form from the plain one, and back.
        std::vector<delayed_scaling> o = make_tensors({cfg});
        o[0].restore(snap);
        require_same(o[0], objects[k][0]);
      }
    }
  }
}

TEST_CASE("fp8 checkpoint: bad text is refused naming the field, the value and what is accepted") {
  const std::vector<delayed_scaling_config> into = {small};
  const auto refused = [&](const std::string& text) {
    return error_of([&] { (void)fp8_checkpoint_from_json(text, into); });
  };
  REQUIRE(refused(small_text).empty());
  // Every proper prefix (a truncated file) is refused.
  for (std::size_t n = 0; n < small_text.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THAT(refused(small_text.substr(0, n)), Catch::Contains("json is malformed at byte"));
  }
  struct bad_case {
    std::string from, to, message;
  };
  const std::vector<bad_case> cases = {
      {"safeamp.fp8_delayed_scaling", "safeamp.loss_scaler",
       "fp8 checkpoint.format is 'safeamp.loss_scaler'; accepted: safeamp.fp8_delayed_scaling"},
      {R"("version":1)", R"("version":2)", "fp8 checkpoint.version is 2; accepted: 1"},
      {R"("version":1)", R"("version":1.0)", "fp8 checkpoint.version is 1.0; accepted: a number representable"},
      {R"("version":1,)", "", "fp8 checkpoint.version is missing"},
      {R"("version":1)", R"("version":1,"extra":0)", "fp8 checkpoint member is 'extra' (unknown)"},
      {R"("version":1)", R"("version":1,"version":1)", "duplicate member 'version'"},
      {"}}]}", "}},{}]}", "fp8 checkpoint.tensors is 2 tensors; accepted: 1 (the tensors it is loaded into)"},
      {R"("tensors":[{"config")", R"("tensors":[{"cfg")", "fp8 checkpoint.tensors[0] member is 'cfg' (unknown)"},
      {R"("margin":0})", R"("margin":0,"margin":0})", "duplicate member 'margin'"},
      {R"("margin":0})", R"("margin":0,"amax_history_len":3})", "member is 'amax_history_len' (unknown)"},
      {R"("format":"e4m3")", R"("format":"fp8_e4m3")",
       "fp8 checkpoint.tensors[0].config.format is 'fp8_e4m3'; accepted: 'e4m3' (the config of the tensor"},
      {R"("history_length":3)", R"("history_length":1024)",
       "fp8 checkpoint.tensors[0].config.history_length is 1024; accepted: 3 (the config of the tensor"},
      {R"("algorithm":"max")", R"("algorithm":"most_recent")",
       "fp8 checkpoint.tensors[0].config.algorithm is 1; accepted: max (the config of the tensor"},
      {R"("algorithm":"max")", R"("algorithm":"mean")",
       "fp8 checkpoint.tensors[0].config.algorithm is 'mean'; accepted: max or most_recent"},
      {R"("margin":0)", R"("margin":2)", "fp8 checkpoint.tensors[0].config.margin is 2; accepted: 0 (the config"},
      {R"("scale":112,)", "", "fp8 checkpoint.tensors[0].scale is missing"},
      {R"("scale":112)", R"("scale":0)", "fp8 checkpoint.tensors[0].scale is 0; accepted: a float in ["},
      {R"("scale":112)", R"("scale":-112)", "fp8 checkpoint.tensors[0].scale is -112; accepted: a float in ["},
      {R"("scale":112)", R"("scale":1e39)", "fp8 checkpoint.tensors[0].scale is 1e39; accepted: a number"},
      {R"("scale":112)", R"("scale":"112")", "fp8 checkpoint.tensors[0].scale is not a number"},
      // max while nothing has left the window: exactly 448 over the window's largest amax, 4.
      {R"("scale":112)", R"("scale":112.00001)",
       "fp8 checkpoint.tensors[0].scale is 112.00001; accepted: 112 (max: fp8 max / 2^margin over the window's "
       "largest amax, 4, while no amax has left the window)"},
      {R"("history":[2,4])", R"("history":[4])",
       "fp8 checkpoint.tensors[0].history is 1 amaxes; accepted: min(rolled updates, history_length - 1) = min(2, 2) "
       "= 2 amaxes"},
      {R"("history":[2,4])", R"("history":[2,4,4])",
       "fp8 checkpoint.tensors[0].history is 3 amaxes; accepted: at most history_length - 1 = 2"},
      {R"("history":[2,4])", R"("history":[0,4])",
       "fp8 checkpoint.tensors[0].history[0] is 0; accepted: a finite amax > 0 (0, inf and NaN never enter"},
      {R"("history":[2,4])", R"("history":[-0,4])", "fp8 checkpoint.tensors[0].history[0] is -0; accepted"},
      {R"("history":[2,4])", R"("history":[2,-4])", "fp8 checkpoint.tensors[0].history[1] is -4; accepted"},
      {R"("history":[2,4])", R"("history":[2,1e39])",
       "fp8 checkpoint.tensors[0].history[1] is 1e39; accepted: a number representable"},
      {R"("history":[2,4])", R"("history":[2,null])", "fp8 checkpoint.tensors[0].history[1] is not a number"},
      {R"("history":[2,4])", R"("history":{"0":2})", "fp8 checkpoint.tensors[0].history is not an array"},
      {R"("updates":2)", R"("updates":-1)", "fp8 checkpoint.tensors[0].counters.updates is -1; accepted: an integer"},
      {R"("updates":2)", R"("updates":9223372036854775807)",
       "counters.updates is 9223372036854775807; accepted: an integer in [0, 9223372036854775806]"},
      {R"("updates":2)", R"("updates":9223372036854775808)",
       "counters.updates is 9223372036854775808; accepted: a number representable"},
      {R"("unused_steps":0)", R"("unused_steps":3)",
       "counters.unused_steps is 3; accepted: an integer in [0, updates] = [0, 2]"},
      {R"("non_finite_amax":0)", R"("non_finite_amax":3)",
       "counters.non_finite_amax is 3; accepted: an integer in [0, updates - unused_steps] = [0, 2]"},
      {R"("clamped_scales":0)", R"("clamped_scales":3)",
       "counters.clamped_scales is 3; accepted: an integer in [0, updates - unused_steps - non_finite_amax] = [0, 2]"},
      {R"("clamped_scales":0)", R"("clamped_scales":-1)", "counters.clamped_scales is -1; accepted: an integer >= 0"},
      {R"(,"clamped_scales":0)", "", "fp8 checkpoint.tensors[0].counters.clamped_scales is missing"},
  };
  for (const bad_case& c : cases) {
    const std::string text = replaced(small_text, c.from, c.to);
    INFO(text);
    CHECK_THAT(refused(text), Catch::Contains(c.message));
  }
  // Values quoted from the input are cut to 80 characters and their control characters escaped (quoted_input).
  const std::string long_name(500, 'Z');
  CHECK_THAT(refused(replaced(small_text, R"("format":"e4m3")", R"("format":")" + long_name + "\"")),
             Catch::Contains("config.format is '" + std::string(80, 'Z') + "...'; accepted: 'e4m3'"));
  CHECK_THAT(refused(replaced(small_text, R"("algorithm":"max")", R"("algorithm":"m\u001bx")")),
             Catch::Contains("config.algorithm is 'm\\x1bx'"));
  // Not an object; trailing text; an empty input.
  CHECK_THAT(refused("[]"), Catch::Contains("fp8 checkpoint is not a JSON object"));
  CHECK_THAT(
      refused(R"({"format":"safeamp.fp8_delayed_scaling","version":1,"tensors":{}})"),
      Catch::Contains("fp8 checkpoint.tensors is not an array; accepted: a JSON array of one object per tensor"));
  CHECK_THAT(refused(R"({"format":"safeamp.fp8_delayed_scaling","version":1,"tensors":[5]})"),
             Catch::Contains("fp8 checkpoint.tensors[0] is not an object"));
  CHECK_THAT(refused(small_text + "x"), Catch::Contains("trailing characters"));
  CHECK_THAT(refused(""), Catch::Contains("json is malformed at byte 0"));
}

TEST_CASE("fp8 checkpoint: states the updates never produce are refused") {
  // E4M3, L = 3, max: 448 / amax. Built as values and checked by validate (what loading runs after parsing).
  const delayed_scaling_snapshot good{
      .config = small, .scale = 112.0f, .history = {2.0f, 4.0f}, .counters = {.updates = 2}};
  REQUIRE(error_of([&] { validate(good, small); }).empty());
  const auto refused = [](delayed_scaling_snapshot s, const delayed_scaling_config& into = small) {
    return error_of([&] { validate(s, into, "snap"); });
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  delayed_scaling_snapshot s = good;
  s.scale = inf;
  CHECK_THAT(refused(s),
             Catch::Contains("snap.scale is inf; accepted: a float in [fp8 max / 2^margin / FLT_MAX, FLT_MAX] = "
                             "[1.3165538e-36, 3.4028235e+38] (what an update computes)"));
  s.scale = nan;
  CHECK_THAT(refused(s), Catch::Contains("snap.scale is nan"));
  s = good;
  s.history[1] = inf;
  CHECK_THAT(refused(s), Catch::Contains("snap.history[1] is inf; accepted: a finite amax > 0"));
  s.history[1] = nan;
  CHECK_THAT(refused(s), Catch::Contains("snap.history[1] is nan"));
  // Before any amax rolled the scale is the initial 1 (unused and non-finite updates keep it).
  const delayed_scaling_snapshot idle{.config = small,
                                      .scale = 1.0f,
                                      .history = {},
                                      .counters = {.updates = 3, .unused_steps = 2, .non_finite_amax = 1}};
  CHECK(refused(idle).empty());
  s = idle;
  s.scale = 2.0f;
  CHECK_THAT(refused(s), Catch::Contains("snap.scale is 2; accepted: 1 (the initial scale"));
  // The lowest scale an update computes: 448 / FLT_MAX = 1.3165538e-36 (a float quotient); one ulp below is refused.
  const float lowest = 448.0f / std::numeric_limits<float>::max();
  const delayed_scaling_config l1{.history_length = 1};
  const delayed_scaling_snapshot low{.config = l1, .scale = lowest, .history = {}, .counters = {.updates = 1}};
  CHECK(refused(low, l1).empty());
  s = low;
  s.scale = std::nextafter(lowest, 0.0f);
  CHECK_THAT(refused(s, l1),
             Catch::Contains("snap.scale is 1.3165537e-36; accepted: a float in [fp8 max / 2^margin / FLT_MAX, "
                             "FLT_MAX] = [1.3165538e-36"));
  // most_recent: the scale is the newest amax's. 448 / 4 = 112 fits; 448 / 2 = 224 does not.
  const delayed_scaling_config recent{.history_length = 3, .algorithm = amax_algorithm::most_recent};
  s = good;
  s.config = recent;
  CHECK(refused(s, recent).empty());
  s.scale = 224.0f;
  CHECK_THAT(refused(s, recent), Catch::Contains("snap.scale is 224; accepted: 112 (most_recent: fp8 max / 2^margin "
                                                 "over the newest amax, 4)"));
  // max after an amax left the window (3 rolls, L - 1 = 2): at most 448 / 4 (an older, larger amax may have set it).
  s = good;
  s.counters.updates = 3;
  s.scale = 56.0f;  // 448 / 8: an 8 that has left the window
  CHECK(refused(s).empty());
  s.scale = 113.0f;
  CHECK_THAT(refused(s), Catch::Contains("snap.scale is 113; accepted: at most 112 (max: fp8 max / 2^margin over the "
                                         "window's largest amax, 4)"));
  // The clamp: a window of the smallest subnormal (448 over it overflows) gives FLT_MAX exactly.
  s = good;
  s.history = {1e-45f, 1e-45f};
  s.scale = std::numeric_limits<float>::max();
  s.counters.clamped_scales = 2;
  CHECK(refused(s).empty());
  // The config the snapshot was taken under must be the tensor's.
  s = good;
  s.config.format = fp8_e5m2;
  CHECK_THAT(refused(s), Catch::Contains("snap.config.format is 'e5m2'; accepted: 'e4m3'"));
  s.config.format = format_spec{0, 3, special_values::ieee};  // no exponent bits: not a format
  CHECK_THAT(refused(s), Catch::Contains("snap.config.format is invalid; accepted: 'e4m3'"));
  // An invalid target config is refused as construction refuses it.
  CHECK_THAT(refused(good, delayed_scaling_config{.history_length = 0}), Catch::Contains("history_length is 0"));
}

TEST_CASE("fp8 checkpoint: a refused load changes no tensor; checkpoints are taken and restored between steps") {
  const std::vector<delayed_scaling_config> configs = {small, {.history_length = 4}};
  std::vector<delayed_scaling> saved = make_tensors(configs);
  for (std::uint64_t step = 0; step < 9; ++step) run_step(saved, step);
  const std::string text = save_fp8_json(saved);
  std::vector<delayed_scaling> target = make_tensors(configs);
  run_step(target, 100);
  const std::string before = save_fp8_json(target);
  // The second tensor's counters are refused after the first tensor parsed fine: nothing changes.
  const std::string bad = replaced(text, R"("clamped_scales":0}}])", R"("clamped_scales":-5}}])");
  CHECK_THAT(error_of([&] { load_fp8_json(bad, target); }),
             Catch::Contains("fp8 checkpoint.tensors[1].counters.clamped_scales is -5"));
  CHECK(save_fp8_json(target) == before);
  // Fewer tensors than the checkpoint holds: refused, naming both counts.
  std::vector<delayed_scaling> one = make_tensors({small});
  CHECK_THAT(error_of([&] { load_fp8_json(text, one); }),
             Catch::Contains("fp8 checkpoint.tensors is 2 tensors; accepted: 1 (the tensors it is loaded into)"));
  // In the middle of a step (an amax recorded, no update yet): no snapshot, no restore, and nothing changes.
  target[1].record_amax(3.0f);
  CHECK(target[1].in_step());
  CHECK_THAT(error_of([&] { (void)save_fp8_json(target); }), Catch::Contains("snapshot() in the middle of a step"));
  CHECK_THAT(error_of([&] { load_fp8_json(text, target); }), Catch::Contains("restore() of tensor 1 in the middle"));
  (void)target[1].update();
  CHECK_FALSE(target[1].in_step());
  load_fp8_json(text, target);
  CHECK(save_fp8_json(target) == text);
  // A checkpoint that would not load is not written either.
  fp8_checkpoint c = checkpoint_of(saved);
  c.tensors[0].scale = 0.0f;
  CHECK_THAT(error_of([&] { (void)to_json(c); }), Catch::Contains("fp8 checkpoint.tensors[0].scale is 0"));
  c = checkpoint_of(saved);
  c.version = 7;
  CHECK_THAT(error_of([&] { (void)to_json(c); }), Catch::Contains("fp8 checkpoint.version is 7; accepted: 1"));
}

TEST_CASE("fp8 checkpoint: the size cap is checked before parsing") {
  // 4096 + (1024 + 32 x 2) for the L = 3 tensor: 5184 bytes.
  const std::vector<delayed_scaling_config> into = {small};
  CHECK(max_fp8_checkpoint_bytes(into) == 5184);
  CHECK(max_fp8_checkpoint_bytes(std::vector<delayed_scaling_config>{{}, {.history_length = 1}}) ==
        4096 + 1024 + 32 * 1023 + 1024);
  // Whitespace within the cap is read; one byte over is refused without being parsed (it is not even JSON).
  const std::string padded = small_text + std::string(5184 - small_text.size(), ' ');
  CHECK(fp8_checkpoint_from_json(padded, into).tensors[0].scale == 112.0f);
  CHECK_THAT(error_of([&] { (void)fp8_checkpoint_from_json(std::string(5185, '['), into); }),
             Catch::Contains("fp8 checkpoint is 5185 bytes; accepted: at most 5184 bytes for 1 tensors"));
  // A window longer than the tensor's is refused by its length, before its values are read or stored.
  std::string many = "[1";
  for (int i = 0; i < 1000; ++i) many += ",1";
  many += "]";
  CHECK_THAT(error_of([&] { (void)fp8_checkpoint_from_json(replaced(small_text, "[2,4]", many), into); }),
             Catch::Contains("history is 1001 amaxes; accepted: at most history_length - 1 = 2"));
}

TEST_CASE("fp8 checkpoint: a plain state's ring bookkeeping is checked before the ring is read") {
  const delayed_scaling_config cfg{.history_length = 4};
  const delayed_scaling_params p = make_delayed_scaling_params(cfg);
  delayed_scaling_state good{};
  std::vector<float> w(3, 0.0f);
  for (const float a : {2.0f, 8.0f, 4.0f, 1.0f, 0.5f}) {  // 5 rolls: the ring of 3 wrapped, oldest at 5 mod 3 = 2
    good.amax_bits = amax_fold(0, a);
    delayed_scaling_step(p, good, w.data());
  }
  REQUIRE(good.window_oldest == 2);
  const delayed_scaling_snapshot snap = snapshot_of(cfg, good, w);
  CHECK(snap.history == std::vector<float>{4.0f, 1.0f, 0.5f});
  // By hand: 2 -> 448 / 2; 8 -> 448 / 8 = 56, and 56 while the 8 is in the window of the next steps' max: 4 and 1
  // keep it, and 0.5's max is still over 8 (the window before it: 8, 4, 1); then 8 leaves. 56 < 448 / 4 = 112, the
  // bound of the window that is left.
  CHECK(snap.scale == 56.0f);
  const auto refused = [&](delayed_scaling_state s, std::size_t window_floats = 3) {
    std::vector<float> ring = w;
    ring.resize(window_floats);
    return error_of([&] { (void)snapshot_of(cfg, s, ring); });
  };
  delayed_scaling_state s = good;
  s.window_count = 4;
  CHECK_THAT(refused(s), Catch::Contains("state.window_count is 4; accepted: an integer in [0, history_length - 1] = "
                                         "[0, 3]"));
  s = good;
  s.window_count = -1;
  CHECK_THAT(refused(s), Catch::Contains("state.window_count is -1"));
  s = good;
  s.window_oldest = 3;
  CHECK_THAT(refused(s),
             Catch::Contains("state.window_oldest is 3; accepted: a ring index in [0, history_length - 1)"));
  s = good;
  s.window_oldest = -2147483647 - 1;
  CHECK_THAT(refused(s), Catch::Contains("state.window_oldest is -2147483648"));
  s = good;
  s.amax_bits = amax_fold(0, 1.0f);
  CHECK_THAT(refused(s), Catch::Contains("state.amax_bits is 1065353216; accepted: 0 (between steps"));
  s = good;
  s.padding = 1;
  CHECK_THAT(refused(s), Catch::Contains("state.padding is 1; accepted: 0"));
  s = good;
  s.scale_inv = 1.0f;
  CHECK_THAT(refused(s), Catch::Contains("state.scale_inv is 1; accepted: 1 / scale"));
  CHECK_THAT(refused(good, 2), Catch::Contains("delayed scaling window is 2 floats; accepted: at least"));
  // The counters against the ring: 5 rolls fill the ring of 3, so 2 amaxes cannot be right.
  s = good;
  s.window_count = 2;
  CHECK_THAT(refused(s), Catch::Contains("delayed scaling state.history is 2 amaxes"));
  // restore into a ring that is too short writes nothing.
  delayed_scaling_state into{};
  std::vector<float> short_ring(2, -1.0f);
  CHECK_THAT(error_of([&] { restore(snap, cfg, into, short_ring); }), Catch::Contains("window is 2 floats"));
  CHECK(into == delayed_scaling_state{});
  CHECK(short_ring == std::vector<float>(2, -1.0f));
}
