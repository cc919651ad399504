// Umbrella header for safeamp's core (standard library only; no Eigen, no CUDA).
#pragma once

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format.hpp"
#include "safeamp/memory.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/quoted_input.hpp"
#include "safeamp/scaling.hpp"
#include "safeamp/telemetry.hpp"
