#!/bin/sh
# Runs a command and passes only when it exits with the expected code AND its output (stdout + stderr) matches
# an extended regular expression: expect_exit.sh <code> <regex> <command...>
expected="$1"; pattern="$2"; shift 2
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$expected" ]; then echo "expect_exit: exit code $rc, expected $expected"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then echo "expect_exit: output does not match /$pattern/"; exit 1; fi
exit 0
