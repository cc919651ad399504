// The std-only JSON reader/writer (strict, exact numbers) and the JSON Lines step-record sink.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "safeamp/scaling.hpp"
#include "safeamp/telemetry.hpp"

using namespace safeamp;

TEST_CASE("parse objects, arrays, strings with escapes, literals and numbers") {
  const json::value v = json::parse(R"( {"a": [1, -2.5e3, true, false, null], "s": "x\"\\\n\u0041", "o": {}} )");
  REQUIRE(v.type == json::kind::object);
  const json::value& a = json::member(v, "a", "doc");
  REQUIRE(a.items.size() == 5);
  CHECK(json::to_number<int>(a.items[0], "a0") == 1);
  CHECK(json::to_number<double>(a.items[1], "a1") == -2500.0);
  CHECK(a.items[2].boolean);
  CHECK(a.items[4].type == json::kind::null);
  CHECK(json::to_string_value(json::member(v, "s", "doc"), "s") == "x\"\\\nA");
  CHECK(json::member(v, "o", "doc").members.empty());
}

TEST_CASE("malformed and truncated JSON is rejected with the byte offset") {
  for (const char* bad : {"", "{", "{\"a\"", "{\"a\":}", "{\"a\":1,}", "[1 2]", "tru", "01x", "\"abc", "{\"a\":1}}",
                          "-", "1.", "1e", "{\"a\":1,\"a\":2}", "\"\\q\""}) {
    INFO(bad);
    CHECK_THROWS_WITH(json::parse(bad), Catch::Contains("json"));
  }
  std::string deep(100, '[');
  CHECK_THROWS_WITH(json::parse(deep), Catch::Contains("deeply"));
}

TEST_CASE("floats and doubles survive writing and reading bit for bit") {
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {
    const std::uint32_t fb = static_cast<std::uint32_t>(rng());
    const float f = safeamp::bit_cast<float>(fb);
    if (!std::isfinite(f)) continue;
    const float back = json::to_number<float>(json::parse(json::number_text(f)), "f");
    REQUIRE(safeamp::bit_cast<std::uint32_t>(back) == fb);
    const std::uint64_t db = (static_cast<std::uint64_t>(rng()) << 32) | rng();
    const double d = safeamp::bit_cast<double>(db);
    if (!std::isfinite(d)) continue;
    const double dback = json::to_number<double>(json::parse(json::number_text(d)), "d");
    REQUIRE(safeamp::bit_cast<std::uint64_t>(dback) == db);
  }
  CHECK_THROWS_AS(json::number_text(std::numeric_limits<float>::infinity()), error);
}

TEST_CASE("step records are JSON Lines with null for non-finite numbers") {
  std::ostringstream out;
  telemetry::jsonl_sink sink(out);
  sink.write({.step = 3,
              .loss = 0.5,
              .scale = 65536.0f,
              .found_inf = false,
              .skipped = false,
              .grad_norm_before_clip = 2.0,
              .grad_norm_after_clip = 1.0});
  sink.write({.step = 4, .loss = std::nan(""), .scale = 32768.0f, .found_inf = true, .skipped = true});
  CHECK(sink.records_written() == 2);
  std::istringstream in(out.str());
  std::string line1, line2;
  std::getline(in, line1);
  std::getline(in, line2);
  CHECK(
      line1 ==
      R"({"step":3,"loss":0.5,"scale":65536,"found_inf":false,"skipped":false,"grad_norm_before_clip":2,"grad_norm_after_clip":1})");
  const json::value v2 = json::parse(line2);
  CHECK(json::member(v2, "loss", "r").type == json::kind::null);
  CHECK(json::to_bool(json::member(v2, "skipped", "r"), "skipped"));
  CHECK(json::to_number<float>(json::member(v2, "scale", "r"), "scale") == 32768.0f);
}

