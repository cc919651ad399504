#!/bin/sh
# Writes the N-th (1-based) ```cpp block of a Markdown file to a C++ source file, preceded by a #line directive so
# that a compile error points at the Markdown file and line: extract_sample.sh <markdown> <n> <output.cpp>
markdown="$1"; n="$2"; output="$3"
awk -v n="$n" -v md="$markdown" '
  /^```cpp[ \t]*$/ { k++; if (k == n) { printf "#line %d \"%s\"\n", NR + 1, md; inside = 1; found = 1; next } }
  /^```[ \t]*$/   { if (inside) { inside = 0; closed = 1 } }
  inside          { print }
  END {
    if (!found) { printf "extract_sample: %s has no ```cpp block number %d\n", md, n > "/dev/stderr"; exit 1 }
    if (!closed) { printf "extract_sample: ```cpp block %d of %s is not closed by ```\n", n, md > "/dev/stderr"; exit 1 }
  }' "$markdown" > "$output.tmp" || { rm -f "$output.tmp"; exit 1; }
mv "$output.tmp" "$output"
