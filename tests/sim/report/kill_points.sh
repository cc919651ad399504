#!/usr/bin/env bash
# Crash consistency of `safeamp sim`'s output folder (docs/report.md, "When an invocation fails"): the tool is ended
# by SIGKILL (the test hook SAFEAMP_TEST_KILL_AT, sim/kill_point.hpp) right after each change it makes to the folder
# (each atomic write, move, removal, link, the decisions' append and its first half; opening and locking the lock
# file), in three invocations of
# tiny_mlp.json: the first into a new folder (the reference is locked), a second into that finished folder (the
# reference reused, the first one's outputs moved into previous/) and a --relock one (the old reference kept beside
# the new). Every point an uninterrupted invocation reaches (SAFEAMP_TEST_KILL_TRACE=1 lists them) is one case. After
# the kill, the same command runs again, with --resume when the folder is marked INCOMPLETE (as the marker says), and
# the folder must then hold what an uninterrupted invocation leaves. The same again with a first kill at a few points
# chosen to leave work for the next start, whose recovery is then killed at each of its own points:
#  - exit code 0, no marker, no previous.new/, no checkpoints/, no temporary file;
#  - the weights hash of every run as uninterrupted (training is deterministic, resumed or not);
#  - decisions.jsonl: the earlier invocations' lines byte for byte, then one line per candidate of each invocation
#    that finished (the killed one's only when the kill came after it finished), every line whole;
#  - known_good.json: the uninterrupted invocation's candidate, naming the reference in reference/reference.json;
#  - previous/: the last finished invocation's report and summary byte for byte (none after a first invocation
#    that did not finish);
#  - the reference: reused, byte for byte; locked or relocked, the same loss curve as uninterrupted; relocked, the
#    old reference kept beside it byte for byte;
#  - telemetry/: one file per run, the same names as uninterrupted.
# Also: a data-parallel invocation killed between data_parallel.json and its record entry; and a kill after
# known_good.json was replaced whose rerun passes nothing (an edited candidate list): the old record put back.
# With "fail" as third argument, each case's invocation fails instead at each point (the hook SAFEAMP_TEST_FAIL_AT
# throws there, as the next change would on a full disk): it must exit 2 naming the point, leave no temporary file,
# say "rerun with --resume" exactly when it leaves the folder marked, and the rerun must leave the same as above (its
# handlers and destructors ran, where a kill runs none: a clean-up that removes too much is seen here). The first kill
# of the cases that have one stays a kill.
# With "disk-full", the first, second and --relock invocations run into a tmpfs of each size in 4 KiB steps (a
# real ENOSPC at each write in turn, no hook) until one finishes, each failed one checked as above (exit 2, the
# error saying "No space left on device"), then rerun with room. It needs a private mount namespace (unshare -m, as
# root, or unshare -r -m where user namespaces are allowed); without one it exits 77 (skipped).
# Usage: kill_points.sh SAFEAMP DATA_DIR [kill|fail|disk-full]. With KILL_POINTS_STRIDE=K in the environment, every
# K-th point (or size) of each case only, starting one further on in each next case, so that the cases together
# still reach every position (scripts/sanitize: the same paths at an eighth of the time under ASan).
set -euo pipefail
tool=$1 data=$2 mode=${3:-kill}
[[ $mode == kill || $mode == fail || $mode == disk-full ]] || {
  echo "FAIL: the mode is '$mode'; accepted: kill, fail or disk-full"
  exit 1
}
if [[ $mode == disk-full && ${SAFEAMP_KILL_POINTS_NAMESPACE:-} != 1 ]]; then
  # Into a mount namespace of its own, so that no mount outlives the test, however it ends.
  probe='d=$(mktemp -d) && mount -t tmpfs -o size=4k tmpfs "$d" && umount "$d"; r=$?; rmdir "$d"; exit $r'
  for how in "-m" "-r -m"; do
    # shellcheck disable=SC2086
    if unshare $how --propagation private sh -c "$probe" 2>/dev/null; then
      SAFEAMP_KILL_POINTS_NAMESPACE=1 exec unshare $how --propagation private bash "$0" "$@"
    fi
  done
  echo "SKIP: no private mount namespace with tmpfs here (unshare -m needs CAP_SYS_ADMIN, unshare -r -m user" \
    "namespaces)"
  exit 77
