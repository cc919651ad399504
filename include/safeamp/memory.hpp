// Umbrella for the memory/roofline layer: device table, roofline, byte ledger, model states, activations,
// budget and the nightly-window planner (standard library only).
#pragma once

#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/budget.hpp"
#include "safeamp/memory/bytes.hpp"
#include "safeamp/memory/calibration.hpp"
#include "safeamp/memory/data_parallel.hpp"
#include "safeamp/memory/device_spec.hpp"
#include "safeamp/memory/device_table.hpp"
#include "safeamp/memory/devices.hpp"
#include "safeamp/memory/inference.hpp"
#include "safeamp/memory/model_states.hpp"
#include "safeamp/memory/optimizers.hpp"
#include "safeamp/memory/plan_candidate.hpp"
#include "safeamp/memory/plan_options.hpp"
#include "safeamp/memory/planner.hpp"
#include "safeamp/memory/remedies.hpp"
#include "safeamp/memory/roofline.hpp"
#include "safeamp/memory/state_options.hpp"
#include "safeamp/memory/step_phases.hpp"
#include "safeamp/memory/step_time.hpp"
#include "safeamp/memory/transformer_shape.hpp"
