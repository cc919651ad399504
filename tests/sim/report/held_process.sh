# Helpers for tests that hold a `safeamp sim` at a point with SAFEAMP_TEST_PAUSE_AT (sim/kill_point.hpp), sourced by
# lock_race.sh and stop_signal.sh: a scratch folder $work, removed at exit with every process in pids[] killed, and
# fail MESSAGE.
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}


# stopped PID: waits (up to 60 s) until the process is stopped (state T), fails when it ended first.
stopped() {
  local i state
  for ((i = 0; i < 600; i++)); do
    [[ -r /proc/$1/stat ]] || fail "process $1 ended before it reached its pause point"
    state=$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f1)
    [[ $state == T ]] && return 0
    [[ $state == Z ]] && fail "process $1 ended before it reached its pause point"
    sleep 0.1
  done
  fail "process $1 did not reach its pause point in 60 s"
}

# finish PID: lets a held process go on and sets rc to its exit code (128 + N when a signal N ended it).
finish() {
  kill -CONT "$1"
  set +e
  wait "$1"
  rc=$?
  set -e
}
