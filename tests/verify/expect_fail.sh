# Sourced by the checks' own tests (layering_test.sh, sizes_test.sh): expect_fail WHAT PATTERN
# runs the check `$script` on the tree `$tmp` and fails the test unless the check fails with a
# line matching PATTERN (an extended regular expression); on success it prints that line.
expect_fail() {
  local out rc=0 name
  name=$(basename "$script")
  out=$(bash "$script" "$tmp" 2>&1) || rc=$?
  if [ $rc -eq 0 ]; then
    echo "FAIL: $1: $name passed" >&2
    echo "$out" >&2
    exit 1
  fi
  if ! grep -qE -- "$2" <<<"$out"; then
    echo "FAIL: $1: $name failed without naming '$2':" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "ok: $1: $(grep -E -- "$2" <<<"$out" | head -1)"
}
