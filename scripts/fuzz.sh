#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/; clang, ASan + UBSan) into build-fuzz/ and runs each one on
# a scratch copy of its seed corpus (fuzz/corpus/<name>/; nothing is written into the checkout).
#
#   scripts/fuzz.sh [LENGTH] [TARGET...]
#
#   LENGTH   N or Ns: N seconds per target (-max_total_time=N; default 10)
#            Nruns:   N executions per target (-runs=N)
#   TARGET   e.g. slurm, config (the part of fuzz/<name>_fuzz.cc before _fuzz); default: all
#
# Prints, per target, the executions, executions per second, seconds and new coverage units, and
# exits non-zero if any target found a crash, a leak, undefined behaviour or a timeout. What a
# failing target found (the input, libFuzzer's log) is kept and its path printed; after a clean
# run the scratch directory is removed unless FUZZ_WORK named it.
#
# Environment: FUZZ_BUILD_DIR (build-fuzz), JOBS (build jobs; nproc), FUZZ_TIMEOUT (seconds one input
# may take; 30), FUZZ_WORK (where corpora copies, logs and findings go; a new temp dir),
# FUZZ_ARGS (more libFuzzer flags, e.g. -max_len=1024).
# The project's other build dependencies come from scripts/setup.sh; clang and libFuzzer
# (Debian's clang and libclang-rt-dev) are installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

LENGTH=${1:-10}
shift || true
case "$LENGTH" in
  *runs) LIMIT=(-runs="${LENGTH%runs}") ;;
  *s) LIMIT=(-max_total_time="${LENGTH%s}") ;;
  *) LIMIT=(-max_total_time="$LENGTH") ;;
esac
if ! [[ "${LIMIT[0]#*=}" =~ ^[0-9]+$ ]]; then
  echo "fuzz: LENGTH is N (seconds), Ns or Nruns, not '$LENGTH'" >&2
  exit 2
fi

# clang and its runtimes (libFuzzer, ASan, UBSan).
missing=()
for p in clang libclang-rt-dev; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "fuzz: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  LAUNCHER=()
  if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DTESSERA_FUZZ=ON -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF -DTESSERA_WERROR=OFF "${LAUNCHER[@]}"
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target fuzz

TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do
    n=${f#fuzz/}
    TARGETS+=("${n%_fuzz.cc}")
  done
fi

WORK=${FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz.XXXXXX")}
mkdir -p "$WORK"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# One field of libFuzzer's -print_final_stats=1 block.
final_stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -1; }

failed=0
summary=$(printf '%-16s %12s %9s %8s %9s  %s' target executions exec/s seconds new-units result)
for t in "${TARGETS[@]}"; do
  bin="$BUILD_DIR/fuzz/${t}_fuzz"
  if [ ! -x "$bin" ] || [ ! -d "fuzz/corpus/$t" ]; then
    echo "fuzz: no target '$t' (fuzz/${t}_fuzz.cc and fuzz/corpus/$t/)" >&2
    exit 2
  fi
  dir="$WORK/$t"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/findings"
  cp -r "fuzz/corpus/$t/." "$dir/corpus/"
  echo "fuzz: $t (${LIMIT[*]})"
  start=$(date +%s)
  rc=0
  "$bin" "$dir/corpus" "${LIMIT[@]}" -timeout="${FUZZ_TIMEOUT:-30}" -print_final_stats=1 \
    -artifact_prefix="$dir/findings/" ${FUZZ_ARGS:-} >"$dir/log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - start ))
  runs=$(final_stat number_of_executed_units "$dir/log")
  rate=$(final_stat average_exec_per_sec "$dir/log")
  units=$(final_stat new_units_added "$dir/log")
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    failed=1
    result="FAILED (exit $rc): $(grep -m1 -E '^SUMMARY|ERROR: libFuzzer|runtime error' "$dir/log" || echo 'see the log')"
    tail -n 60 "$dir/log" >&2
    echo "fuzz: $t: log $dir/log, input(s) in $dir/findings/" >&2
  fi
  summary+=$'\n'$(printf '%-16s %12s %9s %8s %9s  %s' "$t" "${runs:-?}" "${rate:-?}" "$secs" "${units:-?}" "$result")
done

echo
echo "$summary"
if [ "$failed" -eq 0 ] && [ -z "${FUZZ_WORK:-}" ]; then
  rm -rf "$WORK"  # nothing found: the grown corpora and logs go (set FUZZ_WORK to keep them)
else
  echo "fuzz: corpora, logs and findings in $WORK"
fi
exit "$failed"
