// Included by the format tests after safeamp/format.hpp. Their *_avx512 builds define SAFEAMP_TEST_EXPECT_AVX512:
// if the AVX-512 kernels were not enabled by the flags, the build fails instead of testing the portable loops twice.
#pragma once

#include "safeamp/format/round_avx512.hpp"

#if defined(SAFEAMP_TEST_EXPECT_AVX512) && !defined(SAFEAMP_HAVE_AVX512_KERNELS)
#error "this test is built to check the AVX-512 kernels, but round_avx512.hpp did not enable them"
#endif
