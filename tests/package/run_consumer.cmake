# cmake -P script: configure, build and run a consumer project. Fails (non-zero exit) at the first step that fails.
# Inputs: SOURCE_DIR, BINARY_DIR, CONFIGURE_ARGS ('|'-separated), PROGRAM. Only PROGRAM and what it links are
# built (not every target the consumer's tree defines), as a consumer's own build would.
string(REPLACE "|" ";" args "${CONFIGURE_ARGS}")
file(REMOVE_RECURSE ${BINARY_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} ${args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} -j2 --target ${PROGRAM} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${BINARY_DIR}/${PROGRAM} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer program failed (${rc})")
endif()
