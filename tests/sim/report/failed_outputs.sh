#!/usr/bin/env bash
# `safeamp sim` invocations that fail partway leave a marked folder, never a report, summary or telemetry that
# could be taken for their own (sim/report_invocation.hpp; docs/report.md, "When an invocation fails"):
#  1. an exception after the reference: a candidate's telemetry cannot be written (over a file-size limit, ulimit
#     -f 22 KiB, without checkpoints: the telemetry is about 25 KB; a directory at its path, as this case made it
#     until 2026-12-06, is now refused before anything trains);
#  2. a crash (the data-parallel test hook: the rank ends with _Exit, no clean-up) in a candidate, one process;
#     with MPIRUN given, also rank 1 of 2 under mpirun (mpirun then kills rank 0, the writer);
#  3. --resume with a bad checkpoint of the last run (garbage, then a valid checkpoint of another run): refused
#     with exit code 2 before the first run trains, so nothing is written at all.
# After 1 and 2: the INCOMPLETE marker, the finished invocation's report, summary (and data_parallel.json) in
# previous/ byte for byte, in telemetry/ only the locked reference's, the reference unchanged; then --resume
# finishes the folder and removes the marker. Usage: failed_outputs.sh SAFEAMP DATA_DIR [MPIRUN]
set -euo pipefail
tool=$1 data=$2 mpirun=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail() {
  echo "FAIL: $*"
  exit 1
}
sha() { sha256sum "$1" | cut -d' ' -f1; }
ref_telemetry=reference-fp32.jsonl # file_slug("reference fp32")

# run NAME ARGS...: runs the tool (or "$mpirun -np 2" when NAME starts with mpi), its output in $work/NAME.log;
# sets rc. With $file_limit_kib set, files are limited to that size (ulimit -f; the tool ignores SIGXFSZ).
run() {
  local name=$1
  shift
  local launcher=()
  [[ $name == mpi* ]] && launcher=("$mpirun" --oversubscribe -np 2)
  set +e
  (
    [[ -z ${file_limit_kib:-} ]] || ulimit -f "$file_limit_kib"
    exec "${launcher[@]}" "$tool" sim "$@"
  ) >"$work/$name.log" 2>&1
  rc=$?
  set -e
}

