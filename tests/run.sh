#!/bin/sh
# Builds everything three times and runs the ctest suite in each: plain; with AddressSanitizer +
# UndefinedBehaviorSanitizer + LeakSanitizer (the whole suite); with ThreadSanitizer (all but
# the test labelled heavy, which takes minutes under it). Installs missing Debian packages first,
# with valgrind for the memcheck tests and systemd-container and debootstrap for the systemd
# test (a booted Debian 12 container; it reports SKIP, with the reason, where nspawn cannot boot).
#   ./tests/run.sh            # from the repository root
# Environment: JOBS (parallel build and test jobs, default: cores), SPW_SKIP_ASAN=1 and
# SPW_SKIP_TSAN=1 to skip a sanitizer build.
set -eu
cd "$(dirname "$0")/.."
# chromium: the dashboard test loads the page in it (large, so only for the test run);
# systemd-container and debootstrap: the test that boots systemd; tcpdump: the multi-host test
# that looks for the bytes on the wire.
SPW_EXTRA_PACKAGES="valgrind chromium systemd-container debootstrap tcpdump" sh deploy/deps.sh
JOBS=${JOBS:-$(nproc)}
# run_suite DIR "CTEST ARGS" CMAKE ARGS...
run_suite() {
    dir=$1; targs=$2; shift 2
    cmake -S . -B "$dir" -DSPW_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
    # shellcheck disable=SC2086 # targs is a list of words
    (cd "$dir" && ctest --output-on-failure -j "$JOBS" --timeout 300 $targs)
}
echo "=== plain build"
run_suite build "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${SPW_SKIP_ASAN:-0}" != 1 ]; then
    echo "=== sanitizer build (address, undefined, leak)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        run_suite build-asan "" -DCMAKE_BUILD_TYPE=Debug -DSPW_SANITIZE=address,undefined
fi
if [ "${SPW_SKIP_TSAN:-0}" != 1 ]; then
    echo "=== sanitizer build (thread)"
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        run_suite build-tsan "-LE heavy" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPW_SANITIZE=thread
fi
echo "=== all tests passed"
