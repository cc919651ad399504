# SAFEAMP_SANITIZE: a comma-separated list of sanitizers (e.g. "address,undefined") compiled into safeamp's own
# targets: every target defined in this project's directories (library, simulator, tool, tests). The flags are
# directory-scoped, so a consumer that adds safeamp with add_subdirectory is not affected.
# UBSan is made fatal (-fno-sanitize-recover) so that CTest sees a failure instead of a printed warning.
set(SAFEAMP_SANITIZE "" CACHE STRING "Sanitizers for safeamp's own targets, e.g. address,undefined (empty: none)")

if(SAFEAMP_SANITIZE)
  if(NOT SAFEAMP_SANITIZE MATCHES "^(address|undefined|leak|thread)(,(address|undefined|leak|thread))*$")
    message(FATAL_ERROR "SAFEAMP_SANITIZE is '${SAFEAMP_SANITIZE}'; accepted: a comma-separated list of "
                        "address, undefined, leak, thread (e.g. address,undefined)")
  endif()
  if(SAFEAMP_SANITIZE MATCHES "thread" AND SAFEAMP_SANITIZE MATCHES "address")
    message(FATAL_ERROR "SAFEAMP_SANITIZE: thread cannot be combined with address")
  endif()
  set(safeamp_sanitize_flags -fsanitize=${SAFEAMP_SANITIZE} -fno-omit-frame-pointer)
  # Reports need file and line: debug information, unless the build type brings its own (scripts/sanitize keeps
  # RelWithDebInfo's to line tables, which is all a report reads and costs a fifth less compile time).
  if(NOT CMAKE_BUILD_TYPE MATCHES "^(Debug|RelWithDebInfo)$")
    list(APPEND safeamp_sanitize_flags -g)
  endif()
  if(SAFEAMP_SANITIZE MATCHES "undefined")
    list(APPEND safeamp_sanitize_flags -fno-sanitize-recover=undefined)
  endif()
  # C++ only: nvcc does not take -fsanitize (CUDA sources of safeamp::cuda are left as they are).
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${safeamp_sanitize_flags}>")
  add_link_options(-fsanitize=${SAFEAMP_SANITIZE})
  message(STATUS "safeamp: sanitizers ${SAFEAMP_SANITIZE} on safeamp's targets")
endif()

# safeamp_sanitize_kernels(<target>): the rounding kernels' units (safeamp::format_kernels) leave out UBSan's
# pointer-overflow check. In their SIMD loops it instruments every address computation and took 30-40% of their
# compile time under ASan+UBSan (docs/performance.md, "Build and CI time", 2026-12-07); it reports only an address
# computation that wraps around the address space or offsets a null pointer, and a kernel's addresses lie inside
# the spans it was given, which ASan checks at every access. Every other check stays.
function(safeamp_sanitize_kernels target)
  if(SAFEAMP_SANITIZE MATCHES "undefined")
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=pointer-overflow>")
  endif()
endfunction()
