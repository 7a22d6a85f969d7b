#!/usr/bin/env bash
# Today's generator and checker (src/sim/histories.*, src/verify/*, `tessera sim histories`)
# against the quota engine of 29e72e9, the release before issue 31 (bench/README.md, "Session of
# 2026-12-03 (third)"; docs/scheduling.md, "Generated histories").
#
#   tools/old-engine/run.sh [COUNT]     sweep seeds 1..COUNT (10000), then shrink the stated seeds
#
# It makes a private worktree of BASE (HEAD) under a temporary directory, puts src/sched and
# src/partition of OLD (29e72e9) in it, applies tools/old-engine/glue.patch (the least glue for
# today's src/sim and src/verify to compile against the old engine; it changes no decision),
# builds only `tessera` there (JOBS=1, nice), runs the sweep, then each seed of SEEDS with
# --shrink, prints the shrunk scenario's events and compares it with the copy kept in
# tests/sim/old-engine/. The worktree is removed at the end (KEEP=1 keeps it); the shrunk files
# stay in OUT (a new temporary directory unless set).
#
# Not a CTest test: it builds a second engine (about 8 minutes on one core with a cold ccache).
# The recorded results were taken with the generator and checker of 79d62ec; a later BASE may
# need the glue brought up to date (the old engine lacks whatever today's checker reads anew).
set -euo pipefail
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
OLD=${OLD:-29e72e9}
BASE=${BASE:-HEAD}
COUNT=${1:-10000}
SEEDS=${SEEDS:-"3 5 34 47 64 112"}
OUT=${OUT:-$(mktemp -d /tmp/old-engine-out.XXXXXX)}
TMP=$(mktemp -d /tmp/old-engine.XXXXXX)
WT=$TMP/old-engine
cleanup() {
  if [ -z "${KEEP:-}" ]; then
    git -C "$ROOT" worktree remove --force "$WT" 2>/dev/null || true
    rm -rf "$TMP"
  else
    echo "worktree kept: $WT"
  fi
}
trap cleanup EXIT

git -C "$ROOT" worktree add --detach "$WT" "$BASE" >/dev/null
cd "$WT"
git checkout "$OLD" -- src/sched src/partition
# Files BASE added there since (later splits of the engine) are not the old engine's: drop them.
git diff --name-only --diff-filter=A "$OLD" "$BASE" -- src/sched src/partition | xargs -r git rm -q --
git apply "$ROOT/tools/old-engine/glue.patch"
echo "== engine of $OLD (src/sched, src/partition) + glue, generator and checker of $(git rev-parse --short "$BASE")"
BUILD_DIR=build JOBS=${JOBS:-1} nice -n 5 bash scripts/build.sh --target tessera >"$TMP/build.log" 2>&1 ||
  { tail -40 "$TMP/build.log"; exit 1; }
T=$WT/build/src/cli/tessera

echo "== tessera sim histories --count $COUNT --seed 1"
nice -n 10 "$T" sim histories --count "$COUNT" --seed 1 || true  # exits 3 when a history fails

mkdir -p "$OUT"
for s in $SEEDS; do
  echo
  echo "== tessera sim histories --seed-only $s --shrink --out $OUT"
  nice -n 10 "$T" sim histories --seed-only "$s" --shrink --out "$OUT" | grep -v '^  \|^coverage' || true
  f=$(ls "$OUT"/seed-"$s"-*.yaml 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "seed $s: no violation"; continue; }
  echo "-- tessera sim scenario --events $(basename "$f")"
  nice -n 10 "$T" sim scenario --events "$f" |
    grep -v '^    [a-z0-9-]*: \|^  utilization\|^  devices\|^  groups\|^scenario \|^run ' || true
  kept=$(ls "$ROOT"/tests/sim/old-engine/seed-"$s"-*.yaml 2>/dev/null | head -1)
  if [ -n "$kept" ]; then
    if diff <(grep -v '^#' "$kept") <(grep -v '^#' "$f") >/dev/null; then
      echo "-- same as tests/sim/old-engine/$(basename "$kept")"
    else
      echo "-- DIFFERS from tests/sim/old-engine/$(basename "$kept")"
    fi
  fi
done
echo
echo "shrunk scenarios in $OUT"