fi
stride=${KILL_POINTS_STRIDE:-1}
[[ $stride =~ ^[1-9][0-9]*$ ]] || {
  echo "FAIL: KILL_POINTS_STRIDE is '$stride'; accepted: a whole number from 1"
  exit 1
}
scenario=$data/tiny_mlp.json
work=$(mktemp -d)
trap 'umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
sha() { sha256sum "$1" | cut -d' ' -f1; }
# Each run's weights hash, in the summary's order (the reference's is not in it: it is read from its reference.json).
hashes() { grep -o '"weights_hash": *"[0-9a-f]*"' "$1" | tr -d ' \n'; }
# The id in reference/reference.json (16 hex digits).
reference_id() { grep -o '"reference_id": *"[0-9a-f]*"' "$1/reference/reference.json" | head -1 | grep -o '[0-9a-f]\{16\}'; }
# The reference's training: its loss curve (its id hashes its lock time too).
reference_curve() { tr -d ' \n' <"$1/reference/reference.json" | grep -o '"loss_curve":\[[^]]*\]'; }
telemetry_names() { find "$1/telemetry" -maxdepth 1 -type f -printf '%f\n' | sort | tr '\n' ' '; }

# run NAME ARGS...: the tool's sim command, its output in $work/NAME.log; sets rc.
run() {
  local name=$1
  shift
  set +e
  "$tool" sim "$@" >"$work/$name.log" 2>&1
  rc=$?
  set -e
}

# prepare DIR BASE: DIR as a copy of BASE ("" : no folder).
prepare() {
  rm -rf "$1"
  [[ -z $2 ]] || cp -a "$2" "$1"
}

# start DIR BASE LABEL [PREKILL]: DIR as a copy of BASE, then (with PREKILL) an invocation killed at PREKILL there;
# sets resume to (--resume) when DIR is then marked INCOMPLETE, as the marker says to rerun.
start() {
  prepare "$1" "$2"
  if [[ -n ${4:-} ]]; then
    SAFEAMP_TEST_KILL_AT=$4 run "$3.pre" "${args[@]}" --out "$1"
    [[ $rc == 137 ]] || fail "$3: the first kill at '$4' exited $rc: $(tail -3 "$work/$3.pre.log")"
  fi
  resume=()
  [[ ! -e $1/INCOMPLETE ]] || resume=(--resume)
}

# interrupt POINT NAME ARGS...: run NAME ARGS... killed (mode kill) or failed (mode fail) at POINT, as checked above.
interrupt() {
  local point=$1 name=$2
  shift 2
  if [[ $mode == kill ]]; then
    SAFEAMP_TEST_KILL_AT=$point run "$name" "$@"
    [[ $rc == 137 ]] || fail "$name: '$point': exited $rc, not killed: $(tail -3 "$work/$name.log")"
    return
  fi
  SAFEAMP_TEST_FAIL_AT=$point run "$name" "$@"
  check_failed "$point" "$name" "${*: -1}" "SAFEAMP_TEST_FAIL_AT is '$point': the test hook failed"
}

