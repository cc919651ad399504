# cmake -DCOMPILER=<c++> -DINCLUDE_DIR=<include/> -P check_headers.cmake
# Compiles a one-line unit `#include "<header>"` for every header under INCLUDE_DIR/safeamp, alone, and fails
# naming each header that does not compile by itself, with the compiler's first lines.
if(NOT COMPILER OR NOT INCLUDE_DIR)
  message(FATAL_ERROR "check_headers.cmake: pass -DCOMPILER=<c++ compiler> -DINCLUDE_DIR=<include folder>")
endif()
file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/safeamp/*.hpp)
list(LENGTH headers count)
if(count EQUAL 0)
  message(FATAL_ERROR "check_headers.cmake: no header under ${INCLUDE_DIR}/safeamp")
endif()
list(SORT headers)
set(failed "")
foreach(h IN LISTS headers)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "#include \"${h}\""
                  COMMAND ${COMPILER} -std=c++20 -fsyntax-only -I${INCLUDE_DIR} -x c++ -
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    string(SUBSTRING "${err}" 0 600 err)
    message("${h} does not compile on its own:\n${err}")
    list(APPEND failed ${h})
  endif()
endforeach()
list(LENGTH failed nfailed)
if(nfailed GREATER 0)
  message(FATAL_ERROR "${nfailed} of ${count} headers do not compile on their own: ${failed}")
endif()
message(STATUS "all ${count} headers under include/safeamp compile on their own")
