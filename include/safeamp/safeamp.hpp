// Umbrella header for safeamp's core (standard library only; no Eigen, no CUDA).
#pragma once

#include "safeamp/config.hpp"
#include "safeamp/error.hpp"
#include "safeamp/format.hpp"
