cmake_minimum_required(VERSION 3.20)
# A refused `safeamp sim` (exit 2 before anything trains) leaves the file system as it found it (docs/report.md,
# "What the output folder may hold"): no new --out folder, no .safeamp-lock, reference/, telemetry/ or checkpoints/
# in an existing one, no stale temporary swept (until 2026-12-06 a refusal after the folder checks left all of them,
# and a new folder). On the real tool, one case per CTest test:
#   cmake -DTOOL=<safeamp> -DDATA=<tests/sim/report/data> -DWORK=<scratch folder> -DCASE=<case> -P sim_refused.cmake
# Cases: bad_values_new_folder, bad_scenario_empty_folder, user_file, decisions_directory, reference_mismatch,
# known_good_tampered, bad_checkpoint_resume, file_size_limit. Each compares a listing of the folder (every entry,
# hidden ones included, with each file's SHA-256, and each folder's modification time) before and after.
if(NOT WORK OR NOT CASE)
  message(FATAL_ERROR "sim_refused: -DWORK=<a folder of this test's own> and -DCASE=<case> are required")
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(tiny "${DATA}/tiny_mlp.json")

function(fail why)
  message(FATAL_ERROR "sim_refused ${CASE}: ${why}")
endfunction()

# refused(<regex> <arguments...>): runs `safeamp sim <arguments>`, which must exit 2 with stderr matching <regex>.
function(refused regex)
  execute_process(COMMAND "${TOOL}" sim ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  message("--- sim ${ARGN}: exit code ${rc}\n${o}${e}")
  if(NOT rc EQUAL 2)
    fail("sim ${ARGN} exited ${rc}, expected 2")
  endif()
  if(NOT e MATCHES "${regex}")
    fail("sim ${ARGN}: stderr does not match '${regex}'")
  endif()
endfunction()

# listing(<folder> <var>): every entry under <folder>, hidden ones included: "<path>/" for a folder, "<path> <SHA-256>"
# for a file.
function(listing folder var)
  file(GLOB_RECURSE entries LIST_DIRECTORIES true RELATIVE "${folder}" "${folder}/*")
  list(SORT entries)
  set(l "")
  foreach(e IN LISTS entries)
    if(IS_DIRECTORY "${folder}/${e}")
      list(APPEND l "${e}/")
    else()
      file(SHA256 "${folder}/${e}" h)
      list(APPEND l "${e} ${h}")
    endif()
  endforeach()
  set(${var} "${l}" PARENT_SCOPE)
endfunction()

function(expect_same folder got want)
  if(NOT got STREQUAL want)
    fail("${folder} holds\n  ${got}\nexpected\n  ${want}")
  endif()
endfunction()

function(expect_listing folder want)
  listing("${folder}" got)
  expect_same("${folder}" "${got}" "${want}")
endfunction()

# snapshot(<folder> <var>): first gives every folder in <folder>, itself included, an old modification time (2017),
# then lists it with each folder's modification time: a folder whose entries were created or removed again (a
# probe file; until 2026-12-07 the refusal's writability check made one) shows, whatever the clock's resolution.
function(snapshot folder var)
  execute_process(COMMAND find "${folder}" -type d -exec touch -m -d @1500000000 {} + RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    fail("could not age the folders of ${folder}")
  endif()
  snapshot_now("${folder}" l)
  set(${var} "${l}" PARENT_SCOPE)
endfunction()

function(snapshot_now folder var)
  listing("${folder}" l)
  file(GLOB_RECURSE dirs LIST_DIRECTORIES true RELATIVE "${folder}" "${folder}/*")
  set(times "")
  foreach(d "" ${dirs})
    if(IS_DIRECTORY "${folder}/${d}")
      file(TIMESTAMP "${folder}/${d}" t "%s" UTC)
      list(APPEND times "${d}/ modified ${t}")
    endif()
  endforeach()
  list(SORT times)
  set(${var} "${l};${times}" PARENT_SCOPE)
endfunction()

function(expect_snapshot folder want)
  snapshot_now("${folder}" got)
  expect_same("${folder}" "${got}" "${want}")
endfunction()

function(expect_absent path)
  if(EXISTS "${path}" OR IS_SYMLINK "${path}")
    listing("${path}" got)
    fail("${path} exists (holding: ${got})")
  endif()
endfunction()

if(CASE STREQUAL "bad_values_new_folder")
  # A bad command-line value, with --out a folder that does not exist (nor its parent): none is created.
  set(out "${WORK}/absent/out")
  refused("--seed is 'x'" --scenario "${tiny}" --out "${out}" --seed x)
  refused("--checkpoint-every is '-3'" --scenario "${tiny}" --out "${out}" --checkpoint-every -3)
  refused("--dollars-per-hour is 'inf'" --scenario "${tiny}" --out "${out}" --dollars-per-hour inf)
  refused("--memory-budget" --scenario "${tiny}" --out "${out}" --memory-budget lots)
  refused("scenario memory.*--memory-budget" --scenario "${tiny}" --out "${out}" --memory-budget 1KB)
  expect_absent("${WORK}/absent")

elseif(CASE STREQUAL "bad_scenario_empty_folder")
  # A scenario that is refused (malformed, an unknown key, an impossible value), with --out an existing empty folder:
  # it stays empty.
  set(out "${WORK}/out")
  file(MAKE_DIRECTORY "${out}")
  foreach(scenario malformed.json unknown_key.json impossible_value.json bad_fault_target.json)
    refused("error: " --scenario "${DATA}/${scenario}" --out "${out}")
    expect_listing("${out}" "")
  endforeach()

elseif(CASE STREQUAL "user_file")
  # A folder refused for a user's file at an output's name keeps exactly what it held: the file, a note, a stale
  # temporary of an output (a swept litter only once an invocation is accepted) and a folder of its own.
  set(out "${WORK}/out")
  file(WRITE "${out}/summary.json" "{\"my\": \"own results\"}\n")
  file(WRITE "${out}/notes.txt" "a user's notes\n")
  file(WRITE "${out}/report.html.tmp-999999999-1" "a killed writer's temporary\n")
  file(MAKE_DIRECTORY "${out}/plots")
  snapshot("${out}" before)
  refused("--out is '[^\n]*', which holds '[^\n]*summary\\.json'[^\n]*accepted: an empty folder, or one safeamp sim wrote"
          --scenario "${tiny}" --out "${out}")
  expect_snapshot("${out}" "${before}")
  # Its telemetry/ only: the same (the user's file there is refused too).
  set(tel "${WORK}/telemetry_only")
  file(WRITE "${tel}/telemetry/experiment-42.jsonl" "{\"a\": 1}\n")
  snapshot("${tel}" before)
  refused("experiment-42\\.jsonl" --scenario "${tiny}" --out "${tel}" --resume)
  expect_snapshot("${tel}" "${before}")

elseif(CASE STREQUAL "decisions_directory")
  # decisions.jsonl that cannot be appended to (a directory) is refused, and nothing is added beside it.
  set(out "${WORK}/out")
  file(MAKE_DIRECTORY "${out}/decisions.jsonl")
  snapshot("${out}" before)
  refused("decisions\\.jsonl' \\(a directory\\)" --scenario "${tiny}" --out "${out}")
  expect_snapshot("${out}" "${before}")

elseif(CASE STREQUAL "reference_mismatch")
  # A folder holding a locked reference (copied from a finished invocation's folder) and a run with another seed:
  # refused, naming --relock; nothing is added (no lock file, no telemetry/ or checkpoints/).
  execute_process(COMMAND "${TOOL}" sim --scenario "${tiny}" --out "${WORK}/first" RESULT_VARIABLE rc
                  OUTPUT_QUIET ERROR_VARIABLE e)
  if(NOT rc EQUAL 0)
    fail("the first invocation exited ${rc}: ${e}")
  endif()
  set(out "${WORK}/out")
  file(COPY "${WORK}/first/reference" DESTINATION "${out}")
  snapshot("${out}" before)
  refused("training\\.seed: reference '3', now '5'.*--relock" --scenario "${tiny}" --out "${out}" --seed 5)
  expect_snapshot("${out}" "${before}")
  refused("training\\.seed: reference '3', now '5'.*--relock" --scenario "${tiny}" --out "${out}" --seed 5 --resume)
  expect_snapshot("${out}" "${before}")

elseif(CASE STREQUAL "known_good_tampered")
  # A known_good.json whose candidate holds an ESC (it would reach the terminal and report.html as "run instead"):
  # refused, naming the file and the field; nothing added. Until 2026-12-07 any strings were taken from it.
  set(out "${WORK}/out")
  file(WRITE "${out}/known_good.json" "{\"candidate\": \"x\\u001b[2J\", \"policy\": \"fp32\", \"scenario\": \"s\", \
\"reference_id\": \"0a30c632d0cfd3e8\", \"recorded_utc\": \"2025-01-31T12:00:00Z\"}\n")
  snapshot("${out}" before)
  refused("known-good record '[^\n]*known_good\\.json' candidate .*control characters" --scenario "${tiny}"
          --out "${out}")
  expect_snapshot("${out}" "${before}")

elseif(CASE STREQUAL "bad_checkpoint_resume")
  # --resume with a checkpoint that is not one (a folder holding only it): refused, nothing added.
  set(out "${WORK}/out")
  file(WRITE "${out}/checkpoints/reference-fp32.ckpt" "not a checkpoint\n")
  snapshot("${out}" before)
  refused("checkpoint '[^\n]*reference-fp32\\.ckpt'" --scenario "${tiny}" --out "${out}" --resume)
  expect_snapshot("${out}" "${before}")

elseif(CASE STREQUAL "file_size_limit")
  # Accepted, then failing before the folder changed (no file may grow past 0 bytes: the INCOMPLETE marker cannot be
  # written): the folders it created and its lock file go again, a new --out with its missing parent, and from an
  # existing empty --out.
  foreach(out "${WORK}/absent/out" "${WORK}/empty")
    if(out STREQUAL "${WORK}/empty")
      file(MAKE_DIRECTORY "${out}")
    endif()
    execute_process(COMMAND bash -c "ulimit -f 0 && exec \"$@\"" bash "${TOOL}" sim --scenario "${tiny}" --out "${out}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
    message("--- (ulimit -f 0) sim --out ${out}: exit code ${rc}\n${o}${e}")
    if(NOT rc EQUAL 2 OR NOT e MATCHES "INCOMPLETE' \\(write failed: File too large")
      fail("exit code ${rc}, expected 2 and the marker's failed write")
    endif()
  endforeach()
  expect_absent("${WORK}/absent")
  expect_listing("${WORK}/empty" "")

else()
  fail("unknown case")
endif()
file(REMOVE_RECURSE "${WORK}")
message("sim_refused ${CASE}: ok")