# check_failed POINT NAME OUT ERROR: the invocation NAME into OUT failed as it should: exit 2, ERROR in its message,
# no temporary left, the "rerun with --resume" note exactly when it left OUT marked.
check_failed() {
  local point=$1 name=$2 out=$3 error=$4
  [[ $rc == 2 ]] || fail "$name: '$point': exited $rc, not failed (2): $(tail -3 "$work/$name.log")"
  grep "safeamp: error: " "$work/$name.log" | grep -qF "$error" ||
    fail "$name: '$point': the error does not say '$error': $(cat "$work/$name.log")"
  [[ ! -e $out || -z "$(find "$out" -name '*.tmp-*')" ]] ||
    fail "$name: '$point': a failure left temporaries: $(find "$out" -name '*.tmp-*')"
  if [[ $point =~ ^(start|opened\ \.safeamp-lock|locked\ \.safeamp-lock)#1$ ]]; then
    # Before the invocation's first change to a folder (or creating only the lock file): nothing said of a marker.
    ! grep -q "is marked INCOMPLETE" "$work/$name.log" ||
      fail "$name: '$point': a failure before any change spoke of the marker: $(cat "$work/$name.log")"
  elif [[ -e $out/INCOMPLETE ]]; then
    grep -q "is marked INCOMPLETE .*rerun with --resume to continue" "$work/$name.log" ||
      fail "$name: '$point': the folder is marked and the tool did not say so: $(cat "$work/$name.log")"
  else
    ! grep -q "is marked INCOMPLETE" "$work/$name.log" ||
      fail "$name: '$point': the tool says the folder is marked, it is not: $(cat "$work/$name.log")"
  fi
}

# check_case LABEL BASE [PREKILL [ONLY]]: one invocation of args[] into a copy of BASE, killed at each point of an
# uninterrupted one. With PREKILL: an invocation is killed at PREKILL first, and the one that recovers the folder
# (withdrawing, putting back, removing or moving on what the first left) is killed at each of its points.
case_number=0
check_case() {
  local label=$1 base=$2 prekill=${3:-} only=${4:-}
  case_number=$((case_number + 1))
  local clean=$work/$label.clean
  start "$clean" "$base" "$label" "$prekill"
  SAFEAMP_TEST_KILL_TRACE=1 run "$label.trace" "${args[@]}" "${resume[@]}" --out "$clean"
  [[ $rc == 0 ]] || fail "$label: the uninterrupted invocation exited $rc: $(cat "$work/$label.trace.log")"
  mapfile -t points < <(sed -n 's/^safeamp: kill point //p' "$work/$label.trace.log")
  ((${#points[@]} > 10)) || fail "$label: only ${#points[@]} kill points reached"
  local base_lines=0
  [[ -z $base ]] || base_lines=$(wc -l <"$base/decisions.jsonl")
  local clean_lines new_lines
  clean_lines=$(wc -l <"$clean/decisions.jsonl")
  new_lines=$((clean_lines - base_lines))
  ((new_lines > 0)) || fail "$label: the uninterrupted invocation appended no decision"
  local clean_hashes clean_curve clean_telemetry
  clean_hashes=$(hashes "$clean/summary.json")
  clean_curve=$(reference_curve "$clean")
  [[ -n $clean_curve ]] || fail "$label: no loss curve in the reference"
  clean_telemetry=$(telemetry_names "$clean")
  local clean_good
  clean_good=$(grep '"candidate"' "$clean/known_good.json")
  [[ -n $clean_good ]] || fail "$label: the uninterrupted invocation recorded no known-good candidate"
  local d=$work/$label.k point finished extra lines cases=0 full=0
  if [[ $mode == disk-full ]]; then
    # Sizes of the file system, in pages: those the base does not fit in are no case; the last is the first size an
    # invocation finishes in.
    mapfile -t points < <(seq 4096 4096 $((4 << 20)))
    d=$work/mnt/out
    mkdir -p "$work/mnt"
  fi
  if [[ -n $only ]]; then
    local point_list=("${points[@]}")
    points=()
    for point in "${point_list[@]}"; do
      [[ ! $point =~ $only ]] || points+=("$point")
    done
    ((${#points[@]} > 0)) || fail "$label: no kill point matches '$only'"
  fi
  local index=-1
  for point in "${points[@]}"; do
    index=$((index + 1))
    # Every stride-th point, and the last one where none was taken before it (a case of fewer points than the stride).
    (((index + case_number) % stride == 0)) || ((cases == 0 && index == ${#points[@]} - 1)) || continue
    if [[ $mode == disk-full ]]; then
      ! mountpoint -q "$work/mnt" || umount "$work/mnt"
      mount -t tmpfs -o "size=$point" tmpfs "$work/mnt"
      [[ -z $base ]] || cp -a "$base" "$d" 2>/dev/null || continue
      resume=()
      run "$label.kill" "${args[@]}" --out "$d"
      if [[ $rc == 0 ]]; then
        full=1
      else
        check_failed "$point bytes" "$label.kill" "$d" "(write failed: No space left on device)"
      fi
      mount -t tmpfs -o remount,size=64m tmpfs "$work/mnt"
    else
      start "$d" "$base" "$label" "$prekill"
      interrupt "$point" "$label.kill" "${args[@]}" "${resume[@]}" --out "$d"
    fi
    # Finished before the kill: no marker and a summary.json that is not the base's.
    finished=0
    if [[ ! -e $d/INCOMPLETE && -f $d/summary.json ]] &&
      [[ -z $base || "$(sha "$d/summary.json")" != "$(sha "$base/summary.json")" ]]; then
      finished=1
      cp "$d/summary.json" "$work/killed_summary.json"
      cp "$d/report.html" "$work/killed_report.html"
    fi
    extra=()
    [[ -e $d/INCOMPLETE ]] && extra=(--resume)
    run "$label.rerun" "${args[@]}" "${extra[@]}" --out "$d"
    [[ $rc == 0 ]] || fail "$label: '$point': the rerun ${extra[*]} exited $rc: $(cat "$work/$label.rerun.log")"
    [[ ! -e $d/INCOMPLETE && ! -e $d/previous.new && ! -e $d/checkpoints ]] ||
      fail "$label: '$point': the rerun left a marker, previous.new/ or checkpoints/"
    [[ -z "$(find "$d" -name '*.tmp-*')" ]] || fail "$label: '$point': temporaries left: $(find "$d" -name '*.tmp-*')"
    [[ "$(hashes "$d/summary.json")" == "$clean_hashes" ]] ||
      fail "$label: '$point': weights hashes $(hashes "$d/summary.json"), uninterrupted $clean_hashes"
    # decisions.jsonl: the base's bytes first, then whole lines only, one per candidate of each finished invocation.
    if [[ -n $base ]]; then
      cmp -s -n "$(stat -c %s "$base/decisions.jsonl")" "$base/decisions.jsonl" "$d/decisions.jsonl" ||
        fail "$label: '$point': decisions.jsonl does not begin with the earlier invocations' lines"
    fi
    lines=$(wc -l <"$d/decisions.jsonl")
    ((lines == base_lines + new_lines * (1 + finished))) ||
      fail "$label: '$point': decisions.jsonl has $lines lines, expected $((base_lines + new_lines * (1 + finished)))"
    ! grep -q -v '^{.*}$' "$d/decisions.jsonl" || fail "$label: '$point': decisions.jsonl holds a torn line"
    [[ "$(grep '"candidate"' "$d/known_good.json")" == "$clean_good" ]] ||
      fail "$label: '$point': known_good.json: $(cat "$d/known_good.json"), uninterrupted $clean_good"
    grep -q "\"reference_id\": \"$(reference_id "$d")\"" "$d/known_good.json" ||
      fail "$label: '$point': known_good.json names another reference than $(reference_id "$d")"
    [[ "$(reference_curve "$d")" == "$clean_curve" ]] || fail "$label: '$point': the reference trained otherwise"
    [[ "$(telemetry_names "$d")" == "$clean_telemetry" ]] ||
      fail "$label: '$point': telemetry/ holds $(telemetry_names "$d"), uninterrupted $clean_telemetry"
    # previous/: the last finished invocation's outputs.
    if ((finished)); then
      [[ "$(sha "$d/previous/summary.json")" == "$(sha "$work/killed_summary.json")" &&
        "$(sha "$d/previous/report.html")" == "$(sha "$work/killed_report.html")" ]] ||
        fail "$label: '$point': previous/ does not hold the invocation that finished before the kill"
    elif [[ -n $base ]]; then
      [[ "$(sha "$d/previous/summary.json")" == "$(sha "$base/summary.json")" &&
        "$(sha "$d/previous/report.html")" == "$(sha "$base/report.html")" ]] ||
        fail "$label: '$point': previous/ does not hold the last finished invocation's outputs"
    else
      [[ ! -e $d/previous ]] || fail "$label: '$point': previous/ holds an unfinished invocation's outputs"
    fi
    case $label in
      second*)
        [[ "$(sha "$d/reference/reference.json")" == "$(sha "$base/reference/reference.json")" ]] ||
          fail "$label: '$point': the reused reference changed"
        ;;
      relock*)
        # Kept by the killed invocation, or by the rerun (which keeps what the killed one locked, too).
        local kept found=0
        for kept in "$d"/reference/reference-*.json; do
          [[ -f $kept && "$(sha "$kept")" == "$(sha "$base/reference/reference.json")" ]] && found=1
        done
        ((found)) || fail "$label: '$point': the old reference is not kept beside the new one"
        ;;
    esac
    cases=$((cases + 1))
    ((!full)) || break
  done
  if [[ $mode == disk-full ]]; then
    ((full && cases * stride > 5)) || fail "$label: $cases failures on a full disk, then finished: $full"
    echo "ok: $label: out of space in $((cases - 1)) file system sizes up to $point bytes, each rerun with room leaves" \
      "what an uninterrupted invocation does"
    return
  fi
  echo "ok: $label: ${mode}ed at $cases of ${#points[@]} points, each rerun leaves what an uninterrupted invocation does"
}

args=(--scenario "$scenario")
check_case first ""
first=$work/first.clean
check_case second "$first"
if [[ $mode == disk-full ]]; then
  args=(--scenario "$scenario" --relock)
  check_case relock "$first"
  echo PASS
  exit 0
fi
# Killed twice: after the marker, before the outputs moved; while they moved; after the decisions were appended and
# known_good.json replaced (the recovery withdraws the lines, puts the record back and removes the partial outputs).
check_case second_after_marker "$first" 'wrote INCOMPLETE#1'
check_case second_while_moving "$first" 'moved summary.json#1'
check_case second_after_known_good "$first" 'wrote known_good.json#1'
args=(--scenario "$scenario" --relock)
check_case relock "$first"
check_case relock_after_reference "$first" 'wrote reference.json#1'

# Data parallel (tiny_dp.json, 3 s an invocation): killed between data_parallel.json and its entry in the record; the
# rerun finds it by its content as an unfinished invocation's output.
args=(--scenario "$data/tiny_dp.json")
check_case dp_first "" "" '^wrote data_parallel\.json#1$'
args=(--scenario "$scenario")

# Killed after known_good.json was replaced (and after summary.json was written), then rerun with an edited candidate
# list that passes nothing (the same reference): the finished invocation's known_good.json is put back byte for byte,
# and decisions.jsonl holds the finished invocation's lines and the rerun's.
no_pass=$work/no_pass.json
sed -e '/^    {"name": /d' -e 's|"candidates": \[|"candidates": [{"name": "e5m2 compute", "expect": "any", "policy": "params=fp16,compute=e5m2,output=e5m2,gradient=fp16"}|' \
  "$scenario" >"$no_pass"
[[ $(grep -c '"name": ' "$no_pass") == 2 ]] || fail "could not make the one-candidate scenario: $(cat "$no_pass")"
for point in 'wrote known_good.json#1' 'wrote summary.json#1'; do
  d=$work/no_pass.k
  prepare "$d" "$first"
  interrupt "$point" no_pass.kill --scenario "$scenario" --out "$d"
  [[ -e $d/INCOMPLETE ]] || fail "no_pass: '$point': no marker"
  ! cmp -s "$d/known_good.json" "$first/known_good.json" || fail "no_pass: '$point': known_good.json not replaced"
  run no_pass.rerun --scenario "$no_pass" --resume --out "$d"
  [[ $rc == 0 ]] || fail "no_pass: '$point': the rerun exited $rc: $(cat "$work/no_pass.rerun.log")"
  grep -q "put .*known_good.json back" "$work/no_pass.rerun.log" ||
    fail "no_pass: '$point': the rerun did not say it put known_good.json back: $(cat "$work/no_pass.rerun.log")"
  grep -q '"verdict": "PASS"' "$d/summary.json" && fail "no_pass: '$point': the rerun passed a candidate"
  cmp -s "$d/known_good.json" "$first/known_good.json" || fail "no_pass: '$point': known_good.json is not put back"
  lines=$(wc -l <"$d/decisions.jsonl")
  ((lines == $(wc -l <"$first/decisions.jsonl") + 1)) || fail "no_pass: '$point': decisions.jsonl has $lines lines"
done
echo "ok: ${mode}ed after known_good.json was replaced, a rerun that passes nothing puts it back"

# A malformed setting of the hook is refused before anything is written.
for variable in SAFEAMP_TEST_KILL_AT SAFEAMP_TEST_FAIL_AT SAFEAMP_TEST_PAUSE_AT; do
  env "$variable=wrote summary.json#0" "$tool" sim --scenario "$scenario" --out "$work/malformed" \
    >"$work/malformed.log" 2>&1 && rc=0 || rc=$?
  [[ $rc == 2 && ! -e $work/malformed ]] || fail "a malformed $variable exited $rc or wrote"
  grep -q "$variable is 'wrote summary.json#0'; accepted: NAME or NAME#N" "$work/malformed.log" ||
    fail "the malformed hook's message: $(cat "$work/malformed.log")"
done
echo PASS
