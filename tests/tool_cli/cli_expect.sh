#!/bin/sh
# Runs the tool and checks its exit code and ONE output stream, the other stream having to stay empty:
#   cli_expect.sh <code> <stdout|stderr> <regex the stream must match> <regex it must not match, or ''> <command...>
# Regexes are extended (grep -E), matched line by line.
expected="$1"; stream="$2"; pattern="$3"; forbidden="$4"; shift 4
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$@" >"$dir/out" 2>"$dir/err"; rc=$?
echo "--- stdout"; cat "$dir/out"; echo "--- stderr"; cat "$dir/err"; echo "--- exit code $rc"
if [ "$stream" = stdout ]; then checked="$dir/out"; other="$dir/err"; else checked="$dir/err"; other="$dir/out"; fi
status=0
if [ "$rc" -ne "$expected" ]; then echo "cli_expect: exit code $rc, expected $expected"; status=1; fi
if ! grep -Eq -- "$pattern" "$checked"; then echo "cli_expect: $stream does not match /$pattern/"; status=1; fi
if [ -n "$forbidden" ] && grep -Eq -- "$forbidden" "$checked"; then
  echo "cli_expect: $stream matches /$forbidden/, which it must not"; status=1
fi
if [ -s "$other" ]; then echo "cli_expect: expected nothing on the other stream than $stream"; status=1; fi
exit $status
