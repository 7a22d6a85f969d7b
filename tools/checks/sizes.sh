#!/usr/bin/env bash
# The control plane stays in parts of a size one can read (issue 32's acceptance). Fails, naming
# each offender and its count, when
#   - a source file under src/ (C++, JavaScript, CSS, HTML) is over MAX_LINES lines, or
#   - a class or struct of the control plane (namespace tessera::api, in src/api's headers and in
#     its sources that define one) declares over MAX_METHODS member functions or MAX_FIELDS
#     non-static data members. The counts are clang's, from its AST (tools/checks/class_sizes.py
#     says what counts); a file clang cannot parse fails the check too.
# Prints the largest files and classes either way.
#
#   tools/checks/sizes.sh [repo-root]
#   MAX_LINES=700 MAX_METHODS=40 MAX_FIELDS=25 (the defaults; the environment may set others),
#   TOP=3 (how many of the largest it prints)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
here=$(cd "$(dirname "$0")" && pwd)
max_lines=${MAX_LINES:-700}
max_methods=${MAX_METHODS:-40}
max_fields=${MAX_FIELDS:-25}
min_classes=${MIN_CLASSES:-10}  # fewer found means the dump read nothing (its own test sets 1)
cd "$root"
if ! command -v clang++ >/dev/null; then
  echo "sizes: clang++ is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
fail=0

# 1. Files.
mapfile -t files < <(find src -type f \( -name '*.cc' -o -name '*.h' -o -name '*.js' -o \
  -name '*.css' -o -name '*.html' \) | sort)
# One wc for them all: a line "N path" a file, and a total where there are several (every path
# starts with src/; none has a space).
longest=$(wc -l "${files[@]}" | awk '$2 != "total" { print $1, $2 }')
while read -r n f; do
  if [ "$n" -gt "$max_lines" ]; then
    echo "sizes: $f has $n lines, over $max_lines" >&2
    fail=1
  fi
done <<<"$longest"
echo "sizes: ${#files[@]} source files under src/, the longest:"
top() { sed -n "1,${TOP:-3}s/^/  /p"; }  # the first TOP lines, indented (no SIGPIPE under pipefail)
sort -rn <<<"$longest" | top

# 2. The control plane's classes: every header in one translation unit, then each source that
# may define a class of its own: `class` or `struct` followed, on any number of lines, by a brace
# before any `;` (a template, an attribute, a name on a line of its own; also `enum class` and
# `struct stat st {}`, parsed for nothing).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for h in src/api/*.h; do echo "#include \"${h#src/}\""; done >"$tmp/headers.cc"
units=("$tmp/headers.cc")
while IFS= read -r f; do units+=("$f"); done < <(grep -lzP '\b(class|struct)\s+[^;{}()"]*\{' \
  src/api/*.cc || true)
i=0
for u in "${units[@]}"; do
  i=$((i + 1))
  printf '%s\0%s\0' "$u" "$tmp/ast.$i.json"
done | xargs -0 -n 2 -P "$(nproc)" sh -c \
  'clang++ -std=c++20 -I src -fsyntax-only -Xclang -ast-dump=json \
     -Xclang -ast-dump-filter=tessera::api "$0" >"$1" 2>"$1.err" || { echo "$0" >"$1.failed"; }'
for failed in "$tmp"/*.failed; do
  [ -e "$failed" ] || continue
  unit=$(cat "$failed")
  [ "$unit" = "$tmp/headers.cc" ] && unit="src/api's headers (one translation unit of them all)"
  echo "sizes: clang could not parse $unit:" >&2
  head -20 "${failed%.failed}.err" >&2
  fail=1
done
python3 "$here/class_sizes.py" "$tmp"/ast.*.json >"$tmp/classes"
classes=$(wc -l <"$tmp/classes")
if [ "$classes" -lt "$min_classes" ]; then
  echo "sizes: only $classes classes found in src/api: the AST dump read nothing" >&2
  fail=1
fi
while read -r methods fields name where; do
  if [ "$methods" -gt "$max_methods" ]; then
    echo "sizes: $name ($where) has $methods methods, over $max_methods" >&2
    fail=1
  fi
  if [ "$fields" -gt "$max_fields" ]; then
    echo "sizes: $name ($where) has $fields fields, over $max_fields" >&2
    fail=1
  fi
done <"$tmp/classes"
echo "sizes: $classes classes and structs in src/api, the most methods (methods fields name file):"
sort -rn "$tmp/classes" | top
echo "sizes: the most fields:"
sort -k2,2rn "$tmp/classes" | top
if [ $fail -ne 0 ]; then
  echo "sizes: limits are $max_lines lines a file, $max_methods methods and $max_fields fields a" \
    "class: split the part (docs/threading.md, \"The engine's parts\")" >&2
  exit 1
fi
echo "sizes: ok (at most $max_lines lines a file, $max_methods methods and $max_fields fields a class)"
