#!/usr/bin/env bash
# tools/checks/sizes.sh fails where it should, on a small tree of its own (parsed in a second):
# it passes a control plane within the limits and counts what it should (a deleted constructor
# and the compiler's implicit members do not count, a nested class is counted apart and named in
# its class where it is defined outside it), and it
# fails, naming the offender and its count, on a class with 41 methods, on a struct in a source
# file with 26 fields, on a class template of 41 methods in a source file whose name and brace
# stand on lines of their own, on a file of 701 lines, and on a header clang cannot parse.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
script="$root/tools/checks/sizes.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MIN_CLASSES=1 TOP=10

fresh() {
  rm -rf "$tmp/src"
  mkdir -p "$tmp/src/api" "$tmp/src/model"
  cat >"$tmp/src/api/small.h" <<'EOF'
#pragma once
namespace tessera::api {
class Small {
 public:
  Small() = default;
  Small(const Small&) = delete;
  int a() const { return a_; }
  void set(int v) { a_ = v; }
  struct Inner {
    int x = 0;
    int y = 0;
    int z = 0;
  };
  struct Later;  // defined in small.cc

 private:
  int a_ = 0;
  Inner inner_;
};
}  // namespace tessera::api
EOF
  cat >"$tmp/src/api/small.cc" <<'EOF'
#include "api/small.h"
namespace tessera::api {
namespace {
struct Local {
  int one = 1;
};
}  // namespace
int UseLocal() { return Local{}.one; }
struct Small::Later {
  int a = 0;
  int b = 0;
};
}  // namespace tessera::api
EOF
  printf 'int x;\n' >"$tmp/src/model/short.h"
}
run() { bash "$script" "$tmp" 2>&1; }
source "$(dirname "$0")/expect_fail.sh"  # expect_fail WHAT PATTERN

fresh
out=$(run) || { echo "FAIL: sizes.sh refuses the small tree:" >&2; echo "$out" >&2; exit 1; }
for want in '^  3 2 tessera::api::Small src/api/small.h$' \
  '^  0 3 tessera::api::Small::Inner ' '^  0 1 tessera::api::\(anonymous\)::Local ' \
  '^  0 2 tessera::api::Small::Later src/api/small.cc$'; do
  grep -qE -- "$want" <<<"$out" || {
    echo "FAIL: the small tree's counts: no line '$want' in:" >&2
    echo "$out" >&2
    exit 1
  }
done
echo "ok: the small tree passes, counted as it should be"

{
  echo '#pragma once'
  echo 'namespace tessera::api {'
  echo 'class Big {'
  echo ' public:'
  for i in $(seq 1 41); do echo "  int m$i() const { return $i; }"; done
  echo '};'
  echo '}  // namespace tessera::api'
} >"$tmp/src/api/big.h"
expect_fail "a class of 41 methods" \
  '^sizes: tessera::api::Big \(src/api/big.h\) has 41 methods, over 40$'

fresh
{
  echo '#include "api/small.h"'
  echo 'namespace tessera::api {'
  echo 'namespace {'
  echo 'struct Wide {'
  for i in $(seq 1 26); do echo "  int f$i = $i;"; done
  echo '};'
  echo '}  // namespace'
  echo 'int UseWide() { return Wide{}.f1; }'
  echo '}  // namespace tessera::api'
} >"$tmp/src/api/wide.cc"
expect_fail "a struct of 26 fields in a source file" \
  '^sizes: tessera::api::\(anonymous\)::Wide \(src/api/wide.cc\) has 26 fields, over 25$'

fresh
{  # a template whose name and brace stand on lines of their own, in a source file
  echo '#include "api/small.h"'
  echo 'namespace tessera::api {'
  echo 'template <typename T>'
  echo 'class [[nodiscard]]'
  echo '    Tall'
  echo '{'
  echo ' public:'
  for i in $(seq 1 41); do echo "  T m$i() const { return T{}; }"; done
  echo '};'
  echo 'int UseTall() { return Tall<int>{}.m1(); }'
  echo '}  // namespace tessera::api'
} >"$tmp/src/api/tall.cc"
expect_fail "a class template of 41 methods split over lines in a source file" \
  '^sizes: tessera::api::Tall \(src/api/tall.cc\) has 41 methods, over 40$'

fresh
for i in $(seq 1 701); do echo "int v$i;"; done >"$tmp/src/model/long.h"
expect_fail "a file of 701 lines" '^sizes: src/model/long.h has 701 lines, over 700$'

fresh
printf '#pragma once\nnamespace tessera::api {\nclass Broken {\n' >"$tmp/src/api/broken.h"
expect_fail "a header clang cannot parse" "^sizes: clang could not parse src/api's headers"
expect_fail "a header clang cannot parse, its error shown" 'src/api/broken.h:3:.*error'
