#!/bin/bash
# Runs inside the booted test container as root, started by spw-systemd-test.service;
# test_systemd.sh prepends B= (the build directory) and SRC= (the source tree), both mounted at
# the same paths as on the host. Writes its log and /spw-out/result (0: passed), then powers
# the container off.
set -uo pipefail
# Greps at the end of a pipe read all their input (no -q): with pipefail, grep -q's early exit
# would fail the pipeline on its writer's SIGPIPE even though the line was there.
exec >/spw-out/log 2>&1
finish() {
    echo "$1" >/spw-out/result
    systemctl poweroff --no-block
    exit "$1"
}
fail() {
    echo "FAIL: $*"
    for u in spillway-scheduler spillway-worker@1 spillway-worker@2; do
        echo "--- systemctl status $u"
        systemctl status --no-pager "$u" | tail -15
    done
    echo "--- journal"
    journalctl --no-pager -n 80 -o short-monotonic
    finish 1
}
step() { echo "== $*"; }
# until_ok SECONDS COMMAND...: for state that systemd offers no event for (a worker coming back
# after its scheduler restarted, a line reaching the journal).
until_ok() {
    local end=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.2
    done
}
unit_ended_clean() { # UNIT: inactive, not failed, main process exited 0
    local s
    s=$(systemctl show -p ActiveState -p Result -p ExecMainStatus "$1" | sort | tr '\n' ' ')
    echo "$1: $s"
    [ "$s" = "ActiveState=inactive ExecMainStatus=0 Result=success " ]
}

step "cmake --install and deploy/install.sh"
cmake --install "$B" --prefix /usr/local >/dev/null || fail "cmake --install"
(cd "$SRC" && SPW_BUILD_DIR=$B sh deploy/install.sh) || fail "deploy/install.sh"
getent group spillway >/dev/null || fail "no group spillway (systemd-sysusers)"
[ "$(stat -c '%a %U %G' /etc/spillway/secret)" = "640 root spillway" ] ||
    fail "secret: $(stat -c '%a %U %G' /etc/spillway/secret)"
# The example plugin, built from the installed examples, for the workers.
mkdir -p /tmp/ex /usr/local/lib/spillway/plugins
make -s -C /tmp/ex -f /usr/local/share/doc/spillway/examples/Makefile upper.so ||
    fail "building the example plugin"
install -m 0644 /tmp/ex/upper.so /usr/local/lib/spillway/plugins/upper.so
for i in 1 2; do
    sed -e "s/^name = .*/name = worker-$i/" -e "s/^store-capacity = .*/store-capacity = 256M/" \
        /usr/local/share/doc/spillway/examples/worker.conf >/etc/spillway/worker-$i.conf
    echo "plugin = /usr/local/lib/spillway/plugins/upper.so" >>/etc/spillway/worker-$i.conf
done

step "systemctl enable --now"
systemctl enable --now spillway-scheduler spillway-worker@1 spillway-worker@2 ||
    fail "enable --now"
for u in spillway-scheduler spillway-worker@1 spillway-worker@2; do
    systemctl is-active -q "$u" || fail "$u is not active"
done

for i in 1 2; do # the same-host socket lives in the unit's RuntimeDirectory
    [ "$(stat -c '%a %G' /run/spillway/worker-$i/local.sock)" = "660 spillway" ] ||
        fail "worker-$i's local socket: $(ls -l /run/spillway/worker-$i 2>&1)"
done
# Both workers are listed for each other's default task limits (a private /dev would hide them).
until_ok 10 sh -c '[ "$(ls /run/spillway/host | wc -l)" = 2 ]' ||
    fail "the host's worker list: $(ls -l /run/spillway/host 2>&1)"

step "a job as a member of group spillway, through the installed library found by pkg-config"
useradd -m -G spillway alice || fail "useradd alice"
useradd -m bob || fail "useradd bob"
for u in alice bob; do
    cp "$SRC/tests/install/ext_prog.c" "/home/$u/" && chown "$u" "/home/$u/ext_prog.c"
done
job() { # USER: builds ext_prog with pkg-config and runs it against the local scheduler
    runuser -u "$1" -- bash -c 'cd && cc -o ext ext_prog.c $(pkg-config --cflags --libs spillway) &&
        ./ext 127.0.0.1:7400'
}
job alice || fail "alice's job"
step "spillway-ctl status without options"
out=$(runuser -u alice -- spillway-ctl status) || fail "spillway-ctl status: $out"
echo "$out"
echo "$out" | grep -e "workers: 2" >/dev/null || fail "spillway-ctl status does not show 2 workers"
step "a user outside the group cannot read the secret, and is told"
out=$(job bob 2>&1) && fail "bob's job succeeded without the secret"
echo "$out"
echo "$out" | grep -e "/etc/spillway/secret: Permission denied" >/dev/null || fail "no warning naming the secret"
echo "$out" | grep -e "authentication failed" >/dev/null || fail "bob's job did not fail with SPW_EAUTH"

