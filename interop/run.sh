#!/bin/bash
# goroce interop matrix: rdma-core and perftest tools on the kernel's soft-RoCE (rxe) in the lab
# VMs against each other and against goroce on the host. What `make interop` runs.
#
#   interop/run.sh [options] [FILTER...]
#     FILTER       extended regular expressions; a case runs when its id (TOOL/VARIANT, e.g.
#                  rc_pingpong/cli-udp-1024) matches any of them. Default: every case.
#     -l, --list   print the selected case ids and exit (needs no root, boots nothing)
#     -k, --keep   leave the lab running at the end (next runs reuse it and skip the boot)
#     -p, --pcap   capture each case on br0 into out/pcap/CASE.pcap
#   Environment: GOROCE_LAB_SUITE (the guests' Debian release: trixie, the default, or
#     bookworm), INTEROP_VARIANTS (an ERE of the variants to run; default: TRIXIE_VARIANTS
#     below on trixie, the smaller set BOOKWORM_VARIANTS on bookworm; "all" for all),
#     INTEROP_FILTER (one more ERE), INTEROP_OUT (out dir, default interop/out/SUITE),
#     INTEROP_CASES (case table, default interop/cases.txt), INTEROP_LOSS (percent, 3),
#     INTEROP_TIMEOUT (client limit per case, 45 s), INTEROP_BUDGET (whole run, 2100 s; 1500 s
#     for bookworm's smaller set),
#     INTEROP_PUSH (files to copy into the guests' /lab/bin), INTEROP_KEEP=1, INTEROP_PCAP=1,
#     GO (go command), plus the lab
#     settings in lib.sh (GOROCE_LAB_DIR, GOROCE_LAB_NS, ACCEL...).
# Exit: 0 all selected cases passed; 1 a case failed or did not run; 77 the lab could not be
# built or booted (printed as SKIPPED with the reason; never a pass); 2 usage.
source "$(dirname "$0")/lib.sh"

OUT="${INTEROP_OUT:-$IOP/out/$SUITE}"
CASES="${INTEROP_CASES:-$IOP/cases.txt}"
LOSS="${INTEROP_LOSS:-3}"
DEF_TMO="${INTEROP_TIMEOUT:-45}"
BUDGET="${INTEROP_BUDGET:-2100}"
KEEP="${INTEROP_KEEP:-0}"
PCAP="${INTEROP_PCAP:-0}"
RESTARTS="${INTEROP_RESTARTS:-2}"
READY_WAIT=20            # seconds for a server to start listening
SERVER_GRACE=20          # seconds a server may take to finish after its client
GOROCE_BIN="$STATE/roce" # host commands run with $STATE first on PATH, so "roce" is this binary
HTTPD_BIN="$STATE/rsockhttp" # the lab's net/http server on rsockets (interop/rsockhttp), built with roce
PEERS_SRC="$IOP/peers"   # goroce's C peers (interop/peers), built for the guests' release and pushed to them
PEERS_BIN="$STATE/peers/$SUITE"
# every peer any release builds (RDMA_CORE_MAJOR=999: those that need a newer rdma-core too)
PEERS=$(make -s -C "$PEERS_SRC" list RDMA_CORE_MAJOR=999) || die "make -C $PEERS_SRC list failed"
# The variants the second, smaller run on Debian 12 (bookworm) takes unless INTEROP_VARIANTS says:
# goroce over udp both ways, at path MTU 1024, without and with loss. What differs between the
# releases is the guests' side (rxe 6.1, rdma-core 44, perftest 4.5): every tool against goroce in
# both roles, and rxe 6.1's retransmissions. goroce's transports (afpacket), IPv6 and path MTU 4096
# are the host's side, which the trixie run covers; the rxe <-> rxe cases check the lab, and
# `GOROCE_LAB_SUITE=bookworm run.sh ref` runs them when a bookworm case fails. That run gets a
# budget of its own, BOOKWORM_BUDGET seconds, unless INTEROP_BUDGET says.
# It also runs the device variants (cli-dev-*, srv-dev-*: Debian 12's own tools on the host's
# goroce device against the guests' rxe; perftest 4.5 at both ends, as the guests' perftest 25
# does not speak 4.5's exchange).
BOOKWORM_VARIANTS='^(cli-udp-1024|srv-udp-1024|cli-udp-loss|srv-udp-loss|(cli|srv)-dev(-1024|-loss|6-1024|-4096))$'
BOOKWORM_BUDGET=1500
# The trixie run's default: every variant but AF_PACKET at path MTU 4096 (afpacket at 1024 and
# udp at 4096 cover each on its own) and the rxe <-> rxe checks at 4096 and over IPv6 (ref-1024
# and ref-loss check the lab), so that the matrix fits its budget and CI's 90 minutes.
# INTEROP_VARIANTS=all runs them all (about 415 cases, 31 minutes).
TRIXIE_VARIANTS='^(ref-1024|ref-loss|cli-udp-1024|srv-udp-1024|cli-afp-1024|srv-afp-1024|cli-udp-loss|srv-udp-loss|cli-udp6-1024|srv-udp6-1024|cli-afp6-1024|srv-afp6-1024|cli-udp-4096|srv-udp-4096)$'
VARIANTS_RE=${INTEROP_VARIANTS:-}
if [ -z "$VARIANTS_RE" ]; then
    VARIANTS_RE=$TRIXIE_VARIANTS
    if [ "$SUITE" = bookworm ]; then
        VARIANTS_RE=$BOOKWORM_VARIANTS
        BUDGET="${INTEROP_BUDGET:-$BOOKWORM_BUDGET}"
    fi
fi
[ "$VARIANTS_RE" = all ] && VARIANTS_RE=.

