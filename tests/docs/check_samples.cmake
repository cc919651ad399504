# Fails when a page of docs/ (or the README) holds C++ that tests/docs does not compile: a ```cpp block on a page
# that safeamp_doc_samples() does not list, a page whose block count changed since CMake last ran, or a block
# fenced as C++ in another spelling (```c++, ```cxx, ```cpp with attributes, ...) that the extractor would miss.
# An outline that is not meant to compile is fenced ```text. Run as a test, so it reads the pages as they are now:
#   cmake -DSOURCE=<project root> "-DREGISTERED=docs/<page>=<blocks>|..." -P check_samples.cmake
string(REPLACE "|" ";" REGISTERED "${REGISTERED}")
file(GLOB pages "${SOURCE}/docs/*.md")
list(APPEND pages "${SOURCE}/README.md")
set(problems "")
foreach(md IN LISTS pages)
  file(RELATIVE_PATH rel "${SOURCE}" "${md}")
  get_filename_component(page "${md}" NAME)
  file(STRINGS "${md}" cpp REGEX "^```cpp[ \t]*$")
  list(LENGTH cpp count)
  file(STRINGS "${md}" other REGEX "^```[ \t]*([cC]\\+\\+|[cC][xX][xX]|[cC][cC]|[cC][pP][pP][ \t{].+|CPP|Cpp|[hH][pP][pP]|cuda|cu)[ \t]*$")
  foreach(fence IN LISTS other)
    string(APPEND problems "  ${rel}: a block fenced '${fence}' is C++ the docs tests would not extract: fence it ```cpp "
                           "(compiled) or ```text (an outline)\n")
  endforeach()
  set(registered "")
  foreach(entry IN LISTS REGISTERED)
    if(entry MATCHES "^([^=]+)=([0-9]+)$" AND CMAKE_MATCH_1 STREQUAL rel)
      set(registered ${CMAKE_MATCH_2})
    endif()
  endforeach()
  if(registered STREQUAL "" AND count GREATER 0)
    string(APPEND problems "  ${rel}: ${count} ```cpp block(s) that no test compiles: list the page with "
                           "safeamp_doc_samples() in tests/docs/CMakeLists.txt, or fence an outline ```text\n")
  elseif(NOT registered STREQUAL "" AND NOT count EQUAL registered)
    string(APPEND problems "  ${rel}: ${count} ```cpp block(s) now, ${registered} when CMake last ran: rebuild, so "
                           "that each one is compiled\n")
  endif()
endforeach()
if(problems)
  message(FATAL_ERROR "C++ in the docs that is not compiled:\n${problems}")
endif()
list(LENGTH pages n)
message("every ```cpp block of ${n} pages is compiled: ${REGISTERED}")
