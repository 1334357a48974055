#!/bin/sh
# netbed: a test bed of K "hosts" on this machine, each a network namespace with its own address,
# all joined by one bridge, reachable from each other by the names host1..hostK. Nothing is
# routed anywhere else: the bridge lives in a namespace of its own (no address, nothing in the
# root namespace), and each host's only interfaces are lo and its link to the bridge.
#
#   netbed.sh run K [--rate MBIT] [--delay MS] -- COMMAND [ARGS...]
#       Makes the bed, runs COMMAND (in the root namespace, with the variables below), tears
#       the bed down whatever happens (exit, error, signal), exits with COMMAND's status.
#       Exit 77 (ctest's SKIP) with "SKIP: reason" when namespaces cannot be made.
#   netbed.sh exec HOST COMMAND [ARGS...]    runs COMMAND on HOST (e.g. host3)
#   netbed.sh link HOST down|up              cuts or restores HOST's link (a partition)
#   netbed.sh shape HOST MBIT                shapes HOST's link to MBIT each way (0: unshaped)
#   netbed.sh addr HOST                      prints HOST's address
#   netbed.sh ns HOST                        prints the namespace name of HOST
#
# Inside `run`, COMMAND sees NETBED (this script's path), NETBED_PREFIX (the namespaces' prefix,
# unique to the run, so parallel runs never meet), NETBED_K, NETBED_RATE_MBIT, NETBED_DELAY_MS
# (what was applied; a delay needs the kernel's netem and is 0 where it is missing; rate is
# shaped with tbf). Addresses are 10.213.0.N/24, host N: the range exists only inside this
# bed's namespaces, so parallel beds may all use it. Names resolve through
# /etc/netns/NS/hosts (bind-mounted over /etc/hosts by `ip netns exec`); /etc/netns/NS/resolv.conf
# points at the host's own loopback, where nothing answers, so no lookup ever leaves the bed.
# Needs root, iproute2 (ip, tc).
set -eu

NETBED_SUBNET=10.213.0

die() {
    echo "netbed: $*" >&2
    exit 1
}

ns_of() {
    [ -n "${NETBED_PREFIX:-}" ] || die "NETBED_PREFIX is not set (run this under 'netbed.sh run')"
    echo "${NETBED_PREFIX}$1"
}

host_index() {
    case "$1" in
    host[0-9]*) echo "${1#host}" ;;
    *) die "unknown host '$1' (want host1..hostK)" ;;
    esac
}

# Everything this run made, by name, in reverse; safe to call twice and after a partial setup.
teardown() {
    set +e
    p=$NETBED_PREFIX
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        case "$ns" in
        "$p"*)
            # Whatever still runs in our namespaces (a test that died before stopping its
            # daemons) is stopped by pid: only processes in namespaces this run created.
            for pid in $(ip netns pids "$ns" 2>/dev/null); do
                kill -9 "$pid" 2>/dev/null
            done
            ;;
        esac
    done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        case "$ns" in
        "$p"*)
            ip netns del "$ns" 2>/dev/null
            rm -rf "/etc/netns/$ns"
            ;;
        esac
    done
    [ "${NETBED_MADE_ETC_NETNS:-0}" = 1 ] && rmdir /etc/netns 2>/dev/null
    return 0
}

setup() {
    k=$1
    p=$NETBED_PREFIX
    sw="${p}sw"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    hosts="127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback"
    i=1
    while [ "$i" -le "$k" ]; do
        hosts="$hosts
$NETBED_SUBNET.$i host$i"
        i=$((i + 1))
    done
    i=1
    while [ "$i" -le "$k" ]; do
        ns="${p}host$i"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip link add name eth0 netns "$ns" type veth peer name "p$i" netns "$sw"
        ip -n "$sw" link set "p$i" master br0
        ip -n "$sw" link set "p$i" up
        ip -n "$ns" addr add "$NETBED_SUBNET.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        mkdir -p "/etc/netns/$ns"
        printf '%s\n' "$hosts" >"/etc/netns/$ns/hosts"
        printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"/etc/netns/$ns/resolv.conf"
        if [ "$NETBED_RATE_MBIT" -gt 0 ] || [ "$NETBED_DELAY_MS" != 0 ]; then
            shape "$ns" eth0          # host to bridge
            shape "$sw" "p$i"         # bridge to host
        fi
        i=$((i + 1))
    done
}

