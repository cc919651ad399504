// Umbrella for telemetry: the std-only JSON value/writer/reader, per-step JSON Lines records, scaler counters.
#pragma once

#include "safeamp/telemetry/json.hpp"
#include "safeamp/telemetry/scaler_counters.hpp"
#include "safeamp/telemetry/step_record.hpp"
