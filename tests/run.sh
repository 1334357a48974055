#!/bin/sh
# Builds everything twice (plain, and with AddressSanitizer + UndefinedBehaviorSanitizer +
# LeakSanitizer) and runs the whole ctest suite in both. Installs missing Debian packages first.
#   ./tests/run.sh            # from the repository root
# Environment: JOBS (parallel build and test jobs, default: cores), SPW_SKIP_ASAN=1 to skip the
# sanitizer build.
set -eu
cd "$(dirname "$0")/.."
sh deploy/deps.sh
JOBS=${JOBS:-$(nproc)}
run_suite() {
    dir=$1; shift
    cmake -S . -B "$dir" -DSPW_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
    (cd "$dir" && ctest --output-on-failure -j "$JOBS" --timeout 300)
}
echo "=== plain build"
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${SPW_SKIP_ASAN:-0}" != 1 ]; then
    echo "=== sanitizer build (address, undefined, leak)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DSPW_SANITIZE=address,undefined
fi
echo "=== all tests passed"
