#!/usr/bin/env bash
# SIGTERM and SIGINT while `safeamp sim` trains (docs/report.md, "Stopped by a signal"): the run in progress stops at
# the end of its step with that step's checkpoint, the tool says where it stopped and exits 128 + the signal, the
# folder marked; --resume then finishes with every run's weights hash as uninterrupted. The signal is sent while the
# tool is held at a chosen point by the test hook SAFEAMP_TEST_PAUSE_AT (sim/kill_point.hpp), so each case is
# deterministic:
#  - SIGTERM after the first checkpoint of a candidate (step 4 of 40): stopped there, exit 143;
#  - SIGTERM after the reference was written: stopped before the first candidate trained a step;
#  - SIGINT (its default action restored for the tool: a script's background job ignores it) during the second
#    candidate, exit 130;
#  - SIGINT and SIGTERM together: the first stops, the second ends the process at once (no message, still resumable);
#  - SIGTERM ignored when the tool started (as under nohup): ignored, the invocation finishes.
# Usage: stop_signal.sh SAFEAMP DATA_DIR
set -euo pipefail
tool=$1 data=$2
scenario=$data/tiny_mlp.json
# shellcheck source=held_process.sh
source "$(dirname "$0")/held_process.sh"
hashes() { grep -o '"weights_hash": *"[0-9a-f]*"' "$1" | tr -d ' \n'; }

"$tool" sim --scenario "$scenario" --out "$work/clean" >"$work/clean.log" 2>&1 || fail "$(cat "$work/clean.log")"
clean_hashes=$(hashes "$work/clean/summary.json")

# held NAME POINT [ENV...]: starts the tool into $work/NAME held at POINT (env assignments or `env` options before
# it); sets pid.
held() {
  local name=$1 point=$2
  shift 2
  env "$@" SAFEAMP_TEST_PAUSE_AT="$point" "$tool" sim --scenario "$scenario" --out "$work/$name" \
    >"$work/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  stopped "$pid"
}

# resumed NAME: --resume finishes $work/NAME with the uninterrupted weights.
resumed() {
  local d=$work/$1
  [[ -e $d/INCOMPLETE ]] || fail "$1: the stopped invocation did not leave its folder marked"
  [[ -z "$(find "$d" -name '*.tmp-*')" ]] || fail "$1: temporaries left: $(find "$d" -name '*.tmp-*')"
  "$tool" sim --scenario "$scenario" --out "$d" --resume >"$work/$1.resume.log" 2>&1 ||
    fail "$1: --resume failed: $(cat "$work/$1.resume.log")"
  [[ ! -e $d/INCOMPLETE && "$(hashes "$d/summary.json")" == "$clean_hashes" ]] ||
    fail "$1: resumed weights $(hashes "$d/summary.json"), uninterrupted $clean_hashes"
}

# expect NAME RC TEXT: the held invocation, let go, exited RC and said TEXT and the folder's note.
expect() {
  [[ $rc == "$2" ]] || fail "$1: exited $rc, expected $2: $(cat "$work/$1.log")"
  grep -qF "$3" "$work/$1.log" || fail "$1: no '$3' in: $(cat "$work/$1.log")"
  grep -q "is marked INCOMPLETE .*rerun with --resume to continue" "$work/$1.log" ||
    fail "$1: the note on the marked folder is missing: $(cat "$work/$1.log")"
}

held term_mid 'wrote bf16-mixed.ckpt#1'
kill -TERM "$pid"
finish "$pid"
expect term_mid 143 "safeamp sim: stopped by SIGTERM after step 4 of 40 of run 'bf16-mixed'; its checkpoint"
grep -q "holds that step: rerun with --resume to continue from it" "$work/term_mid.log" || fail "term_mid: the advice"
[[ ! -e $work/term_mid/telemetry/bf16-mixed.jsonl ]] || fail "term_mid: the stopped run's telemetry was written"
resumed term_mid
grep -q -- "--resume: bf16-mixed continues from" "$work/term_mid.resume.log" || fail "term_mid: not resumed from it"
echo "ok: SIGTERM during a run: stopped after its step with its checkpoint, exit 143, resumed to the same weights"

held term_between 'wrote reference.json#1'
kill -TERM "$pid"
finish "$pid"
expect term_between 143 "safeamp sim: stopped by SIGTERM before run 'bf16-mixed' trained a step"
resumed term_between
echo "ok: SIGTERM between runs: stopped before the next one began, resumed to the same weights"

held int_mid 'wrote fp16-mixed-dynamic.ckpt#2' --default-signal=INT
kill -INT "$pid"
finish "$pid"
expect int_mid 130 "safeamp sim: stopped by SIGINT (Ctrl-C) after step 8 of 40 of run 'fp16-mixed dynamic'"
resumed int_mid
echo "ok: SIGINT during a run: stopped after its step, exit 130, resumed to the same weights"

held twice 'wrote bf16-mixed.ckpt#1' --default-signal=INT
kill -INT "$pid"
kill -TERM "$pid"
finish "$pid"
[[ $rc == 130 || $rc == 143 ]] || fail "twice: exited $rc: $(cat "$work/twice.log")"
! grep -q "stopped by" "$work/twice.log" || fail "twice: the second signal did not end it at once: $(cat "$work/twice.log")"
resumed twice
echo "ok: a second signal ends the process at once, and the folder still resumes"

# SIGTERM ignored from the start (a subshell's trap '' is inherited through exec, as nohup's SIG_IGN is).
(
  trap '' TERM
  exec env SAFEAMP_TEST_PAUSE_AT='wrote bf16-mixed.ckpt#1' "$tool" sim --scenario "$scenario" --out "$work/ignored" \
    >"$work/ignored.log" 2>&1
) &
pid=$!
pids+=("$pid")
stopped "$pid"
kill -TERM "$pid"
finish "$pid"
[[ $rc == 0 && ! -e $work/ignored/INCOMPLETE ]] || fail "ignored: exited $rc: $(cat "$work/ignored.log")"
[[ "$(hashes "$work/ignored/summary.json")" == "$clean_hashes" ]] || fail "ignored: other weights"
echo "ok: SIGTERM ignored when the tool started stays ignored"
echo PASS