step "journalctl -u: each line once, at its priority"
j() { journalctl --no-pager -u "$@"; }
until_ok 10 sh -c 'journalctl --no-pager -u spillway-scheduler -p 4..4 -o cat | grep -e "refused: authentication failed" >/dev/null' ||
    fail "the scheduler's warning about bob is not in the journal at priority 4"
[ "$(j spillway-scheduler -p 5..5 -o cat | grep -c '^listening on 127.0.0.1:7400$')" = 1 ] ||
    fail "'listening on' is not in the journal once at priority 5"
! j spillway-scheduler -p 6..7 -o cat | grep -e "listening on" >/dev/null || fail "'listening on' at a lower priority"
for u in spillway-scheduler spillway-worker@1 spillway-worker@2; do
    lines=$(journalctl --no-pager _SYSTEMD_UNIT="$u.service" -o cat)
    echo "--- $u"
    echo "$lines"
    ! echo "$lines" | grep -Ee '^<[0-9]>|spillway-(scheduler|worker)\[|^READY ' >/dev/null ||
        fail "$u: a line with its ident twice, a raw <N> prefix or a READY line"
    dups=$(echo "$lines" | sort | uniq -d)
    [ -z "$dups" ] || fail "$u: lines twice: $dups"
done
j spillway-worker@1 -p 5..5 -o cat | grep -e "^registered with scheduler=127.0.0.1:7400" >/dev/null ||
    fail "worker@1's registration is not in the journal at priority 5"

step "restart of the scheduler under a running job: the job resumes and completes"
rm -f /home/alice/submitted
runuser -u alice -- bash -c 'cd && ./ext 127.0.0.1:7400 /home/alice/submitted' >/tmp/slow.out 2>&1 &
slow_pid=$!
until_ok 30 test -e /home/alice/submitted || fail "the slow job did not submit: $(cat /tmp/slow.out)"
systemctl restart spillway-scheduler || fail "restart"
wait "$slow_pid" || fail "the job did not survive the restart: $(cat /tmp/slow.out)"
grep -e "OK" /tmp/slow.out >/dev/null || fail "the job's results: $(cat /tmp/slow.out)"
journalctl --no-pager -u spillway-scheduler -o cat | grep -e "journal .*restored 1 sessions" >/dev/null ||
    fail "the restarted scheduler did not restore the session from its journal"
workers_back() { runuser -u alice -- spillway-ctl status | grep -e "workers: 2" >/dev/null; }
until_ok 60 workers_back || fail "the workers did not come back within 60 s"
job alice || fail "alice's job after the restart"
echo "--- what the journal says of worker@1 around the restart"
journalctl --no-pager -u spillway-worker@1 -o short-monotonic | tail -12
for u in spillway-worker@1 spillway-worker@2; do
    ! systemctl is-failed -q "$u" || fail "$u is failed after the scheduler's restart"
done

step "scheduler away: the workers are not failed, and come back when it is"
n0=$(systemctl show -p NRestarts --value spillway-worker@1)
systemctl stop spillway-scheduler
restarted_twice() { [ "$(systemctl show -p NRestarts --value spillway-worker@1)" -ge $((n0 + 3)) ]; }
# A worker that gives up on its scheduler (exit 3) is started again every RestartSec; one that
# waits and reconnects never restarts: both are fine, neither may be failed.
until_ok 15 restarted_twice || true
systemctl show -p NRestarts -p ActiveState -p SubState -p Result spillway-worker@1 | tr '\n' ' '
echo
for u in spillway-worker@1 spillway-worker@2; do
    ! systemctl is-failed -q "$u" || fail "$u is failed while the scheduler is away"
    ! journalctl --no-pager -u "$u" | grep -E "Failed with result|Failed to start" ||
        fail "$u: the journal reports a failure"
done
journalctl --no-pager -u spillway-worker@1 -o short-monotonic | tail -12
systemctl start spillway-scheduler || fail "start of the scheduler"
until_ok 60 workers_back || fail "the workers did not come back within 60 s"

step "systemctl stop: each unit ends inactive, not failed"
for u in spillway-worker@2 spillway-worker@1 spillway-scheduler; do
    systemctl stop "$u"
    unit_ended_clean "$u" || fail "$u did not end cleanly"
done
echo "PASSED"
finish 0