# shape NS DEV: rate (and delay) on DEV's egress. netem does both; where the kernel has no
# netem, tbf shapes the rate and the delay is dropped (reported through NETBED_DELAY_MS=0).
shape() {
    if [ "$NETBED_DELAY_MS" != 0 ]; then
        if [ "$NETBED_RATE_MBIT" -gt 0 ]; then
            rate="rate ${NETBED_RATE_MBIT}mbit"
        else
            rate=""
        fi
        # shellcheck disable=SC2086 # rate is two words or none
        if tc -n "$1" qdisc add dev "$2" root netem delay "${NETBED_DELAY_MS}ms" $rate \
            limit 100000 2>/dev/null; then
            return 0
        fi
        echo "netbed: no netem in this kernel: links get no delay" >&2
        NETBED_DELAY_MS=0
    fi
    if [ "$NETBED_RATE_MBIT" -gt 0 ]; then
        tc -n "$1" qdisc add dev "$2" root tbf rate "${NETBED_RATE_MBIT}mbit" burst 256kb \
            latency 50ms
    fi
}

# Can this machine make namespaces at all? Answers with a reason on stdout when not.
cannot() {
    [ "$(id -u)" = 0 ] || { echo "not root"; return 0; }
    command -v ip >/dev/null 2>&1 || { echo "no ip command (iproute2)"; return 0; }
    command -v tc >/dev/null 2>&1 || { echo "no tc command (iproute2)"; return 0; }
    probe="spwnbprobe$$"
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "cannot create network namespaces here (ip netns add failed)"
        return 0
    fi
    ok=1
    ip -n "$probe" link add probe0 type bridge 2>/dev/null || ok=0
    ip netns del "$probe" 2>/dev/null
    [ $ok = 1 ] || { echo "cannot create a bridge in a namespace"; return 0; }
    return 1
}

cmd_run() {
    [ $# -ge 1 ] || die "usage: netbed.sh run K [--rate MBIT] [--delay MS] -- COMMAND..."
    k=$1
    shift
    case "$k" in '' | *[!0-9]*) die "K must be a number, got '$k'" ;; esac
    [ "$k" -ge 1 ] && [ "$k" -le 200 ] || die "K must be 1..200"
    NETBED_RATE_MBIT=0
    NETBED_DELAY_MS=0
    while [ $# -gt 0 ]; do
        case "$1" in
        --rate) NETBED_RATE_MBIT=$2; shift 2 ;;
        --delay) NETBED_DELAY_MS=$2; shift 2 ;;
        --) shift; break ;;
        *) die "unknown option '$1'" ;;
        esac
    done
    [ $# -ge 1 ] || die "no command to run"
    if why=$(cannot); then
        echo "SKIP: $why"
        exit 77
    fi
    # Unique per run: the pid and a random suffix, short enough for interface-free names.
    NETBED_PREFIX="spwnb$$x$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')-"
    export NETBED_PREFIX NETBED_K="$k" NETBED_RATE_MBIT NETBED_DELAY_MS
    NETBED=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    export NETBED
    NETBED_MADE_ETC_NETNS=0
    [ -d /etc/netns ] || NETBED_MADE_ETC_NETNS=1
    trap 'teardown' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    setup "$k"
    export NETBED_DELAY_MS # shape() may have dropped it
    set +e
    "$@"
    rc=$?
    set -e
    exit $rc
}

[ $# -ge 1 ] || die "usage: netbed.sh run|exec|link|addr|ns ..."
cmd=$1
shift
case "$cmd" in
run) cmd_run "$@" ;;
exec)
    [ $# -ge 2 ] || die "usage: netbed.sh exec HOST COMMAND..."
    ns=$(ns_of "$1")
    shift
    exec ip netns exec "$ns" "$@"
    ;;
link)
    [ $# = 2 ] || die "usage: netbed.sh link HOST down|up"
    i=$(host_index "$1")
    case "$2" in down | up) ;; *) die "link wants down or up" ;; esac
    # The switch's end of the host's cable: the host keeps its own configuration.
    ip -n "$(ns_of sw)" link set "p$i" "$2"
    ;;
shape)
    [ $# = 2 ] || die "usage: netbed.sh shape HOST MBIT"
    i=$(host_index "$1")
    mbit=$2
    case "$mbit" in '' | *[!0-9]*) die "MBIT must be a number" ;; esac
    for end in "$(ns_of "$1") eth0" "$(ns_of sw) p$i"; do
        ns=${end% *}
        dev=${end#* }
        tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
        if [ "$mbit" -gt 0 ]; then
            tc -n "$ns" qdisc add dev "$dev" root tbf rate "${mbit}mbit" burst 256kb latency 50ms
        fi
    done
    ;;
addr)
    [ $# = 1 ] || die "usage: netbed.sh addr HOST"
    echo "$NETBED_SUBNET.$(host_index "$1")"
    ;;
ns)
    [ $# = 1 ] || die "usage: netbed.sh ns HOST"
    ns_of "$1"
    ;;
*) die "unknown command '$cmd'" ;;
esac
