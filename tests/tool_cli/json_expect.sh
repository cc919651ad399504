#!/bin/sh
# Runs the tool and checks that it exits with <code> and that its stdout is ONE JSON document for which the Python
# expression <check> (on the parsed document `d`) is true; "@DIR@" in the arguments becomes a fresh folder:
#   json_expect.sh <code> <check> <command...>
expected="$1"; check="$2"; shift 2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
n=$#
while [ "$n" -gt 0 ]; do  # replace @DIR@ in every argument, keeping their order
  arg="$1"; shift
  case "$arg" in *@DIR@*) arg="$(printf '%s' "$arg" | sed "s|@DIR@|$dir|g")" ;; esac
  set -- "$@" "$arg"
  n=$((n - 1))
done
"$@" >"$dir/stdout" 2>"$dir/stderr"; rc=$?
echo "--- stdout"; cat "$dir/stdout"; echo "--- stderr"; cat "$dir/stderr"; echo "--- exit code $rc"
status=0
if [ "$rc" -ne "$expected" ]; then echo "json_expect: exit code $rc, expected $expected"; status=1; fi
python3 - "$dir/stdout" "$check" <<'PY' || status=1
import json, sys
text = open(sys.argv[1]).read()
try:
    d = json.loads(text)  # the whole of stdout: one document, nothing before or after it
except ValueError as e:
    sys.exit("json_expect: stdout is not one JSON document: %s" % e)
if not eval(sys.argv[2], {"d": d}):
    sys.exit("json_expect: the check is false: " + sys.argv[2])
PY
exit $status
