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
#  - SIGTERM ignored when the tool started (as under nohup): ignored, the invocation finishes;
#  - SIGUSR1 (what a batch script asks for before its time limit) as SIGTERM, exit 138.
# With MPIRUN and a data-parallel SCENARIO, the same under `mpirun -np 2`, where SIGUSR1 is the signal (mpirun passes
# it on to every rank; SIGINT and SIGTERM to mpirun end the job): rank 0, the writer, is held after a checkpoint, and
# SIGUSR1 goes to rank 0 only, to rank 1 only (held in the step's collective, so it asks one step later), or to
# mpirun. Every time both ranks stop after the same step (rank 0 alone says which, once), mpirun exits 138, and
# --resume under mpirun finishes with the uninterrupted weights.
# Usage: stop_signal.sh SAFEAMP DATA_DIR [MPIRUN SCENARIO]. STOP_SIGNAL_MPIRUN=skip in the environment leaves out the
# mpirun cases (scripts/sanitize: about a minute of ASan time for seven data-parallel jobs; the Release run has them).
set -euo pipefail
tool=$1 data=$2 mpirun=${3:-} dp_scenario=${4:-}
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

held usr1_mid 'wrote bf16-mixed.ckpt#1'
kill -USR1 "$pid"
finish "$pid"
expect usr1_mid 138 "safeamp sim: stopped by SIGUSR1 after step 4 of 40 of run 'bf16-mixed'; its checkpoint"
resumed usr1_mid
echo "ok: SIGUSR1 during a run: stopped after its step with its checkpoint, exit 138, resumed to the same weights"

if [[ -z $mpirun ]]; then
  echo "PASS (one process; no MPIRUN given, so the mpirun cases did not run)"
  exit 0
fi
if [[ ${STOP_SIGNAL_MPIRUN:-} == skip ]]; then
  echo "PASS (one process; STOP_SIGNAL_MPIRUN=skip, so the mpirun cases did not run)"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# mpi NAME ARGS...: `safeamp sim` on the data-parallel scenario under mpirun -np 2 into $work/NAME (at most 120 s, so
# that ranks waiting for each other fail the test instead of hanging it). In a sanitizer build (scripts/sanitize)
# without LeakSanitizer: Open MPI's plugins leave allocations at exit that it reports from unloaded modules, which
# no suppression can name; the one-process cases above keep the leak check, and ASan's other checks stay on here.
mpi() {
  local name=$1
  shift
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 120 "$mpirun" --oversubscribe -np 2 "$tool" sim \
    --scenario "$dp_scenario" --out "$work/$name" "$@"
}
mpi dp_clean >"$work/dp_clean.log" 2>&1 || fail "dp_clean: $(cat "$work/dp_clean.log")"
dp_hashes=$(hashes "$work/dp_clean/summary.json")

# poll_pid WHAT FINDER ARGS...: what FINDER ARGS... prints (a pid), asked every 0.1 s for up to 60 s; fails naming WHAT.
poll_pid() {
  local what=$1 i p
  shift
  for ((i = 0; i < 600; i++)); do
    p=$("$@")
    [[ -z $p ]] || {
      echo "$p"
      return 0
    }
    sleep 0.1
  done
  fail "no $what in 60 s"
}
# mpirun_under JOB: the mpirun process under the background job JOB (a subshell, then timeout).
mpirun_under() {
  local p q
  for p in $(pgrep -P "$1"); do
    for q in "$p" $(pgrep -P "$p"); do
      [[ "$(cat "/proc/$q/comm" 2>/dev/null)" != mpirun ]] || echo "$q"
    done
  done | head -1
}
# rank_of MPIRUN_PID R: rank R among mpirun's children.
rank_of() {
  local p
  for p in $(pgrep -P "$1"); do
    ! tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" || echo "$p"
  done | head -1
}

# mpi_case NAME TARGET: the job held with rank 0 after the first checkpoint of bf16-mixed (step 3 of 30); SIGUSR1 to
# TARGET (rank0, rank1 or mpirun), then rank 0 let go; checks the stop and resumes.
mpi_case() {
  local name=$1 target=$2
  SAFEAMP_TEST_PAUSE_AT='wrote bf16-mixed.ckpt#1' mpi "$name" >"$work/$name.log" 2>&1 &
  local job=$!
  pids+=("$job")
  local launcher rank0 rank1
  launcher=$(poll_pid "mpirun under job $job" mpirun_under "$job")
  rank0=$(poll_pid "rank 0 under mpirun $launcher" rank_of "$launcher" 0)
  rank1=$(poll_pid "rank 1 under mpirun $launcher" rank_of "$launcher" 1)
  pids+=("$rank0" "$rank1")
  stopped "$rank0"
  case $target in
    rank0) kill -USR1 "$rank0" ;;
    rank1) kill -USR1 "$rank1" ;;
    mpirun) kill -USR1 "$launcher" ;;
  esac
  sleep 0.5 # the signal on its way (mpirun passes it on by itself)
  kill -CONT "$rank0"
  set +e
  wait "$job"
  rc=$?
  set -e
  [[ $rc == 138 ]] || fail "$name: mpirun exited $rc, expected 138: $(cat "$work/$name.log")"
  local said
  said=$(grep -c "safeamp sim: stopped by SIGUSR1 after step [0-9]* of 30 of run 'bf16-mixed'" "$work/$name.log" || true)
  [[ $said == 1 ]] || fail "$name: 'stopped by SIGUSR1' said $said times, expected once (rank 0): $(cat "$work/$name.log")"
  local step
  step=$(sed -n "s/.*stopped by SIGUSR1 after step \([0-9]*\) of 30.*/\1/p" "$work/$name.log")
  case $target in
    rank0) [[ $step == 3 ]] || fail "$name: stopped after step $step, expected 3" ;;
    *) ((step >= 3 && step < 30)) || fail "$name: stopped after step $step" ;;
  esac
  [[ -e $work/$name/INCOMPLETE && -f $work/$name/checkpoints/bf16-mixed.ckpt ]] ||
    fail "$name: no marker or no checkpoint: $(ls -R "$work/$name")"
  mpi "$name" --resume >"$work/$name.resume.log" 2>&1 || fail "$name: --resume failed: $(cat "$work/$name.resume.log")"
  said=$(grep -c -- "--resume: bf16-mixed continues from" "$work/$name.resume.log" || true)
  [[ $said == 1 ]] || fail "$name: '--resume: bf16-mixed continues from' said $said times, expected once (rank 0)"
  [[ ! -e $work/$name/INCOMPLETE && "$(hashes "$work/$name/summary.json")" == "$dp_hashes" ]] ||
    fail "$name: resumed weights $(hashes "$work/$name/summary.json"), uninterrupted $dp_hashes"
  echo "ok: mpirun -np 2, SIGUSR1 to $target: both ranks stopped after step $step, exit 138, resumed to the same weights"
}
mpi_case dp_rank0 rank0
mpi_case dp_rank1 rank1
mpi_case dp_mpirun mpirun
echo PASS
