#!/bin/bash
# Installs the build into a temporary prefix and uses it the way a program outside the tree
# would (label install):
#   - nothing is written outside the prefix, not even the systemd units; the units' ExecStart=
#     names the installed programs;
#   - libspillway.so exports exactly the functions spillway.h marks SPILLWAY_API (nm -D), and
#     every function the header declares is marked; its soname is versioned;
#   - tests/install/ext_prog.c and the installed examples build with pkg-config (shared and
#     static) and with CMake's find_package (spillway::spillway, spillway::spillway_static),
#     and run against a cluster of the installed daemons with the installed example plugin;
#   - a configure with BUILD_TESTING=OFF does not look for cmocka.
# test_install.sh BUILD_DIR TEST_SOURCE_DIR PROJECT_SOURCE_DIR CC SANITIZE
set -euo pipefail
B=$1 TS=$2 SRC=$3 CC=$4 SAN=${5:-}
SANFLAGS=""
[ -z "$SAN" ] || SANFLAGS="-fsanitize=$SAN -fno-omit-frame-pointer"
T=$(mktemp -d "${TMPDIR:-/tmp}/spillway-install.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$T"/*.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
    exit 1
}
P=$T/prefix

echo "== cmake --install --prefix $P"
cmake --install "$B" --prefix "$P" >"$T/install.log" || fail "cmake --install"
while read -r f; do
    case "$f" in "$P"/*) ;; *) fail "installed outside the prefix: $f" ;; esac
done <"$B/install_manifest.txt"
for u in spillway-scheduler.service spillway-worker@.service; do
    [ -f "$P/lib/systemd/system/$u" ] || fail "$u not under the prefix"
    bin=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$P/lib/systemd/system/$u")
    [ -x "$bin" ] && case "$bin" in "$P"/bin/*) ;; *) false ;; esac ||
        fail "$u: ExecStart=$bin is not the installed program"
done
for f in lib/sysusers.d/spillway.conf lib/tmpfiles.d/spillway.conf lib/pkgconfig/spillway.pc \
         lib/cmake/spillway/spillwayConfig.cmake share/doc/spillway/examples/demo.c \
         share/doc/spillway/examples/plugin_upper.c include/spillway/task.h; do
    [ -f "$P/$f" ] || fail "$f not installed"
done

if grep -q '^SPW_SCDOC:FILEPATH=/' "$B/CMakeCache.txt"; then
    for m in man8/spillway-scheduler.8 man8/spillway-worker.8 man1/spillway-ctl.1 man3/libspillway.3; do
        [ -s "$P/share/man/$m" ] || fail "man page $m not installed"
    done
fi

echo "== exported symbols"
H=$P/include/spillway/spillway.h
unmarked=$(grep -E '^[a-z].*\bspillway_[a-z0-9_]+\(' "$H" | grep -vE '^(SPILLWAY_API |static inline )' || true)
[ -z "$unmarked" ] || fail "declared in spillway.h without SPILLWAY_API: $unmarked"
sed -n 's/^SPILLWAY_API [^(]*[ *]\(spillway_[a-z0-9_]*\)(.*/\1/p' "$H" | sort >"$T/api.txt"
nm -D --defined-only "$P/lib/libspillway.so" | awk '{print $3}' | sort >"$T/exported.txt"
if [ -n "$SAN" ]; then # the sanitizer runtimes' own hooks
    grep -vE '^__(asan|ubsan|tsan|sanitizer|odr_asan)' "$T/exported.txt" >"$T/e" || true
    mv "$T/e" "$T/exported.txt"
fi
diff -u "$T/api.txt" "$T/exported.txt" >"$T/symbols.log" || fail "exports differ from the API"
echo "$(wc -l <"$T/api.txt") functions exported, nothing else"
soname=$(readelf -d "$P/lib/libspillway.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
major=$(sed -n 's/^#define SPILLWAY_VERSION_MAJOR \([0-9]*\)/\1/p' "$H")
minor=$(sed -n 's/^#define SPILLWAY_VERSION_MINOR \([0-9]*\)/\1/p' "$H")
want=libspillway.so.$major
[ "$major" != 0 ] || want=libspillway.so.0.$minor
[ "$soname" = "$want" ] || fail "soname $soname, want $want"
[ -f "$P/lib/$soname" ] || fail "$soname not installed"

echo "== external builds"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
pkg-config --exists spillway || fail "pkg-config does not find spillway"
[ "$(pkg-config --modversion spillway)" = "$major.$minor.$(sed -n 's/^#define SPILLWAY_VERSION_PATCH \([0-9]*\)/\1/p' "$H")" ] ||
    fail "spillway.pc version"
# shellcheck disable=SC2046,SC2086
{
    $CC $SANFLAGS -o "$T/pc_shared" "$TS/ext_prog.c" $(pkg-config --cflags --libs spillway) &&
    $CC $SANFLAGS -o "$T/pc_static" "$TS/ext_prog.c" $(pkg-config --cflags spillway) \
        $(pkg-config --libs-only-L spillway) -Wl,-Bstatic -lspillway -Wl,-Bdynamic \
        $(pkg-config --static --libs spillway | sed 's/-lspillway//')
} >"$T/build-pc.log" 2>&1 || fail "pkg-config builds"
mkdir "$T/mk" "$T/mks"
make -f "$P/share/doc/spillway/examples/Makefile" -C "$T/mk" CC="$CC" CFLAGS="-O1 $SANFLAGS" \
    LDFLAGS="$SANFLAGS" >"$T/build-make.log" 2>&1 || fail "examples' Makefile"
make -f "$P/share/doc/spillway/examples/Makefile" -C "$T/mks" CC="$CC" CFLAGS="-O1 $SANFLAGS" \
    LDFLAGS="$SANFLAGS" STATIC=1 >>"$T/build-make.log" 2>&1 || fail "examples' Makefile, STATIC=1"
mkdir "$T/cm"
cp "$TS/ext_prog.c" "$T/cm/"
cp "$TS/CMakeLists.ext.txt" "$T/cm/CMakeLists.txt"
cmflags=(-DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$SANFLAGS"
         -DCMAKE_EXE_LINKER_FLAGS="$SANFLAGS" -DCMAKE_MODULE_LINKER_FLAGS="$SANFLAGS")
{
    cmake -S "$T/cm" -B "$T/cm/build" "${cmflags[@]}" && cmake --build "$T/cm/build" &&
    cmake -S "$P/share/doc/spillway/examples" -B "$T/cmex" "${cmflags[@]}" &&
    cmake --build "$T/cmex"
} >"$T/build-cmake.log" 2>&1 || fail "CMake builds"
needs() { readelf -d "$1" | grep -q "NEEDED.*\[$soname\]"; }
for b in "$T/pc_shared" "$T/mk/spillway-demo" "$T/cm/build/ext_shared" "$T/cmex/spillway-demo"; do
    needs "$b" || fail "$b does not load $soname"
done
for b in "$T/pc_static" "$T/mks/spillway-demo" "$T/cm/build/ext_static"; do
    ! readelf -d "$b" | grep -q "NEEDED.*libspillway" || fail "$b is not linked statically"
done

echo "== run against the installed daemons"
# start NAME ARGS...: starts an installed daemon, waits for its READY line, sets ADDR.
start() {
    local name=$1
    shift
    mkfifo "$T/$name.fifo"
    "$@" >"$T/$name.fifo" 2>"$T/$name.log" &
    PIDS="$! $PIDS"
    eval "${name}_PID=$!"
    exec {fd}<"$T/$name.fifo"
    local line=""
    read -r -t 60 line <&"$fd" || fail "$name did not report READY"
    ADDR=${line#READY }
}
start scheduler "$P/bin/spillway-scheduler" --listen 127.0.0.1:0
SCHED=$ADDR
start worker "$P/bin/spillway-worker" --scheduler "$SCHED" --listen 127.0.0.1:0 --slots 2 \
    --store-capacity 128M --spill-dir none --plugin "$T/mk/upper.so"
export LD_LIBRARY_PATH=$P/lib
for b in "$T/pc_shared" "$T/pc_static" "$T/cm/build/ext_shared" "$T/cm/build/ext_static"; do
    "$b" "$SCHED" >>"$T/run.log" 2>&1 || fail "$b"
done
for b in "$T/mk/spillway-demo" "$T/mks/spillway-demo" "$T/cmex/spillway-demo"; do
    "$b" "$SCHED" >>"$T/run.log" 2>&1 || fail "$b"
done
"$P/bin/spillway-ctl" --scheduler "$SCHED" status >>"$T/run.log" 2>&1 || fail "spillway-ctl status"
for name in worker scheduler; do
    eval "pid=\$${name}_PID"
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    PIDS=$(echo "$PIDS" | sed "s/\b$pid\b//")
    [ "$rc" = 0 ] || fail "$name exited with status $rc"
done

echo "== configure without tests"
cmake -S "$SRC" -B "$T/notest" -DBUILD_TESTING=OFF >"$T/notest.log" 2>&1 || fail "configure"
! grep -qi '^CMOCKA' "$T/notest/CMakeCache.txt" || fail "BUILD_TESTING=OFF still looks for cmocka"
cat "$T/run.log"
echo "OK"
