// Per-step telemetry records and a JSON Lines sink: one JSON object per line with the step, loss, scale,
// found_inf, skipped, and the gradient norm before and after clipping, written as the run goes.
#pragma once

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/scaling/step_report.hpp"
#include "safeamp/telemetry/json.hpp"

namespace safeamp::telemetry {

struct step_record {
  std::int64_t step = 0;
  double loss = 0.0;
  float scale = 0.0f;  // scale used in this step
  bool found_inf = false;
  bool skipped = false;
  double grad_norm_before_clip = -1.0;  // -1: not clipped / not measured
  double grad_norm_after_clip = -1.0;
  friend constexpr bool operator==(const step_record&, const step_record&) = default;
};

/// The record for a scaler's step report and the step's loss.
[[nodiscard]] inline step_record make_step_record(const step_report& r, double loss) noexcept {
  return step_record{.step = r.step,
                     .loss = loss,
                     .scale = r.scale_before,
                     .found_inf = r.found_inf,
                     .skipped = !r.applied,
                     .grad_norm_before_clip = r.grad_norm_before_clip,
                     .grad_norm_after_clip = r.grad_norm_after_clip};
}

/// One JSON object, no newline. Non-finite numbers (a NaN loss, an inf scale or norm) are written as null.
[[nodiscard]] inline std::string to_json_line(const step_record& r) {
  json::object_writer w;
  const auto number_or_null = [&w](const char* key, auto v) {  // a float stays a float (shortest float text)
    if (std::isfinite(v)) {
      w.add(key, v);
    } else {
      w.add_raw(key, "null");
    }
  };
  w.add("step", r.step);
  number_or_null("loss", r.loss);
  number_or_null("scale", r.scale);
  w.add("found_inf", r.found_inf).add("skipped", r.skipped);
  number_or_null("grad_norm_before_clip", r.grad_norm_before_clip);
  number_or_null("grad_norm_after_clip", r.grad_norm_after_clip);
  return w.str();
}

/// Writes one record per line to a stream (a file opened by the caller, std::cout, a stringstream).
class jsonl_sink {
 public:
  explicit jsonl_sink(std::ostream& out) : out_(&out) {}
  void write(const step_record& r) {
    *out_ << to_json_line(r) << '\n';
    if (!*out_) throw error("telemetry sink", "write failed", "a writable stream");
    ++written_;
  }
  [[nodiscard]] std::int64_t records_written() const noexcept { return written_; }

 private:
  std::ostream* out_;
  std::int64_t written_ = 0;
};

}  // namespace safeamp::telemetry
