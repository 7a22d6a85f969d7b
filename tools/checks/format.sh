#!/usr/bin/env bash
# Fails, naming each file, when a tracked C++ source differs from .clang-format.
#   tools/checks/format.sh [repo-root]        check
#   tools/checks/format.sh [repo-root] --fix  rewrite the files in place
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root"
fix=0
[ "${2:-}" = "--fix" ] && fix=1
if ! command -v clang-format >/dev/null; then
  echo "format: clang-format is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
if git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h')
else
  mapfile -t files < <(find src tests bench fuzz tools -name '*.cc' -o -name '*.h')
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --style=file "$f" | cmp -s - "$f"; then
    if [ $fix -eq 1 ]; then clang-format --style=file -i "$f"; else bad+=("$f"); fi
  fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "format: run tools/checks/format.sh . --fix (or git clang-format)" >&2
  exit 1
fi
echo "format: ${#files[@]} files follow .clang-format"
