cmake_minimum_required(VERSION 3.20)
# Counts the lines of an example that its comment and docs/simulator.md compare with PyTorch, by the rule the
# example states: in each block that opens with a `// seed step` comment and closes at a blank line or at
# `// end of the seed step`, every line that is not blank, not only a comment and not marked `// not counted`.
#   SOURCE (the example), EXPECT (the count its comment and the docs claim).
file(STRINGS "${SOURCE}" lines)
set(inside FALSE)
set(count 0)
foreach(line IN LISTS lines)
  string(STRIP "${line}" text)
  if(text MATCHES "^// seed step")
    set(inside TRUE)
  elseif(inside AND (text STREQUAL "" OR text MATCHES "^// end of the seed step"))
    set(inside FALSE)
  elseif(inside AND NOT text MATCHES "^//" AND NOT text MATCHES "// not counted$")
    math(EXPR count "${count} + 1")
    message("${count}: ${text}")
  endif()
endforeach()
if(NOT count EQUAL EXPECT)
  message(FATAL_ERROR "${SOURCE}: ${count} counted lines; its comment and docs/simulator.md say ${EXPECT}")
endif()
