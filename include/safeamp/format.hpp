// All of the number-format layer: descriptors and limits, names, rounding, stochastic bits, bulk casts.
#pragma once

#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/format/round_options.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_span.hpp"
