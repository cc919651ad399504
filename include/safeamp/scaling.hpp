// Umbrella for the loss-scaling layer: config/state and the one transition, validation, presets, the stateful
// scaler (dynamic, static, none) and its concept over host or deferred (device) memory, the scaler block and its
// step-ending transition, unscale and clip passes, checkpoints, FP8 delayed scaling (class and plain-data step) and
// its checkpoint.
#pragma once

#include "safeamp/scaling/communicator.hpp"
#include "safeamp/scaling/deferred_loss_scaler.hpp"
#include "safeamp/scaling/delayed_scaling_config.hpp"
#include "safeamp/scaling/delayed_scaling_step.hpp"
#include "safeamp/scaling/fp8_checkpoint.hpp"
#include "safeamp/scaling/fp8_delayed_scaling.hpp"
#include "safeamp/scaling/grad_clip.hpp"
#include "safeamp/scaling/loss_scaler.hpp"
#include "safeamp/scaling/scale_rules.hpp"
#include "safeamp/scaling/scaler_block.hpp"
#include "safeamp/scaling/scaler_checkpoint.hpp"
#include "safeamp/scaling/scaler_concept.hpp"
#include "safeamp/scaling/scaler_config.hpp"
#include "safeamp/scaling/scaler_presets.hpp"
#include "safeamp/scaling/scaler_validate.hpp"
#include "safeamp/scaling/step_report.hpp"
#include "safeamp/scaling/unscale.hpp"
#include "safeamp/scaling/update_scale.hpp"
