// NVTX ranges for Nsight Systems: `safeamp::cuda::nvtx_range r("unscale");` marks a phase of the step on the
// profile's timeline. Header-only, through the toolkit's header-only NVTX 3 (nvtx3/nvToolsExt.h) when it is
// present and SAFEAMP_NO_NVTX is not defined; otherwise a no-op, so code using it builds everywhere. A range
// costs a few tens of nanoseconds when no profiler is attached.
#pragma once

#if !defined(SAFEAMP_NO_NVTX) && defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define SAFEAMP_HAVE_NVTX 1
#endif
#endif
#ifndef SAFEAMP_HAVE_NVTX
#define SAFEAMP_HAVE_NVTX 0
#endif

namespace safeamp::cuda {

/// True when ranges reach NVTX (the header was found at compile time).
inline constexpr bool nvtx_enabled = SAFEAMP_HAVE_NVTX != 0;

/// Pushes a named range for its lifetime (host thread timeline; the GPU work it enqueues is correlated by
/// Nsight Systems). `name` must outlive the range (a string literal).
class nvtx_range {
 public:
  explicit nvtx_range(const char* name) noexcept {
#if SAFEAMP_HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~nvtx_range() {
#if SAFEAMP_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;
};

}  // namespace safeamp::cuda
