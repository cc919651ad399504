cmake_minimum_required(VERSION 3.20)
# Fixtures that a program writes must be the committed ones, byte for byte (a change to the program or to the
# .npy writer that would change a scenario's data fails here instead of drifting silently).
#   PROGRAM (writes the fixtures with `PROGRAM [SET] --write-fixtures DIR`), SET (optional), OUT (a fresh folder),
#   REFERENCE (the committed folder), FILES (the file names, separated by |).
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND "${PROGRAM}" ${SET} --write-fixtures "${OUT}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --write-fixtures exited ${rc}: ${out}${err}")
endif()
string(REPLACE "|" ";" files "${FILES}")
file(GLOB written RELATIVE "${OUT}" "${OUT}/*")
list(SORT written)
set(expected ${files})
list(SORT expected)
if(NOT written STREQUAL expected)
  message(FATAL_ERROR "${PROGRAM} wrote '${written}', expected '${expected}'")
endif()
foreach(f IN LISTS files)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${OUT}/${f}" "${REFERENCE}/${f}" RESULT_VARIABLE same)
  if(NOT same EQUAL 0)
    file(SIZE "${OUT}/${f}" now)
    file(SIZE "${REFERENCE}/${f}" then)
    message(FATAL_ERROR "${f}: the program writes ${now} bytes that differ from the committed ${REFERENCE}/${f} "
                        "(${then} bytes); regenerate it with `${PROGRAM} ${SET} --write-fixtures ${REFERENCE}` if the "
                        "change is meant")
  endif()
  message("${f}: identical to ${REFERENCE}/${f}")
endforeach()
file(REMOVE_RECURSE "${OUT}")
