// Umbrella for the precision-policy layer: policy value, op-class table, presets, string grammar.
#pragma once

#include "safeamp/policy/precision_policy.hpp"
