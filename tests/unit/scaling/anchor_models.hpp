// Independent models of the anchors' update rules, written from the pseudo-code in
// /work/shared/reference/loss-scalers.md section B (PyTorch _amp_update_scale_, DeepSpeed DynamicLossScaler,
// Megatron DynamicGradScaler, Apex update_scale_hysteresis). Deliberately naive and separate from the library
// code, including each anchor's defects, so that the presets can be compared against them step by step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace anchor {

struct torch_grad_scaler {  // B.1: no floor, isfinite guard on growth
  float scale;
  double growth, backoff;
  int interval;
  int tracker = 0;
  void update(bool found_inf) {
    if (found_inf) {
      scale = static_cast<float>(scale * backoff);
      tracker = 0;
      return;
    }
    const int succ = tracker + 1;
    if (succ == interval) {
      const double grown = scale * growth;
      if (grown < 3.4028235677973366e38) {  // f32(grown) finite
        scale = static_cast<float>(grown);
      }
      tracker = 0;
    } else {
      tracker = succ;
    }
  }
};

struct deepspeed_dynamic {  // B.2: Python doubles, hysteresis refilled at growth (or every clean step)
  double cur_scale;
  double scale_factor;
  int scale_window;
  double min_scale;
  int delayed_shift;
  bool consecutive_hysteresis;
  int cur_hysteresis;
  long last_overflow_iter = -1;
  long cur_iter = 0;
  bool raised = false;
  void update(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        if (cur_scale == min_scale) raised = true;  // raise_error_at_min_scale
        cur_scale = std::max(cur_scale / scale_factor, min_scale);
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if (consecutive_hysteresis) cur_hysteresis = delayed_shift;
      if ((cur_iter - last_overflow_iter) % scale_window == 0) {
        if (!consecutive_hysteresis) cur_hysteresis = delayed_shift;
        cur_scale *= scale_factor;
      }
    }
    cur_iter += 1;
  }
};

struct megatron_dynamic {  // B.3: float32 scale, floor, no inf guard, hysteresis may go negative
  float scale;
  float min_scale;
  float growth, backoff;
  int interval;
  int hysteresis;
  int growth_tracker = 0;
  int hysteresis_tracker;
  void update(bool found_inf) {
    if (found_inf) {
      growth_tracker = 0;
      hysteresis_tracker -= 1;
      if (hysteresis_tracker <= 0) scale = std::max(scale * backoff, min_scale);
    } else {
      growth_tracker += 1;
      if (growth_tracker == interval) {
        growth_tracker = 0;
        hysteresis_tracker = hysteresis;
        scale = scale * growth;  // may become inf
      }
    }
  }
};

struct apex_hysteresis_kernel {  // B.4: consecutive hysteresis, isfinite guard, no floor
  float scale;
  double growth, backoff;
  int interval;
  int hysteresis;
  int growth_tracker = 0;
  int hyst;
  void update(bool found_inf) {
    if (found_inf) {
      hyst -= 1;
      if (hyst > 0) {
        growth_tracker = 0;
        return;
      }
      scale = static_cast<float>(scale * backoff);
      growth_tracker = 0;
    } else {
      const int succ = growth_tracker + 1;
      if (succ == interval) {
        const double grown = scale * growth;
        if (grown < 3.4028235677973366e38) scale = static_cast<float>(grown);
        growth_tracker = 0;
      } else {
        growth_tracker = succ;
      }
    }
    if (!found_inf) hyst = hysteresis;
  }
};

}  // namespace anchor