TEST_CASE("a non-finite scale is written as null, a finite one as its shortest float text") {
  // The reviewer's records: an inf scale made to_json_line throw, a NaN one made jsonl_sink::write throw.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const telemetry::step_record r{.step = 3, .loss = nan, .scale = std::numeric_limits<float>::infinity()};
  CHECK(telemetry::to_json_line(r) ==
        R"({"step":3,"loss":null,"scale":null,"found_inf":false,"skipped":false,"grad_norm_before_clip":-1,)"
        R"("grad_norm_after_clip":-1})");
  std::ostringstream out;
  telemetry::jsonl_sink sink(out);
  sink.write({.step = 4, .scale = std::numeric_limits<float>::quiet_NaN()});
  sink.write({.step = 5, .scale = 0.1f});  // the float 0.1f, not its double expansion 0.10000000149011612
  CHECK(sink.records_written() == 2);
  CHECK(out.str() == R"({"step":4,"loss":0,"scale":null,"found_inf":false,"skipped":false,"grad_norm_before_clip":-1,)"
                     R"("grad_norm_after_clip":-1})"
                     "\n"
                     R"({"step":5,"loss":0,"scale":0.1,"found_inf":false,"skipped":false,"grad_norm_before_clip":-1,)"
                     R"("grad_norm_after_clip":-1})"
                     "\n");
}

TEST_CASE("numbers with leading zeros are not JSON and are refused") {
  // JSON's int is 0 or a digit 1-9 followed by digits (RFC 8259, section 6).
  for (const char* bad : {"0002000", "00", "01", "-01", "[1,02]", "{\"a\":007}", "00.5", "-00", "01e3"}) {
    INFO(bad);
    CHECK_THROWS_WITH(json::parse(bad), Catch::Contains("leading zero"));
  }
  CHECK_THROWS_WITH(json::parse("0002000"), Catch::Contains("malformed at byte 1"));
  for (const char* good : {"0", "-0", "0.5", "-0.25", "0e5", "10", "100", "-105", "1.05", "2000"}) {
    INFO(good);
    CHECK_NOTHROW(json::parse(good));
  }
  CHECK(json::to_number<double>(json::parse("-0.25"), "x") == -0.25);
  CHECK(json::to_number<int>(json::parse("100"), "x") == 100);
  // The reviewer's checkpoint: "growth_interval":0002000 was read as 2000.
  loss_scaler s;
  std::string j = s.save_json();
  const std::string from = "\"growth_interval\":2000";
  j.replace(j.find(from), from.size(), "\"growth_interval\":0002000");
  CHECK_THROWS_WITH(s.load_json(j), Catch::Contains("leading zero"));
}

TEST_CASE("a scaler's report becomes a step record") {
  loss_scaler s(scaler_config{.init_scale = 256.0f});
  std::vector<float> g = {256.0f * 3.0f, 256.0f * 4.0f};
  s.unscale(g);
  (void)s.clip_grad_norm(g, 1.0);
  s.step([] {});
  const telemetry::step_record r = telemetry::make_step_record(s.update(), 1.25);
  CHECK(r.scale == 256.0f);
  CHECK_FALSE(r.skipped);
  CHECK(r.grad_norm_before_clip == 5.0);
  CHECK(r.loss == 1.25);
}

TEST_CASE("scaler counters as JSON") {
  loss_scaler s(scaler_config{.init_scale = 4.0f, .growth_interval = 1});
  for (const bool bad : {true, false, true, true}) {
    s.record_found_inf(bad);
    s.step([] {});
    s.update();
  }
  const json::value v = json::parse(telemetry::to_json(s.stats()));
  CHECK(json::to_number<int>(json::member(v, "steps", "c"), "steps") == 4);
  CHECK(json::to_number<int>(json::member(v, "skipped_steps", "c"), "skipped") == 3);
  CHECK(json::to_number<int>(json::member(v, "consecutive_skips", "c"), "consecutive") == 2);
  CHECK(json::to_number<int>(json::member(v, "growth_events", "c"), "growth") == 1);
  CHECK(json::to_number<int>(json::member(v, "backoff_events", "c"), "backoff") == 3);
  CHECK(json::to_number<int>(json::member(v, "last_overflow_step", "c"), "last") == 3);
}