# Variants, in run order (grouped by MTU so the guests switch MTU twice) and matrix column order.
#   mode: the word in cases.txt that selects the variant
#   server/client: WHERE:WHAT, WHERE = vm1 | vm2 | host, WHAT = tool (the VM tool column of
#     cases.txt) | goroce (the goroce column) | device (the VM tool column run unmodified on the
#     host on the goroce device, DEVICE_TOOLS below); loss: L = INTEROP_LOSS % on tap1 (VM1's port)
#   opts: what {HOST} becomes (- = nothing); ip: 4 or 6, the addresses {SERVER} and --bind take
#     and the guests' GID index {GID} (1 the IPv4-mapped GID, 2 the IPv6 one; see guest/init.sh)
VARIANTS="
# mode    variant        server       client       mtu   loss  opts  ip
ref       ref-1024       vm1:tool     vm2:tool     1024  0     -     4
refloss   ref-loss       vm1:tool     vm2:tool     1024  L     -     4
udp       cli-udp-1024   vm1:tool     host:goroce  1024  0     udp   4
udp       srv-udp-1024   host:goroce  vm1:tool     1024  0     udp   4
srvudp    srv-udp-1024   host:goroce  vm1:tool     1024  0     udp   4
afpacket  cli-afp-1024   vm1:tool     host:goroce  1024  0     afp   4
afpacket  srv-afp-1024   host:goroce  vm1:tool     1024  0     afp   4
loss      cli-udp-loss   vm1:tool     host:goroce  1024  L     udp   4
loss      srv-udp-loss   host:goroce  vm1:tool     1024  L     udp   4
cliloss   cli-udp-loss   vm1:tool     host:goroce  1024  L     udp   4
cli       cli-udp-1024   vm1:tool     host:goroce  1024  0     udp   4
ref6      ref6-1024      vm1:tool     vm2:tool     1024  0     -     6
udp6      cli-udp6-1024  vm1:tool     host:goroce  1024  0     udp   6
udp6      srv-udp6-1024  host:goroce  vm1:tool     1024  0     udp   6
afpacket6 cli-afp6-1024  vm1:tool     host:goroce  1024  0     afp   6
afpacket6 srv-afp6-1024  host:goroce  vm1:tool     1024  0     afp   6
ref4096   ref-4096       vm1:tool     vm2:tool     4096  0     -     4
udp       cli-udp-4096   vm1:tool     host:goroce  4096  0     udp   4
udp       srv-udp-4096   host:goroce  vm1:tool     4096  0     udp   4
srvudp    srv-udp-4096   host:goroce  vm1:tool     4096  0     udp   4
afpacket  cli-afp-4096   vm1:tool     host:goroce  4096  0     afp   4
afpacket  srv-afp-4096   host:goroce  vm1:tool     4096  0     afp   4
udp       cli-dev-1024   vm1:tool     host:device  1024  0     -     4
udp       srv-dev-1024   host:device  vm1:tool     1024  0     -     4
loss      cli-dev-loss   vm1:tool     host:device  1024  L     -     4
loss      srv-dev-loss   host:device  vm1:tool     1024  L     -     4
udp6      cli-dev6-1024  vm1:tool     host:device  1024  0     -     6
udp6      srv-dev6-1024  host:device  vm1:tool     1024  0     -     6
udp       cli-dev-4096   vm1:tool     host:device  4096  0     -     4
udp       srv-dev-4096   host:device  vm1:tool     4096  0     -     4
"
# host_opts OPTS IP: what {HOST} becomes.
host_opts() {
    local a=$HOST_IP
    [ "$2" = 6 ] && a=$HOST_IP6
    case $1 in
    udp) echo "--bind $a --transport udp" ;;
    afp) echo "--bind $a --transport afpacket --dev $HOSTIF" ;;
    *) echo "" ;;
    esac
}

usage() { sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 2; }
LIST=0
FILTERS=()
while [ $# -gt 0 ]; do
    case $1 in
    -l | --list) LIST=1 ;;
    -k | --keep) KEEP=1 ;;
    -p | --pcap) PCAP=1 ;;
    -h | --help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) FILTERS+=("$1") ;;
    esac
    shift
done
[ -n "${INTEROP_FILTER:-}" ] && FILTERS+=("$INTEROP_FILTER")

