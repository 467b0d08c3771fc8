#!/usr/bin/env bash
# Build zlane's libFuzzer targets with clang (ASan + UBSan) in a build of
# their own, replay tests/fuzz/regressions, then fuzz each target for a while
# starting from a copy of tests/fuzz/corpus. Fails if any target crashes.
#
#   tests/fuzz/run.sh [-b BUILD_DIR] [-s SECONDS] [-W] [TARGET...]
#
#   -b DIR      the fuzz build directory            [<repo>/build-fuzz]
#   -s SECONDS  seconds per target when neither FUZZ_SECONDS nor
#               ZLANE_FUZZ_SECONDS is set            [60]
#   -W          compiler warnings are errors (ZLANE_WERROR; fuzz_smoke
#               passes it when its build has ZLANE_WERROR on)
#   TARGET      fuzz_envelope fuzz_broker_frontend fuzz_broker_backend
#               fuzz_broker_admin fuzz_http fuzz_zmtp [all]
#
# Environment: FUZZ_SECONDS or ZLANE_FUZZ_SECONDS (seconds per target),
# FUZZ_ARGS (more libFuzzer flags), CC (a clang to use).
# Exits 0 when every target ran clean, 1 on a crash or a build failure, and
# 77 (CTest's skip) with "SKIP: <why>" where clang or libFuzzer is missing.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
build=$src/build-fuzz
default_seconds=60
werror=OFF
while getopts "b:s:Wh" opt; do
  case $opt in
    b) build=$OPTARG ;;
    s) default_seconds=$OPTARG ;;
    W) werror=ON ;;
    h) sed -n '2,19p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
seconds=${FUZZ_SECONDS:-${ZLANE_FUZZ_SECONDS:-$default_seconds}}
targets=("$@")
[ ${#targets[@]} -gt 0 ] ||
  targets=(fuzz_envelope fuzz_broker_frontend fuzz_broker_backend fuzz_broker_admin fuzz_http
           fuzz_zmtp)

# ---------------------------------------------------------------- clang
clang=
for c in ${CC:-} clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
  if command -v "$c" >/dev/null 2>&1 && "$c" --version 2>/dev/null | grep -q clang; then
    clang=$(command -v "$c")
    break
  fi
done
if [ -z "$clang" ]; then
  echo "SKIP: clang not found (install clang and libclang-rt-dev to fuzz)"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput (const uint8_t *d, size_t n) { return 0; }\n' \
  >"$probe/probe.c"
if ! "$clang" -fsanitize=fuzzer,address,undefined "$probe/probe.c" -o "$probe/probe" \
     >"$probe/log" 2>&1; then
  echo "SKIP: $clang cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-dev):"
  sed 's/^/  /' "$probe/log" | head -5
  exit 77
fi

# ---------------------------------------------------------------- build
mkdir -p "$build"
echo "fuzz: building ${targets[*]} with $clang in $build"
if ! { cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="$clang" -DZLANE_FUZZ=ON \
         -DZLANE_TESTS=OFF -DZLANE_WERROR="$werror" -DCMAKE_BUILD_TYPE=Debug &&
       cmake --build "$build" -j2 --target "${targets[@]}"; } >"$build/build.log" 2>&1; then
  tail -40 "$build/build.log"
  echo "fuzz: the build failed (log: $build/build.log)"
  exit 1
fi

# ---------------------------------------------------------------- run
passed=0
failed=0
for t in "${targets[@]}"; do
  bin=$build/fuzz/$t
  work=$build/fuzz-run/$t
  rm -rf "$work"
  mkdir -p "$work/corpus"
  cp "$src/tests/fuzz/corpus/$t/"* "$work/corpus/" 2>/dev/null || true
  ok=1
  # every committed regression input, once each
  mapfile -t regressions < <(find "$src/tests/fuzz/regressions/$t" -type f ! -name '.*' 2>/dev/null | sort)
  if [ ${#regressions[@]} -gt 0 ]; then
    if ! (cd "$work" && "$bin" "${regressions[@]}") >"$work/regressions.log" 2>&1; then
      ok=0
      echo "fuzz: $t: a regression input fails again:"
      tail -40 "$work/regressions.log"
    fi
  fi
  if [ $ok = 1 ]; then
    # shellcheck disable=SC2086
    if ! (cd "$work" && "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 \
            -print_final_stats=1 -artifact_prefix="$work/" ${FUZZ_ARGS:-} "$work/corpus") \
         >"$work/fuzz.log" 2>&1; then
      ok=0
      echo "fuzz: $t: FAILED after fuzzing; the end of its log ($work/fuzz.log):"
      tail -60 "$work/fuzz.log"
      ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null |
        sed 's/^/  input: /' || true
    fi
  fi
  if [ $ok = 1 ]; then
    passed=$((passed + 1))
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/fuzz.log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/fuzz.log" | grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9/a-zA-Z]*' || true)
    echo "fuzz: $t: ok: ${#regressions[@]} regression input(s) replayed, $runs runs in ${seconds} s, $cov"
  else
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
