# Floating-point code generation that does not depend on the build's ISA flags.
# g++ (in its default GNU dialect) and clang contract a*b+c into one fused multiply-add whenever the target
# has FMA (-march=native on x86-64, always on aarch64), which changes results by one rounding. The simulator
# and the tests that compare its bits are built with -ffp-contract=off, so every product and every sum is
# rounded separately, as the CUDA kernels do with __fmul_rn/__fadd_rn.
function(safeamp_exact_fp target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
  endif()
endfunction()