# trim VAR TEXT: VAR = TEXT without leading and trailing white space (no subshell: the
# case table expands into 100+ cases, and forks are slow on a loaded 2-core machine).
trim() {
    local t=$2
    t=${t#"${t%%[![:space:]]*}"}
    t=${t%"${t##*[![:space:]]}"}
    printf -v "$1" '%s' "$t"
}

# ---------------------------------------------------------------------------- case list
# Each case is one line of fields separated by \x1f:
#   id tool variant mtu loss check expect wait timeout client_rc cexpect sexpect srv_where srv_cmd
#   cli_where cli_cmd uses_goroce uses_peers host_mtu
US=$'\x1f'
declare -a CASE_LIST=() TOOLS=() VCOLS=()

# expand VAR CMD ROLE SERVER_ADDR MTU OPTS GID: VAR = CMD with its placeholders filled in for one side.
expand() {
    local c=$2 role=$3 addr=$4 mtu=$5 opts=$6 gid=$7 keep re pre mid post
    local -a words
    if [ "$role" = server ]; then keep=S; else keep=C; fi
    # {S:..} and {C:..} may hold the other placeholders ({SERVER}, {MTU}, {HOST})
    re="^(.*)\{([SC]):(([^{}]|\{[A-Z]+\})*)\}(.*)$"
    while [[ "$c" =~ $re ]]; do # one {S:..} or {C:..} per turn, the last one first
        pre=${BASH_REMATCH[1]} mid=${BASH_REMATCH[3]} post=${BASH_REMATCH[5]}
        if [ "${BASH_REMATCH[2]}" = "$keep" ]; then c=$pre$mid$post; else c=$pre$post; fi
    done
    if [[ "$c" != *"{SERVER}"* ]] && [ "$role" = client ]; then c="$c $addr"; fi
    c=${c//\{MTU\}/$mtu}
    c=${c//\{GID\}/$gid}
    c=${c//\{SERVER\}/$addr}
    c=${c//\{HOST\}/$opts}
    read -ra words <<< "$c" # also collapses the blanks an empty placeholder leaves
    printf -v "$1" '%s' "${words[*]}"
}

# is_peer CMD: 0 when CMD runs (or preloads, /lab/bin/NAME) one of goroce's C peers.
is_peer() {
    local p
    for p in $PEERS; do [[ " $1 " == *[[:space:]/]"$p"[[:space:]:\;]* ]] && return 0; done
    return 1
}

# where_addr WHERE IP: the IPv4 (IP 4) or IPv6 (6) address of host, vm1 or vm2.
where_addr() {
    if [ "$2" = 6 ]; then
        if [ "$1" = host ]; then echo "$HOST_IP6"; else vm_ip6 "${1#vm}"; fi
    elif [ "$1" = host ]; then echo "$HOST_IP"; else vm_ip "${1#vm}"; fi
}

# The device variants (cli-dev-*, srv-dev-*): the host runs the VM's command itself, the same
# Debian binary, on goroce's soft device ("roce device" on the host's lab addresses, reached with
# LD_PRELOAD=libgoroce: README, "Unmodified RDMA programs on goroce"), against rxe in VM1. The
# tools that take part: rdma-core's and perftest's, whose commands name the device (-d rxe0
# becomes -d goroce0; GID index 1 is the IPv4 address there too, 2 the IPv6 one), rping, and
# librdmacm's rsockets: rstream, riostream, and udpong (the guest's udpong_rxe, udpong with
# dsahfix.so for rxe, is plain udpong on the device, its lines unbuffered as udpong_rxe's are).
DEVICE_TOOLS=" ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ib_write_bw ib_read_bw ib_send_bw
 ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat rping rstream riostream udpong_rxe "
# Every such case runs at path MTU 1024 over IPv4 (cli-dev-1024, srv-dev-1024); with loss, over
# IPv6 and at 4096 a few of them do.
DEVICE_FEW_VARIANTS='^(cli|srv)-dev(-loss|6-1024|-4096)$'
DEVICE_FEW=" rc_pingpong ud_pingpong write_bw read_bw atomic_faa send_lat rping write_bw_x6 send_lat_x6 read_bw_cm6 write_bw_cm "
# perftest 4.5's ib_read_lat -R and ib_write_bw -R as the client send their second connection's
# REQ before rxe's server listens for it (REJ reason 8: nobody listens) about one time in two
# (ib_write_bw -R: 7 of 14 runs failed at MTU 1024 and 1 of 5 at 4096 on 2026-12-06; ib_read_bw
# -R: none of 8 then, but a CI run the same evening failed read_bw_cm/cli-dev-1024 the same way,
# REJ reason 8 and then EINVAL); goroce's device is only faster than rxe there. perftest then
# retries on the ids it destroyed (perftest fixed it in 3d9d8d0, 2025-12): that crashed (SIGBUS)
# until libgoroce's rdma_cm calls checked their ids, and fails with EINVAL now.
# udpong's client resends an echo unanswered within 1 ms with what the last stale answer left in
# its buffer (client_send_recv reads into the message it sends), so every resend circulates for
# the rest of the run: against rxe in a TCG guest, slower than 1 ms, they pile up until the guest
# cannot keep up (64 bytes x 100 did not end in 90 s), on the device or on rxe alike. udpong on
# the device serves the guest's client (srv-dev), which is slow enough itself.
DEVICE_CLI_RACY=" read_lat_cm write_bw_cm read_bw_cm udpong_64 udpong_1000 "
DEVICE_DIR=/tmp/goroce-interop-device # GOROCE_DIR of the host's device (a short path: its socket lives there)
# device_tool CMD: 0 when CMD is one tool of DEVICE_TOOLS and nothing more.
device_tool() {
    local w
    read -r w _ <<< "$1"
    [[ "$DEVICE_TOOLS" == *" $w "* ]] && [[ "$1" != *[\;\&\|\>]* ]]
}
# on_device VAR CMD: VAR = CMD run on the host's goroce device.
on_device() {
    local c=${2//rxe0/goroce0}
    c=${c/#udpong_rxe /stdbuf -oL udpong }
    printf -v "$1" '%s' "env LD_PRELOAD=$DEVICE_DIR/libgoroce.so GOROCE_DIR=$DEVICE_DIR $c"
}

selected() {
    local f
    [ ${#FILTERS[@]} = 0 ] && return 0
    for f in "${FILTERS[@]}"; do [[ "$1" =~ $f ]] && return 0; done
    return 1
}

load_cases() {
    [ -r "$CASES" ] || die "no case table $CASES"
    local -a tl=() tm=() to=() tv=() tg=()
    local line name modes opts vmc gc i f
    while IFS= read -r line || [ -n "$line" ]; do
        trim line "$line"
        [ -z "$line" ] || [ "${line:0:1}" = "#" ] && continue
        IFS='|' read -r name modes opts vmc gc <<< "$line"
        trim name "$name"
        trim modes "$modes"
        modes=" $modes "
        trim opts "$opts"
        trim vmc "$vmc"
        trim gc "${gc:-}"
        [ -n "$name" ] && [ -n "$vmc" ] || die "$CASES: bad line: $line"
        tl+=("$name") tm+=("$modes") to+=("$opts") tv+=("$vmc") tg+=("$gc")
    done < "$CASES"
    local mode variant srv cli mtu loss hopts hostopts sw sk cw ck check expect wait tmo id addr scmd ccmd ug up o
    local crc cexp sexp lm cl ipv gid addr4 addr6 hm su
    while read -r mode variant srv cli mtu loss hopts ipv; do
        [ -z "$mode" ] || [ "${mode:0:1}" = "#" ] && continue
        [ "$loss" = L ] && loss=$LOSS
        [[ "$variant" =~ $VARIANTS_RE ]] || continue
        sw=${srv%%:*} sk=${srv#*:} cw=${cli%%:*} ck=${cli#*:}
        addr6=$(where_addr "$sw" "$ipv") addr4=$(where_addr "$sw" 4)
        hostopts=$(host_opts "$hopts" "$ipv")
        gid=$GID4_INDEX
        [ "$ipv" = 6 ] && gid=$GID6_INDEX
        for i in "${!tl[@]}"; do
            [[ "${tm[$i]}" == *" $mode "* ]] || continue
            id="${tl[$i]}/$variant"
            selected "$id" || continue
            check=none expect="" wait=tcp:18515 tmo=$DEF_TMO crc="" cexp="" sexp="" lm="" addr=$addr6 hm="" su="" dc=""
            for o in ${to[$i]}; do
                case $o in
                check=*) check=${o#*=} ;; expect=*) expect=${o#*=} ;;
                wait=*) wait=${o#*=} ;; timeout=*) tmo=${o#*=} ;;
                client_rc=*) crc=${o#*=} ;;
                cexpect=*) cexp="${cexp:+$cexp }${o#*=}" ;; sexpect=*) sexp="${sexp:+$sexp }${o#*=}" ;;
                loss=requests) lm=r ;;
                addr4) addr=$addr4 ;;
                hostmtu=*) hm=${o#*=} ;;
                suite=*) su=${o#*=} ;;
                devcli=*) dc=${o#*=} dc=${dc//,/ } ;;
                *) die "$CASES: ${tl[$i]}: unknown option $o" ;;
                esac
            done
            # suite=S[,S]: the case runs on those releases' guests only
            [ -z "$su" ] || [[ ",$su," == *",$SUITE,"* ]] || continue
            ug=0
            if [ "$sk" = goroce ] || [ "$ck" = goroce ]; then
                ug=1
                [ -n "${tg[$i]}" ] || continue # no goroce command for this tool
            fi
            if [ "$sk" = device ] || [ "$ck" = device ]; then
                ug=1
                device_tool "${tv[$i]}" || continue
                [[ "$variant" =~ $DEVICE_FEW_VARIANTS ]] && [[ "$DEVICE_FEW" != *" ${tl[$i]} "* ]] && continue
                [[ "$variant" == cli-* ]] && [[ "$DEVICE_CLI_RACY" == *" ${tl[$i]} "* ]] && continue
            fi
            f=${tv[$i]}; [ "$sk" = goroce ] && f=${tg[$i]}
            expand scmd "$f" server "$addr" "$mtu" "$hostopts" "$gid"
            [ "$sk" = device ] && on_device scmd "$scmd"
            f=${tv[$i]}; [ "$ck" = goroce ] && f=${tg[$i]}
            [ "$ck" = device ] && f="$f $dc"
            expand ccmd "$f" client "$addr" "$mtu" "$hostopts" "$gid"
            [ "$ck" = device ] && on_device ccmd "$ccmd"
            up=0 cl=$loss
            [ "$loss" != 0 ] && cl=$loss$lm
            if { [ "$sw" != host ] && is_peer "$scmd"; } || { [ "$cw" != host ] && is_peer "$ccmd"; }; then up=1; fi
            CASE_LIST+=("$id$US${tl[$i]}$US$variant$US$mtu$US$cl$US$check$US$expect$US$wait$US$tmo$US$crc$US$cexp$US$sexp$US$sw$US$scmd$US$cw$US$ccmd$US$ug$US$up$US$hm")
            [[ " ${TOOLS[*]} " == *" ${tl[$i]} "* ]] || TOOLS+=("${tl[$i]}")
            [[ " ${VCOLS[*]} " == *" $variant "* ]] || VCOLS+=("$variant")
        done
    done <<< "$VARIANTS"
    # matrix rows in table order
    local -a rows=()
    for name in "${tl[@]}"; do [[ " ${TOOLS[*]} " == *" $name "* ]] && rows+=("$name"); done
    TOOLS=("${rows[@]}")
}

load_cases
if [ "$LIST" = 1 ]; then
    for c in "${CASE_LIST[@]}"; do
        IFS=$US read -r id _ _ mtu loss _ _ _ _ _ _ _ sw scmd cw ccmd _ _ hm <<< "$c"
        lm=""; [ "${loss%r}" != "$loss" ] && lm=" (requests only)"
        printf '%-27s mtu=%s loss=%s%%%s%s\n    server %-5s %s\n    client %-5s %s\n' "$id" "$mtu" "${loss%r}" "$lm" \
            "${hm:+ host-mtu=$hm}" "$sw" "$scmd" "$cw" "$ccmd"
    done
    echo "${#CASE_LIST[@]} cases"
    exit 0
fi
[ ${#CASE_LIST[@]} -gt 0 ] || die "no case matches ${FILTERS[*]}"

# ------------------------------------------------------------------------------ the run
need_root
mkdir -p "$STATE"
exec 7> "$STATE/run.lock"
flock -n 7 || skip "another interop run is using the lab ($STATE/run.lock)"
RUN_T0=$(now)
START=$SECONDS
mkdir -p "$OUT/logs"
rm -f "$OUT"/logs/*.log "$OUT/matrix.txt" "$OUT/results.tsv"
[ "$PCAP" = 1 ] && mkdir -p "$OUT/pcap" && rm -f "$OUT"/pcap/*.pcap
TMP=$(mktemp -d /tmp/goroce-interop.XXXXXX)
declare -A RES=() WHY=() DUR=() W=() H=()
LAB_STARTED=0 RESTARTED=0 CUR_MTU="" TCPDUMP_PID="" GOROCE_NOTE="" PEERS_NOTE="" PEERS_OK=0 BOOT_NOTE="" VERSIONS=""

finish() {
    local r
    for r in srv cli; do [ -n "${H[$r]:-}" ] && side_cancel "$r"; done
    pid_alive "$TCPDUMP_PID" && kill -INT "$TCPDUMP_PID"
    device_down
    if ns_exists; then loss_off > /dev/null 2>&1; fi
    if [ "$LAB_STARTED" = 1 ] && [ "$KEEP" != 1 ]; then lab_down > /dev/null 2>&1; fi
    rm -rf "$TMP"
}
trap finish EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# goroce and the C peers, when a selected case needs them
NEED_GOROCE=0 NEED_PEERS=0
for c in "${CASE_LIST[@]}"; do
    IFS=$US read -r _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ ug up _ <<< "$c"
    [ "$ug" = 1 ] && NEED_GOROCE=1
    [ "$up" = 1 ] && NEED_PEERS=1
done
if [ "$NEED_GOROCE" = 1 ]; then
    GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
    t0=$(now)
    rm -f "$GOROCE_BIN" "$HTTPD_BIN"
    if (cd "$SRC" && timeout 600 "$GO" build -o "$GOROCE_BIN" ./cmd/roce &&
        timeout 600 "$GO" build -o "$HTTPD_BIN" ./interop/rsockhttp) > "$OUT/build.log" 2>&1; then
        GOROCE_NOTE="goroce: built $GOROCE_BIN in $(elapsed "$t0") s"
    else
        GOROCE_NOTE="goroce: BUILD FAILED (go build ./cmd/roce; see $OUT/build.log); goroce cases fail"
    fi
    log "$GOROCE_NOTE"
fi
if [ "$NEED_PEERS" = 1 ]; then
    t0=$(now)
    rm -rf "$PEERS_BIN"
    mkdir -p "$PEERS_BIN"
    # in a chroot of the guests' tree, against their rdma-core (build_peers in lib.sh); a lab that
    # cannot be built here skips below, when it is booted
    (build_peers "$PEERS_SRC" "$PEERS_BIN") > "$OUT/peers-build.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        PEERS_OK=1 PEERS_NOTE="peers: built $(cd "$PEERS_BIN" && echo *) for $SUITE in $(elapsed "$t0") s"
    else
        PEERS_NOTE="peers: BUILD FAILED (rc $rc; make -C interop/peers in the $SUITE tree; see $OUT/peers-build.log); the C-peer cases fail"
    fi
    log "$PEERS_NOTE"
fi

# the lab: reuse a running one (and leave it running), or boot one (and stop it at the end). A
# lab of the other release, or one that another checkout set up (its guests run another
# guest/init.sh: without IPv6, say), is stopped and booted again from this one.
t0=$(now)
if lab_current; then
    BOOT_NOTE="lab: reused the running $SUITE lab"
else
    LAB_STARTED=1
    if vm_running 1 || vm_running 2; then
        log "lab: the running lab's guests are another release's or run another checkout's guest/init.sh; booting it again"
        lab_down > /dev/null 2>&1
    fi
    lab_up 2>&1 | tee "$OUT/lab-up.log" >&2
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || exit "$rc" # lab_up printed SKIPPED and the reason
    BOOT_NOTE="lab: $SUITE up in $(elapsed "$t0") s ($(accel_opts | awk '{ print $2 }'); boot $(grep -o 'ready [0-9.]* s' "$OUT/lab-up.log" | awk '{ print $2 }' | paste -sd/ -) s per VM)"
fi
log "$BOOT_NOTE"
loss_off > /dev/null 2>&1 # a reused lab may hold loss rules from an interrupted run
[ -n "${INTEROP_PUSH:-}" ] && { push_files $INTEROP_PUSH || die "INTEROP_PUSH failed"; }
if [ "$PEERS_OK" = 1 ]; then
    # what this release built (a peer that needs a newer rdma-core is not there on bookworm)
    push_files "$PEERS_BIN"/* || { PEERS_OK=0 PEERS_NOTE="peers: could not push them to the guests; the C-peer cases fail"; log "$PEERS_NOTE"; }
fi
VERSIONS=$(vm_run 1 20 'echo "kernel $(uname -r) ($(uname -v | grep -o "Debian [^ ]*"));" $(dpkg-query -W -f "\${Package} \${Version}; " rdma-core perftest)' 2> /dev/null)

# ------------------------------------------------------------------- one side of a case
# side_start ROLE WHERE TIMEOUT CMD: ROLE is srv or cli; WHERE host | vm1 | vm2.
side_start() {
    local r=$1 w=$2 t=$3 c=$4
    W[$r]=$w
    rm -f "$TMP/$r".*
    if [ "$w" = host ]; then
        (
            ip netns exec "$NS" env PATH="$STATE:$PATH" timeout -k 5 "$t" bash -c "$c" > "$TMP/$r.out" 2>&1 7>&- &
            echo $! > "$TMP/$r.pid"
            wait $!
            echo $? > "$TMP/$r.rc.tmp"
            mv "$TMP/$r.rc.tmp" "$TMP/$r.rc"
        ) &
        H[$r]=$!
    else
        H[$r]=$(job_start "${w#vm}" "$t" "$c")
    fi
}
side_done() {
    if [ "${W[$1]}" = host ]; then [ -e "$TMP/$1.rc" ]; else job_done "${W[$1]#vm}" "${H[$1]}"; fi
}
# side_wait ROLE LIMIT: 0 when the side ended within LIMIT seconds.
side_wait() {
    local end=$((SECONDS + $2))
    until side_done "$1"; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.1
    done
}
side_rc() {
    if [ "${W[$1]}" = host ]; then cat "$TMP/$1.rc" 2> /dev/null || echo none
    else cat "$(jobs_dir "${W[$1]#vm}")/${H[$1]}.rc" 2> /dev/null || echo none; fi
}
side_out() {
    if [ "${W[$1]}" = host ]; then cat "$TMP/$1.out" 2> /dev/null; else job_out "${W[$1]#vm}" "${H[$1]}"; fi
}
side_cancel() {
    local p
    if [ "${W[$1]}" = host ]; then
        p=$(cat "$TMP/$1.pid" 2> /dev/null)
        side_done "$1" || { pid_alive "$p" && kill -TERM "$p"; }
    else
        side_done "$1" || job_cancel "${W[$1]#vm}" "${H[$1]}"
    fi
}
# side_end ROLE: stop it if needed (10 s at most), forget it.
side_end() {
    side_cancel "$1"
    side_wait "$1" 10 || echo "warning: ${W[$1]} $1 did not stop" >&2
    if [ "${W[$1]}" = host ]; then wait "${H[$1]}" 2> /dev/null; else job_clean "${W[$1]#vm}" "${H[$1]}"; fi
    H[$1]=""
}

# device_up: the host's goroce device (DEVICE_DIR), running: "roce device" on the lab's host
# addresses, UDP port 4791, in the lab's namespace, and the library it prints (--lib) copied
# beside its socket.
DEVICE_PID=""
device_up() {
    pid_alive "$DEVICE_PID" && return 0
    mkdir -p "$DEVICE_DIR" && chmod 700 "$DEVICE_DIR" || return 1
    local lib
    lib=$(GOROCE_DIR=$DEVICE_DIR "$GOROCE_BIN" device --lib) && cp "$lib" "$DEVICE_DIR/libgoroce.so" || {
        echo "roce device --lib failed"
        return 1
    }
    ip netns exec "$NS" env GOROCE_DIR="$DEVICE_DIR" "$GOROCE_BIN" device --bind "$HOST_IP,$HOST_IP6" \
        > "$DEVICE_DIR/device.log" 2>&1 7>&- &
    DEVICE_PID=$!
    for _ in $(seq 100); do
        [ -S "$DEVICE_DIR/goroce0.sock" ] && { echo "device: $(head -1 "$DEVICE_DIR/device.log")"; return 0; }
        pid_alive "$DEVICE_PID" || break
        sleep 0.1
    done
    echo "device did not start:"
    cat "$DEVICE_DIR/device.log"
    device_down
    return 1
}
# device_down: the host's device stopped, if it runs.
device_down() {
    pid_alive "$DEVICE_PID" || { DEVICE_PID=""; return 0; }
    kill -INT "$DEVICE_PID"
    for _ in $(seq 50); do pid_alive "$DEVICE_PID" || break; sleep 0.1; done
    pid_alive "$DEVICE_PID" && kill -KILL "$DEVICE_PID"
    wait "$DEVICE_PID" 2> /dev/null
    DEVICE_PID=""
    rm -f "$DEVICE_DIR/goroce0.sock"
}

# phase TEXT: a time-stamped line for the case log.
phase() { echo "$(date +%T.%3N) $*" >> "$TMP/phases"; }

# server_ready WAITSPEC: 0 when the server listens (or has had its SECONDS), 1 if it ended or
# did not get there within READY_WAIT.
server_ready() {
    local spec=$1 port end id rc
    end=$((SECONDS + READY_WAIT))
    case $spec in
    tcp:*)
        port=${spec#tcp:}
        if [ "${W[srv]}" = host ]; then
            until [ -n "$(ip netns exec "$NS" ss -ltnH "sport = :$port" 2> /dev/null)" ]; do
                side_done srv && return 1
                [ $SECONDS -ge $end ] && return 1
                sleep 0.1
            done
            return 0
        fi
        id=$(job_start "${W[srv]#vm}" "$READY_WAIT" \
            "for i in \$(seq $((READY_WAIT * 10))); do ss -ltnH 'sport = :$port' | grep -q . && exit 0; sleep 0.1; done; exit 1")
        until job_done "${W[srv]#vm}" "$id"; do
            if side_done srv || [ $SECONDS -ge $((end + 5)) ]; then
                job_cancel "${W[srv]#vm}" "$id"
                return 1
            fi
            sleep 0.1
        done
        rc=$(cat "$(jobs_dir "${W[srv]#vm}")/$id.rc")
        job_clean "${W[srv]#vm}" "$id"
        return "$rc"
        ;;
    *)
        for _ in $(seq $((spec * 10))); do side_done srv && return 1; sleep 0.1; done
        return 0
        ;;
    esac
}

# check_output CHECK ROLE FILE: the VM tool's output shows a completed run.
#   pp:  ibv_*_pingpong's "N bytes in S seconds" and "N iters in S seconds" (both sides)
#   bw:  perftest's result line "#bytes #iterations BW-peak BW-average MsgRate" (both sides)
#   lat: perftest's result line (client; the server's numbers are not measured, so only its
#        "remote address" line, i.e. a completed exchange, is required)
#   perftest prints inf/nan figures when its clock calibration fails ("Correlation coefficient
#   r^2 < 0.9", common under TCG on a busy host); the run itself completed, so that counts.
RESULT_RE='^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+(-?nan|inf|[0-9.]+)){3}'
check_output() {
    local check=$1 role=$2 f=$3
    case $check in
    none) return 0 ;;
    pp) grep -qE '^[0-9]+ bytes in [0-9.]+ seconds' "$f" && grep -qE '^[0-9]+ iters in [0-9.]+ seconds' "$f" ;;
    bw) grep -qE "$RESULT_RE" "$f" ;;
    lat)
        if [ "$role" = client ]; then grep -qE "$RESULT_RE" "$f"
        else grep -q 'remote address' "$f"; fi
        ;;
    *) echo "unknown check $check" >&2; return 1 ;;
    esac
}

rc_text() {
    case $1 in
    0) echo "ok" ;; 124) echo "timed out" ;; 125) echo "cancelled before start" ;;
    126 | 127) echo "rc $1 (command not found or not executable)" ;;
    137) echo "killed" ;; 143) echo "stopped by the harness" ;; none) echo "no answer" ;;
    *) echo "rc $1" ;;
    esac
}

# lab_healthy: both guests answer, rxe0 is ACTIVE, the host end is reachable, no tool is left.
lab_healthy() {
    local n
    for n in $VMS; do
        vm_run "$n" 15 "grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state &&
            ping -c 1 -W 3 $HOST_IP > /dev/null &&
            ! pgrep -lx '(ib_(write|read|send|atomic)_(bw|lat)|ibv_(rc|uc|ud|srq)_pingpong|rping|roce|rstream|rcopy|curl)' " > /dev/null 2>&1 || return 1
    done
}

restart_lab() {
    [ "$RESTARTS" -gt 0 ] || { log "the lab looks broken; no restarts left (INTEROP_RESTARTS)"; return 1; }
    RESTARTS=$((RESTARTS - 1)) RESTARTED=$((RESTARTED + 1))
    log "the lab looks broken; restarting it (${RESTARTS} restarts left)"
    lab_down > /dev/null 2>&1
    LAB_STARTED=1 CUR_MTU=""
    (lab_up) >> "$OUT/lab-up.log" 2>&1 || { log "lab restart failed (see $OUT/lab-up.log)"; return 1; }
}

# run_case RECORD: run one case; sets RES/WHY/DUR for its id and writes its log.
run_case() {
    local id variant mtu loss check expect wait tmo crc cexp sexp sw scmd cw ccmd ug up hm res
    IFS=$US read -r id _ variant mtu loss check expect wait tmo crc cexp sexp sw scmd cw ccmd ug up hm <<< "$1"
    local L="$OUT/logs/${id//\//.}.log" t0 left srv_rc cli_rc why="" ethmtu drops="" r srv_stopped=0
    t0=$(now)
    left=$((BUDGET - (SECONDS - START)))
    if [ "$left" -lt 15 ]; then
        RES[$id]=NR WHY[$id]="not run: time budget (INTEROP_BUDGET=${BUDGET}s) used up" DUR[$id]=0
        return
    fi
    [ "$tmo" -gt $((left - 10)) ] && tmo=$((left - 10))
    if [ "$ug" = 1 ] && [ ! -x "$GOROCE_BIN" ]; then
        RES[$id]=FAIL WHY[$id]="no roce binary (go build ./cmd/roce failed)" DUR[$id]=0
        return
    fi
    if [ "$up" = 1 ] && [ "$PEERS_OK" != 1 ]; then
        RES[$id]=FAIL WHY[$id]="no C peers in the guests (see the peers: line of the matrix)" DUR[$id]=0
        return
    fi
    local ldesc=""
    [ "${loss%r}" != "$loss" ] && ldesc=" (requests only)"
    {
        echo "case    $id"
        echo "mtu     $mtu${hm:+ (host $HOSTIF MTU $hm)}   loss ${loss%r} %${ldesc}   timeout ${tmo}s   check $check ${expect:+expect $expect}${crc:+ client_rc $crc}${cexp:+ cexpect $cexp}${sexp:+ sexpect $sexp}"
        echo "server  $sw: $scmd"
        echo "client  $cw: $ccmd"
    } > "$L"
    ethmtu=1500; [ "$mtu" -gt 1024 ] && ethmtu=9000
    if [ "$CUR_MTU" != "$ethmtu" ]; then
        device_down # the device takes its port's MTU from the link as it starts
        if set_mtu "$ethmtu" >> "$L" 2>&1; then CUR_MTU=$ethmtu; else why="cannot set eth0 MTU $ethmtu"; fi
    fi
    if [ -z "$why" ] && [ -n "$hm" ]; then
        # hostmtu=N: the host's end alone gets MTU N, the guests keep the variant's (ends that
        # disagree); the next case sets both again.
        CUR_MTU=""
        nsip link set "$HOSTIF" mtu "$hm" >> "$L" 2>&1 || why="cannot set $HOSTIF MTU $hm"
    fi
    if [ -z "$why" ] && [ "$loss" != 0 ]; then
        loss_on "$loss" tap1 >> "$L" 2>&1 || why="cannot install the loss rules"
    fi
    if [ -z "$why" ] && [ "$PCAP" = 1 ]; then
        ip netns exec "$NS" timeout -s INT $((tmo + 60)) tcpdump -i "$BR" -n -U -s 0 -c 100000 \
            -w "$OUT/pcap/${id//\//.}.pcap" 'udp port 4791 or tcp portrange 18515-18516' > "$TMP/tcpdump.log" 2>&1 7>&- &
        TCPDUMP_PID=$!
        for r in $(seq 50); do grep -qs listening "$TMP/tcpdump.log" && break; sleep 0.1; done
    fi
    if [ "$sw:$cw" = host:vm1 ] || [ "$sw:$cw" = vm1:host ]; then
        if [[ "$scmd $ccmd" == *"GOROCE_DIR=$DEVICE_DIR "* ]]; then
            [ -z "$why" ] && ! device_up >> "$L" 2>&1 && why="the host's goroce device did not start (see the log)"
        else
            device_down # roce on the host takes the address's UDP port 4791 itself
        fi
    fi
    srv_rc=none cli_rc=none
    if [ -z "$why" ]; then
        : > "$TMP/phases"
        phase "server start"
        side_start srv "$sw" $((tmo + 30)) "$scmd"
        if ! server_ready "$wait"; then
            side_done srv && why="server ended before it was ready ($(rc_text "$(side_rc srv)"))" ||
                why="server not listening after ${READY_WAIT}s"
        else
            phase "server ready; client start"
            side_start cli "$cw" "$tmo" "$ccmd"
            side_wait cli $((tmo + 20)) || true
            cli_rc=$(side_rc cli)
            phase "client end ($(rc_text "$cli_rc"))"
            # a server outlives a failed client only by a moment; a good one gets SERVER_GRACE
            if [ "$cli_rc" = 0 ]; then side_wait srv "$SERVER_GRACE" || true; else side_wait srv 1 || true; fi
        fi
        side_done srv || { srv_stopped=1; side_cancel srv; }
        side_wait srv 10 || true
        srv_rc=$(side_rc srv)
        phase "server end ($(rc_text "$srv_rc"))"
        {
            echo "------- server ($sw) $(rc_text "$srv_rc")"; side_out srv
            if [ -n "${H[cli]:-}" ]; then echo "------- client ($cw) $(rc_text "$cli_rc")"; side_out cli; fi
        } > "$TMP/out" 2>&1
        side_out srv > "$TMP/srv.txt" 2>&1
        [ -n "${H[cli]:-}" ] && side_out cli > "$TMP/cli.txt" 2>&1
        [ -n "${H[cli]:-}" ] && side_end cli
        side_end srv
        cat "$TMP/phases" "$TMP/out" >> "$L"
    fi
    [ "$loss" != 0 ] && drops=$(loss_off 2> /dev/null | awk '{ s += $NF } END { print s + 0 }')
    if pid_alive "$TCPDUMP_PID"; then sleep 0.5; kill -INT "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2> /dev/null; fi
    TCPDUMP_PID=""
    if [ -z "$why" ] && [ -n "$crc" ]; then
        # client_rc=N: the client must fail with N (a refused connection), and the server, which
        # had nothing to do with it, must still be up (the harness stops it) or have ended well.
        [ "$cli_rc" != "$crc" ] && why="client $cw $(rc_text "$cli_rc"), want rc $crc"
        [ "$srv_rc" != 0 ] && [ "$srv_stopped" != 1 ] && why="${why:+$why; }server $sw $(rc_text "$srv_rc")"
    elif [ -z "$why" ]; then
        [ "$cli_rc" != 0 ] && why="client $cw $(rc_text "$cli_rc")"
        [ "$srv_rc" != 0 ] && why="${why:+$why; }server $sw $(rc_text "$srv_rc")"
    fi
    if [ -z "$why" ]; then
        [ "$sw" != host ] && { check_output "$check" server "$TMP/srv.txt" || why="server output: no $check result"; }
        [ "$cw" != host ] && { check_output "$check" client "$TMP/cli.txt" || why="${why:+$why; }client output: no $check result"; }
        if [ -n "$expect" ]; then
            for r in srv cli; do
                [ "${W[$r]:-host}" = host ] && continue
                grep -qE -- "$expect" "$TMP/$r.txt" || why="${why:+$why; }${W[$r]} output lacks /$expect/"
            done
        fi
        # cexpect= and sexpect= may be given more than once (blank-separated here): each must match
        read -ra res <<< "$cexp"
        for r in "${res[@]}"; do
            grep -qE -- "$r" "$TMP/cli.txt" 2> /dev/null || why="${why:+$why; }client $cw output lacks /$r/"
        done
        read -ra res <<< "$sexp"
        for r in "${res[@]}"; do
            grep -qE -- "$r" "$TMP/srv.txt" 2> /dev/null || why="${why:+$why; }server $sw output lacks /$r/"
        done
    fi
    DUR[$id]=$(elapsed "$t0")
    if [ -z "$why" ]; then RES[$id]=PASS WHY[$id]="${drops:+$drops packets dropped}"
    else RES[$id]=FAIL WHY[$id]=$why; fi
    {
        echo "-------"
        echo "result  ${RES[$id]} ${WHY[$id]}"
        echo "time    ${DUR[$id]} s${drops:+   nft drops $drops}"
    } >> "$L"
    # A failed case with a VM side that timed out, had to be killed or did not answer, or a failed
    # rxe <-> rxe case, may have left a guest broken: check, and restart the lab if so.
    local suspect=0
    [ "$sw" != host ] && [[ " 124 137 255 none " == *" $srv_rc "* ]] && suspect=1
    [ "$cw" != host ] && [ -n "${W[cli]:-}" ] && [[ " 124 137 255 none " == *" $cli_rc "* ]] && suspect=1
    [ "$sw" != host ] && [ "$cw" != host ] && suspect=1
    W=() H=()
    if [ "${RES[$id]}" = FAIL ] && [ $suspect = 1 ] && ! lab_healthy; then
        echo "lab unhealthy after this case: restarting it" >> "$L"
        restart_lab
    fi
}

# keep_alive: a guest no case has used for a while (VM2, outside the ref variants) gets a job of
# nothing every two minutes, so that it does not power itself off as idle (VM_IDLE, 900 s) in the
# middle of the run.
KEEPALIVE_AT=0
keep_alive() {
    [ $SECONDS -lt $KEEPALIVE_AT ] && return
    KEEPALIVE_AT=$((SECONDS + 120))
    local v
    for v in 1 2; do vm_ready $v && vm_run $v 10 true > /dev/null 2>&1; done
    return 0
}

# ----------------------------------------------------------------------------- cases
total=${#CASE_LIST[@]}
i=0
for c in "${CASE_LIST[@]}"; do
    i=$((i + 1))
    keep_alive
    id=${c%%"$US"*}
    if ! vm_ready 1 || ! vm_ready 2; then
        RES[$id]=NR WHY[$id]="not run: the lab is down" DUR[$id]=0
    else
        run_case "$c"
        # A failed reference case (a VM tool against a VM tool: no goroce in it) runs once more.
        # It checks the lab, and the tools fail rarely on their own: perftest's rdma_cm client
        # has crashed (SIGSEGV) retrying a data connection the server was not yet listening for.
        # Both runs' logs are kept and the cell says what the first run did.
        IFS=$US read -r _ _ _ _ _ _ _ _ _ _ _ _ sw _ cw _ <<< "$c"
        if [ "${RES[$id]}" = FAIL ] && [ "$sw" != host ] && [ "$cw" != host ] && vm_ready 1 && vm_ready 2; then
            first=${WHY[$id]} log="$OUT/logs/${id//\//.}"
            mv "$log.log" "$log.first.log"
            run_case "$c"
            WHY[$id]="${WHY[$id]:+${WHY[$id]}; }second run; the first: $first (logs/${id//\//.}.first.log)"
        fi
    fi
    r=${RES[$id]}
    [ "$r" = NR ] && r=n/r
    printf '%s [%3d/%d] %-29s %-4s %6ss  %s\n' "$(date +%T)" "$i" "$total" "$id" "$r" "${DUR[$id]}" "${WHY[$id]}" >&2
    printf '%s\t%s\t%s\t%s\n' "$id" "${RES[$id]}" "${DUR[$id]}" "${WHY[$id]}" >> "$OUT/results.tsv"
done

# ---------------------------------------------------------------------------- the matrix
npass=0 nfail=0 nnr=0
for c in "${CASE_LIST[@]}"; do
    case ${RES[${c%%"$US"*}]} in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; *) nnr=$((nnr + 1)) ;; esac
done
{
    echo "goroce interop matrix  $(date -u +%FT%TZ)  commit $(git -C "$SRC" rev-parse --short HEAD 2> /dev/null || echo '?')  guests $SUITE"
    [ "$VARIANTS_RE" != . ] && echo "variants: $VARIANTS_RE (INTEROP_VARIANTS=all for every one)"
    echo "$BOOT_NOTE"
    [ "$RESTARTED" -gt 0 ] && echo "lab: restarted $RESTARTED time(s) after a case left a guest broken (see the case logs)"
    [ -n "$GOROCE_NOTE" ] && echo "$GOROCE_NOTE"
    [ -n "$PEERS_NOTE" ] && echo "$PEERS_NOTE"
    echo "guests: ${VERSIONS:-?}"
    echo "loss: $LOSS % of UDP/4791 each way on VM1's port; per-case client limit ${DEF_TMO} s unless set"
    echo
    echo "columns: ref-* = rxe in VM1 (server) <-> rxe in VM2 (client); cli-* = goroce on the host is the"
    echo "client of the VM1 tool; srv-* = goroce is the server and the VM1 tool connects to $HOST_IP;"
    echo "udp/afp = goroce --transport udp|afpacket; 1024/4096 = path MTU; loss = with loss, MTU 1024;"
    echo "ref6, udp6, afp6 = the same over IPv6 ($HOST_IP6, the guests' 2001:db8::1N and GID index $GID6_INDEX)."
    echo "cells: PASS, FAIL, n/r = not run, . = no such case"
    echo
    printf '%-14s' tool
    for v in "${VCOLS[@]}"; do printf ' %-13s' "$v"; done
    echo
    for t in "${TOOLS[@]}"; do
        printf '%-14s' "$t"
        for v in "${VCOLS[@]}"; do
            r=${RES[$t/$v]:-.}
            [ "$r" = NR ] && r=n/r
            printf ' %-13s' "$r"
        done
        echo
    done
    echo
    printf '%-29s %-4s %7s  %s\n' case result seconds "reason / log: $OUT/logs/CASE.log"
    for c in "${CASE_LIST[@]}"; do
        id=${c%%"$US"*}
        r=${RES[$id]}
        [ "$r" = NR ] && r=n/r
        printf '%-29s %-4s %7s  %s\n' "$id" "$r" "${DUR[$id]}" "${WHY[$id]}"
    done
    echo
    echo "whole run: $(elapsed "$RUN_T0") s"
    echo "$SUITE: $npass passed, $((nfail + nnr)) failed"
} > "$OUT/matrix.txt"
cat "$OUT/matrix.txt"
[ $((nfail + nnr)) = 0 ]
