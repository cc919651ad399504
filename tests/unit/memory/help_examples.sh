#!/bin/sh
# Runs the examples printed by `safeamp plan --help` as they are printed, so the help cannot drift from what works:
#   help_examples.sh <tool>                    every example must exit 0 or 1 (2 is bad input, above 2 a failure)
#   help_examples.sh <tool> <word> <regex>     the example containing <word> must also print a line matching <regex>
tool="$1"; word="$2"; pattern="$3"
list=$(mktemp) || exit 1
trap 'rm -f "$list"' EXIT
"$tool" plan --help | sed -n 's/^ *safeamp plan //p' > "$list"
if [ ! -s "$list" ]; then echo "help_examples: no 'safeamp plan ...' example in the help"; exit 1; fi
found=0
while IFS= read -r args; do
  if [ -n "$word" ]; then
    case " $args " in *" $word "*) ;; *) continue ;; esac
  fi
  found=1
  # The arguments are split at blanks, as a shell would split the line a user copies.
  # shellcheck disable=SC2086
  out=$("$tool" plan $args 2>&1); rc=$?
  echo "safeamp plan $args -> exit $rc"
  if [ "$rc" -gt 1 ]; then printf '%s\n' "$out"; echo "help_examples: exit $rc"; exit 1; fi
  if [ -n "$pattern" ] && ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
    printf '%s\n' "$out"; echo "help_examples: output does not match /$pattern/"; exit 1
  fi
done < "$list"
if [ "$found" -eq 0 ]; then echo "help_examples: no example contains '$word'"; exit 1; fi
exit 0
