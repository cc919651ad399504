# cmake -DCOMPILER=<c++> -DINCLUDE_DIR=<include/> -DSOURCES=<a;b;...> -P check_unoptimised.cmake
# Compiles each source at -O0 with -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Werror (-fsyntax-only): once with
# SAFEAMP_EXTERN_KERNELS, as safeamp::format_kernels builds it, and the first source once more without, where every
# kernel is instantiated in the one unit as in a header-only user's build. Fails naming each unit that does not
# compile, with the compiler's first error.
if(NOT COMPILER OR NOT INCLUDE_DIR OR NOT SOURCES)
  message(FATAL_ERROR "check_unoptimised.cmake: pass -DCOMPILER=<c++ compiler> -DINCLUDE_DIR=<include folder> "
                      "-DSOURCES=<kernel sources, ;-separated>")
endif()
set(flags -std=c++20 -O0 -fsyntax-only -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Werror -I${INCLUDE_DIR})
set(failed "")
set(count 0)
# Compiles `src` with the extra arguments in ARGN; a failure is reported as "<src> (<label>)".
function(check_unit src label)
  math(EXPR n "${count} + 1")
  set(count ${n} PARENT_SCOPE)
  execute_process(COMMAND ${COMPILER} ${flags} ${ARGN} ${src} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    string(FIND "${err}" "error:" at)  # the first error, not the "In file included from" lines before it
    if(at GREATER 300)
      math(EXPR at "${at} - 300")
    else()
      set(at 0)
    endif()
    string(SUBSTRING "${err}" ${at} 900 err)
    message("${src} (${label}) does not compile at -O0 with -Werror:\n${err}")
    set(failed ${failed} "${src} (${label})" PARENT_SCOPE)
  endif()
endfunction()
foreach(src IN LISTS SOURCES)
  if(NOT EXISTS ${src})
    message(FATAL_ERROR "check_unoptimised.cmake: no such source: ${src}")
  endif()
  check_unit(${src} extern -DSAFEAMP_EXTERN_KERNELS=1)
endforeach()
list(GET SOURCES 0 first)
check_unit(${first} header-only)
list(LENGTH failed nfailed)
if(nfailed GREATER 0)
  message(FATAL_ERROR "${nfailed} of ${count} kernel units do not compile at -O0 with -Werror: ${failed}")
endif()
message(STATUS "all ${count} kernel units compile at -O0 with -Wall -Wextra -Wpedantic -Wconversion -Wshadow -Werror")
