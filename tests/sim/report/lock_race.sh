#!/usr/bin/env bash
# The output folder's lock when another invocation removes the lock file under it (docs/report.md, "One invocation
# per folder"; output_folder_lock in sim/report_invocation.hpp). Two `safeamp sim` into the same empty folder, held
# at chosen points by the test hook SAFEAMP_TEST_PAUSE_AT (SIGSTOP there; sim/kill_point.hpp):
#  1. B creates and locks .safeamp-lock, and is held there, set to fail right after (SAFEAMP_TEST_FAIL_AT);
#  2. A opens that file (it exists: A takes the lock before its checks) and is held before it locks it;
#  3. B goes on, fails before any change, and as the invocation that created the lock file in a folder holding
#     nothing else, removes it and releases the lock (remove_if_alone): exit 2, the folder empty again;
#  4. A goes on and locks the file it opened, now removed: it must see that (still_at_path), open the path again
#     (its trace shows the second opening), create and lock a new .safeamp-lock, and finish: exit 0, the lock file
#     in the folder, a whole invocation's outputs. Without that check A would hold the lock of a file no other
#     invocation can see, and a third one would be let in beside it.
# Usage: lock_race.sh SAFEAMP DATA_DIR
set -euo pipefail
tool=$1 data=$2
scenario=$data/tiny_mlp.json
# shellcheck source=held_process.sh
source "$(dirname "$0")/held_process.sh"

d=$work/out
mkdir "$d"
lock=.safeamp-lock

SAFEAMP_TEST_PAUSE_AT="locked $lock#1" SAFEAMP_TEST_FAIL_AT="locked $lock#1" \
  "$tool" sim --scenario "$scenario" --out "$d" >"$work/b.log" 2>&1 &
b=$!
pids+=("$b")
stopped "$b"
[[ -f $d/$lock ]] || fail "B is held after locking, and $d/$lock is not there"

# A into the same folder, its points traced.
SAFEAMP_TEST_KILL_TRACE=1 SAFEAMP_TEST_PAUSE_AT="opened $lock#1" "$tool" sim --scenario "$scenario" --out "$d" \
  >"$work/a.log" 2>&1 &
a=$!
pids+=("$a")
stopped "$a"

finish "$b"
[[ $rc == 2 ]] || fail "B exited $rc, not 2: $(cat "$work/b.log")"
grep -qF "SAFEAMP_TEST_FAIL_AT is 'locked $lock#1'" "$work/b.log" || fail "B's error: $(cat "$work/b.log")"
[[ -z "$(ls -A "$d")" ]] || fail "B, refused in a folder it found empty, left: $(ls -A "$d")"

finish "$a"
[[ $rc == 0 ]] || fail "A exited $rc: $(cat "$work/a.log")"
grep -q "kill point opened $lock#2" "$work/a.log" || fail "A did not open the lock file again: $(cat "$work/a.log")"
[[ -f $d/$lock ]] || fail "A finished, and $d/$lock is not there: A held the lock of the removed file"
[[ -f $d/summary.json && -f $d/report.html && ! -e $d/INCOMPLETE ]] || fail "A did not leave a whole invocation"
echo "ok: A locked the file B removed, saw it gone, and locked a new one"

# The same into a new folder: B creates it, and once refused takes back the lock file and then the folder; A, held
# between opening the file and locking it, then finds no folder to lock: refused (exit 2) with an error that says
# so, nothing left behind, and a rerun creates the folder anew.
d=$work/new
SAFEAMP_TEST_PAUSE_AT="locked $lock#1" SAFEAMP_TEST_FAIL_AT="locked $lock#1" \
  "$tool" sim --scenario "$scenario" --out "$d" >"$work/b2.log" 2>&1 &
b=$!
pids+=("$b")
stopped "$b"
SAFEAMP_TEST_PAUSE_AT="opened $lock#1" "$tool" sim --scenario "$scenario" --out "$d" >"$work/a2.log" 2>&1 &
a=$!
pids+=("$a")
stopped "$a"
finish "$b"
[[ $rc == 2 && ! -e $d ]] || fail "B in a new folder exited $rc (not 2), or left it: $(cat "$work/b2.log")"
finish "$a"
[[ $rc == 2 && ! -e $d ]] || fail "A exited $rc (not 2), or left $d: $(cat "$work/a2.log")"
grep -qF "safeamp: error: --out is '$d' (removed while this invocation was taking its lock" "$work/a2.log" ||
  fail "A's error: $(cat "$work/a2.log")"
"$tool" sim --scenario "$scenario" --out "$d" >"$work/a3.log" 2>&1 || fail "the rerun failed: $(cat "$work/a3.log")"
echo "ok: a folder taken back while another invocation waited for its lock: refused, clearly, and rerun"
echo PASS