# check_marked OUT BEFORE: OUT after a failed invocation, BEFORE a copy of it when its last invocation finished.
check_marked() {
  local out=$1 before=$2
  [[ -f $out/INCOMPLETE ]] || fail "$out: no INCOMPLETE marker after a failed invocation"
  grep -q -- "--resume" "$out/INCOMPLETE" || fail "the marker does not say how to continue"
  for f in report.html summary.json data_parallel.json; do
    [[ ! -e $out/$f ]] || fail "$out/$f was left at the top of a failed invocation's folder"
    if [[ -e $before/$f ]]; then
      [[ -f $out/previous/$f && "$(sha "$out/previous/$f")" == "$(sha "$before/$f")" ]] ||
        fail "$out/previous/$f is not the finished invocation's $f"
    fi
  done
  [[ -f $out/previous/report.html ]] || fail "no previous/report.html"
  local left
  left=$(find "$out/telemetry" -maxdepth 1 -type f -name '*.jsonl' -printf '%f ')
  [[ "$left" == "$ref_telemetry " ]] || fail "telemetry/ holds '$left', expected only the locked reference's"
  for f in "$before"/telemetry/*.jsonl; do
    local name
    name=$(basename "$f")
    [[ $name == "$ref_telemetry" || ! -e $out/previous/telemetry/$name ]] && continue
    [[ "$(sha "$out/previous/telemetry/$name")" == "$(sha "$f")" ]] || fail "previous/telemetry/$name differs"
  done
  [[ "$(sha "$out/reference/reference.json")" == "$(sha "$before/reference/reference.json")" ]] ||
    fail "the failed invocation changed the reference"
}

# check_finished OUT: a finished folder has its report and summary and no marker.
check_finished() {
  local out=$1
  [[ ! -e $out/INCOMPLETE ]] || fail "$out: the marker is left after a finished invocation"
  [[ -f $out/report.html && -f $out/summary.json ]] || fail "$out: a finished invocation without its report"
}

# 1. An exception after the reference was reused: the first candidate's telemetry is over the file-size limit.
out=$work/exception
run first --scenario "$data/tiny_mlp.json" --out "$out"
[[ $rc == 0 ]] || fail "the first tiny_mlp run exited $rc: $(cat "$work/first.log")"
check_finished "$out"
cp -r "$out" "$work/exception.before"
file_limit_kib=22 run exception --scenario "$data/tiny_mlp.json" --out "$out" --checkpoint-every 0
[[ $rc == 2 ]] || fail "an unwritable telemetry file exited $rc, expected 2: $(cat "$work/exception.log")"
grep -q "bf16-mixed.jsonl' (write failed: File too large)" "$work/exception.log" ||
  fail "the first candidate's telemetry write did not fail: $(cat "$work/exception.log")"
grep -q "stopped before finishing: .* is marked INCOMPLETE" "$work/exception.log" ||
  fail "stderr does not say the folder is incomplete: $(cat "$work/exception.log")"
grep -q "previous invocation's report, summary and telemetry" "$work/exception.log" ||
  fail "stderr does not say where the previous outputs went"
check_marked "$out" "$work/exception.before"
run exception_resume --scenario "$data/tiny_mlp.json" --out "$out" --resume
[[ $rc == 0 ]] || fail "--resume after the exception exited $rc: $(cat "$work/exception_resume.log")"
check_finished "$out"
# The folder was marked: what it held were partial outputs, so previous/ still holds the finished invocation's.
[[ "$(sha "$out/previous/report.html")" == "$(sha "$work/exception.before/report.html")" ]] ||
  fail "resuming an unfinished invocation replaced previous/"
echo "ok: an exception partway leaves a marked folder, --resume finishes it"

# 2. A crash in a candidate (the reference reused): one process, then mpirun -np 2 with rank 1 dying.
dies() { # dies RANK FILE: tiny_dp.json with the test hook ending RANK at step 3 (sed: no interpreter needed)
  sed 's/"reduction": "fp32"}/"reduction": "fp32", "exit_rank": '"$1"', "exit_step": 3}/' "$data/tiny_dp.json" >"$2"
  grep -q '"exit_rank": '"$1" "$2" || fail "could not add the exit hook to tiny_dp.json"
}
dies 0 "$work/dies0.json"
dies 1 "$work/dies1.json"
modes=(solo)
[[ -n $mpirun ]] && modes+=(mpi)
for mode in "${modes[@]}"; do
  out=$work/crash_$mode
  rank=0
  [[ $mode == mpi ]] && rank=1
  run "${mode}_first" --scenario "$data/tiny_dp.json" --out "$out"
  [[ $rc == 0 ]] || fail "$mode: the first tiny_dp run exited $rc: $(cat "$work/${mode}_first.log")"
  cp -r "$out" "$work/crash_$mode.before"
  run "${mode}_crash" --scenario "$work/dies$rank.json" --out "$out"
  [[ $rc != 0 && $rc != 1 ]] || fail "$mode: the job succeeded (exit $rc) although rank $rank died"
  grep -q "rank $rank ends abruptly at step 3" "$work/${mode}_crash.log" || fail "$mode: the dying rank did not run"
  check_marked "$out" "$work/crash_$mode.before"
  [[ -f $out/previous/data_parallel.json ]] || fail "$mode: data_parallel.json was not moved into previous/"
  compgen -G "$out/checkpoints/*.ckpt" >/dev/null || fail "$mode: the crash left no checkpoint for --resume"
  [[ $mode == solo ]] && cp "$(compgen -G "$out/checkpoints/*.ckpt" | head -1)" "$work/other_run.ckpt"
  run "${mode}_resume" --scenario "$data/tiny_dp.json" --out "$out" --resume
  [[ $rc == 0 ]] || fail "$mode: --resume after the crash exited $rc: $(cat "$work/${mode}_resume.log")"
  grep -q "continues from" "$work/${mode}_resume.log" || fail "$mode: --resume did not continue from a checkpoint"
  check_finished "$out"
  echo "ok: $mode: a rank that dies leaves a marked folder, --resume finishes it"
done

# 3. --resume with a bad checkpoint of the last candidate: refused before anything trains or is written.
for bad in garbage other_run; do
  out=$work/bad_$bad
  mkdir -p "$out/checkpoints"
  if [[ $bad == garbage ]]; then
    printf 'not a checkpoint' >"$out/checkpoints/fp16-mixed-dynamic.ckpt"
  else
    cp "$work/other_run.ckpt" "$out/checkpoints/fp16-mixed-dynamic.ckpt"
  fi
  run "bad_$bad" --scenario "$data/tiny_mlp.json" --out "$out" --resume
  [[ $rc == 2 ]] || fail "a $bad checkpoint exited $rc, expected 2: $(cat "$work/bad_$bad.log")"
  grep -q "checkpoint '.*fp16-mixed-dynamic.ckpt'" "$work/bad_$bad.log" || fail "the error does not name the file"
  if [[ $bad == other_run ]]; then
    grep -q "saved by a run with other settings" "$work/bad_$bad.log" || fail "the fingerprint was not checked"
  fi
  ! grep -q "ends abruptly\|continues from" "$work/bad_$bad.log" || fail "a run started before the refusal"
  [[ ! -e $out/reference/reference.json && ! -e $out/INCOMPLETE ]] || fail "a refused --resume trained or wrote"
  [[ -z "$(find "$out" -name '*.jsonl')" ]] || fail "a refused --resume wrote telemetry"
done
echo "ok: a bad checkpoint of the last run is refused before the first run trains"
echo PASS
