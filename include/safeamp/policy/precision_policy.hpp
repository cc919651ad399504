// Precision policies: the value (formats per role and per op class), the presets, and the string grammar.
// This is the header trainers include; it pulls in the three parts, each in its own file.
#pragma once

#include "safeamp/policy/op_class.hpp"
#include "safeamp/policy/policy_presets.hpp"
#include "safeamp/policy/policy_string.hpp"
#include "safeamp/policy/policy_value.hpp"
