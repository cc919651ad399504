// All of the number-format layer: descriptors and limits, names, rounding, stochastic bits, bulk casts,
// block-scaled quantization (OCP MX, NVFP4).
#pragma once

#include "safeamp/format/block_format.hpp"
#include "safeamp/format/block_kernels.hpp"
#include "safeamp/format/block_names.hpp"
#include "safeamp/format/block_quantize.hpp"
#include "safeamp/format/block_reference.hpp"
#include "safeamp/format/format_names.hpp"
#include "safeamp/format/format_spec.hpp"
#include "safeamp/format/philox.hpp"
#include "safeamp/format/round.hpp"
#include "safeamp/format/round_exponent_only.hpp"
#include "safeamp/format/round_options.hpp"
#include "safeamp/format/round_kernel.hpp"
#include "safeamp/format/round_span.hpp"
