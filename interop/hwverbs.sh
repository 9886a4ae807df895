#!/bin/bash
# hwverbs (goroce's libibverbs backend, cgo) against the Linux kernel's soft-RoCE in the lab VMs:
#   suite  the hwverbs package's tests, rocetest.EveryOperation included (the same test body the
#          pure-Go engine runs), built on the host with -tags hwverbs and run in VM1 on rxe0
#   race   the same built with -race (GODEBUG=cgocheck=1) and with GOEXPERIMENT=cgocheck2
#   cross  TestCross, every RC operation both ways between two processes with their own backend:
#          hw (VM1) <-> hw (VM2); soft (goroce's engine on the host, 198.18.0.1) <-> hw (VM1,
#          listening); hw (VM2) <-> soft (host, listening); then TestCrossMW between the same
#          pairs: memory windows each side binds and the other reaches, invalidated by the
#          peer's SEND_WITH_INV and by LOCAL_INV, and accesses after it (or out of the window,
#          or through a type 2 window on another QP) refused
#   cm     rdma_cm through librdmacm (package hwverbs/rdmacm): its suite in VM1 (against VM1's
#          own rping in both roles, a REJ, a refused and an unreachable Dial, Close while WRITEs
#          stream), then TestCrossCM over rdma_cm: hw VM1 listening <- hw VM2; soft (goroce's cm
#          on the host) listening <- hw VM1; hw VM2 listening <- soft host
#
#   interop/hwverbs.sh [-k] [all|suite|race|cross|cm]     (default: all)
# all runs suite, race, cross and cm; suite and race run both packages' suites.
# HWV_RUN=REGEXP runs only the suites' tests it matches (go test -run), for a quicker look;
# HWV_CROSS=REGEXP the cross tests it matches (default ^TestCross: TestCross and TestCrossMW).
# Needs root, cgo, libibverbs-dev and librdmacm-dev on the host (installed with apt-get when
# missing). Reuses a running lab and leaves it up; otherwise boots one and stops it at the end
# (unless -k). Exit: 0 all passed, 1 a test failed, 77 the lab cannot run here.
source "$(dirname "$0")/lib.sh"

KEEP=0
[ "${1:-}" = -k ] && { KEEP=1; shift; }
WHAT="${1:-all}"
case $WHAT in all | suite | race | cross | cm) ;; *) sed -n '2,22s/^# \{0,1\}//p' "$0"; exit 2 ;; esac
PORT="${HWV_PORT:-18600}"
XRUN="${HWV_CROSS:-^TestCross}"
RUNF=""
[ -n "${HWV_RUN:-}" ] && RUNF="-test.run '$HWV_RUN'"

need_root
if ! [ -e /usr/include/infiniband/verbs.h ] || ! [ -e /usr/include/rdma/rdma_cma.h ]; then
    apt-get install -y -q --no-install-recommends libibverbs-dev librdmacm-dev > /dev/null 2>&1 ||
        { apt-get update -q > /dev/null 2>&1 &&
            apt-get install -y -q --no-install-recommends libibverbs-dev librdmacm-dev > /dev/null; } ||
        skip "libibverbs-dev or librdmacm-dev cannot be installed (needed to build hwverbs)"
fi
mkdir -p "$STATE"
exec 7> "$STATE/run.lock"
flock -n 7 || skip "another interop run is using the lab ($STATE/run.lock)"
OUT="$STATE/hwverbs/$SUITE"
rm -rf "$OUT"
mkdir -p "$OUT"
LAB_STARTED=0
finish() { if [ "$LAB_STARTED" = 1 ] && [ "$KEEP" != 1 ]; then lab_down > /dev/null 2>&1; fi; }
trap finish EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
build() { # output-name go-test-flags...: hwverbs's test binary NAME and rdmacm's NAME-cm
    local o=$1
    shift
    (cd "$SRC" && CGO_ENABLED=1 timeout 600 "$GO" test -c -tags hwverbs "$@" -o "$OUT/$o" ./hwverbs) || die "build $o failed"
    (cd "$SRC" && CGO_ENABLED=1 timeout 600 "$GO" test -c -tags hwverbs "$@" -o "$OUT/${o%.test}-cm.test" ./hwverbs/rdmacm) ||
        die "build ${o%.test}-cm.test failed"
}
UNREACH="$NET_PREFIX.99" # no host holds it: ARP goes unanswered
if lab_ready; then
    log "lab: reusing the running lab"
else
    LAB_STARTED=1
    lab_up >&2 || exit $?
fi
set_mtu 1500 > /dev/null || die "cannot set the guests' MTU"

fail=0
step() { # name command...
    local name=$1
    shift
    echo "=== $name"
    if "$@"; then echo "--- ok: $name"; else echo "--- FAIL: $name"; fail=1; fi
}

build hwverbs.test
push_files "$OUT/hwverbs.test" "$OUT/hwverbs-cm.test" || die "cannot copy into the guests"
CMFLAGS="-rdmacm.unreachable $UNREACH"
if [ "$WHAT" = all ] || [ "$WHAT" = suite ]; then
    step "suite in VM1 (rxe0)" vm_run 1 500 \
        'cd /tmp && GODEBUG=cgocheck=1 hwverbs.test -test.v -test.count 1 -test.timeout 480s '"$RUNF"' 2>&1 | grep -v "^=== RUN"; exit ${PIPESTATUS[0]}'
fi
if [ "$WHAT" = all ] || [ "$WHAT" = suite ] || [ "$WHAT" = cm ]; then
    step "rdmacm suite in VM1 (rxe0, rping)" vm_run 1 300 \
        "cd /tmp && GODEBUG=cgocheck=1 hwverbs-cm.test -test.v -test.count 1 -test.timeout 240s $CMFLAGS $RUNF 2>&1 | grep -v '^=== RUN'; exit \${PIPESTATUS[0]}"
fi
if [ "$WHAT" = all ] || [ "$WHAT" = race ]; then
    build hwverbs-race.test -race
    GOEXPERIMENT=cgocheck2 build hwverbs-cgocheck2.test
    push_files "$OUT/hwverbs-race.test" "$OUT/hwverbs-cgocheck2.test" "$OUT/hwverbs-race-cm.test" \
        "$OUT/hwverbs-cgocheck2-cm.test" || die "cannot copy into the guests"
    step "suite with -race in VM1" vm_run 1 500 \
        'cd /tmp && GODEBUG=cgocheck=1 hwverbs-race.test -test.count 1 -test.timeout 480s 2>&1 | tail -20; exit ${PIPESTATUS[0]}'
    step "suite with cgocheck2 in VM1" vm_run 1 500 \
        'cd /tmp && hwverbs-cgocheck2.test -test.count 1 -test.timeout 480s 2>&1 | tail -20; exit ${PIPESTATUS[0]}'
    step "rdmacm suite with -race in VM1" vm_run 1 300 \
        "cd /tmp && GODEBUG=cgocheck=1 hwverbs-race-cm.test -test.count 1 -test.timeout 240s $CMFLAGS 2>&1 | tail -20; exit \${PIPESTATUS[0]}"
    step "rdmacm suite with cgocheck2 in VM1" vm_run 1 300 \
        "cd /tmp && hwverbs-cgocheck2-cm.test -test.count 1 -test.timeout 240s $CMFLAGS 2>&1 | tail -20; exit \${PIPESTATUS[0]}"
fi
vm1_result() { # wait VM1's job $1 and print it
    local rc
    job_wait 1 "$1" 260
    rc=$?
    echo "--- VM1 side:"
    job_out 1 "$1"
    job_clean 1 "$1"
    return $rc
}
if [ "$WHAT" = all ] || [ "$WHAT" = cross ]; then
    T="hwverbs.test -test.v -test.run '$XRUN' -cross.wait 90s"
    vm1_listens() { # job id of VM1's listening side on port $1
        job_start 1 240 "cd /tmp && $T -cross.role hw -cross.listen $(vm_ip 1):$1 2>&1"
    }
    cross_vm_vm() {
        local j rc
        j=$(vm1_listens "$PORT")
        vm_run 2 240 "cd /tmp && $T -cross.role hw -cross.peer $(vm_ip 1):$PORT 2>&1"
        rc=$?
        vm1_result "$j" || rc=1
        return $rc
    }
    cross_host_vm() {
        local j rc
        j=$(vm1_listens $((PORT + 1)))
        timeout 210 ip netns exec "$NS" "$OUT/hwverbs.test" -test.v -test.run "$XRUN" -cross.role soft \
            -cross.addr "$HOST_IP" -cross.peer "$(vm_ip 1):$((PORT + 1))"
        rc=$?
        vm1_result "$j" || rc=1
        return $rc
    }
    cross_vm_host() {
        local pid rc
        timeout 210 ip netns exec "$NS" "$OUT/hwverbs.test" -test.v -test.run "$XRUN" -cross.role soft \
            -cross.addr "$HOST_IP" -cross.listen "$HOST_IP:$((PORT + 2))" > "$OUT/host.txt" 2>&1 &
        pid=$!
        vm_run 2 240 "cd /tmp && $T -cross.role hw -cross.peer $HOST_IP:$((PORT + 2)) 2>&1"
        rc=$?
        wait "$pid" || rc=1
        echo "--- host side:"
        cat "$OUT/host.txt"
        return $rc
    }
    step "cross hw VM1 <-> hw VM2" cross_vm_vm
    step "cross soft host <-> hw VM1 (VM1 listens)" cross_host_vm
    step "cross hw VM2 <-> soft host (host listens)" cross_vm_host
fi
if [ "$WHAT" = all ] || [ "$WHAT" = cm ]; then
    # TestCrossCM: the listener on an rdma_cm port, the dialler retrying until it is up.
    C='hwverbs-cm.test -test.v -test.run ^TestCrossCM$ -cm.wait 90s'
    CMPORT=$((PORT + 10))
    cm_vm_vm() {
        local j rc
        j=$(job_start 1 150 "cd /tmp && $C -cm.role hw -cm.listen $(vm_ip 1):$CMPORT 2>&1")
        vm_run 2 150 "cd /tmp && $C -cm.role hw -cm.peer $(vm_ip 1):$CMPORT 2>&1"
        rc=$?
        vm1_result "$j" || rc=1
        return $rc
    }
    cm_vm_host() { # VM1 dials the host's goroce cm
        local pid rc
        timeout 120 ip netns exec "$NS" "$OUT/hwverbs-cm.test" -test.v -test.run '^TestCrossCM$' -cm.role soft \
            -cm.addr "$HOST_IP" -cm.listen "$HOST_IP:$((CMPORT + 1))" > "$OUT/host-cm.txt" 2>&1 &
        pid=$!
        vm_run 1 150 "cd /tmp && $C -cm.role hw -cm.peer $HOST_IP:$((CMPORT + 1)) 2>&1"
        rc=$?
        wait "$pid" || rc=1
        echo "--- host side:"
        cat "$OUT/host-cm.txt"
        return $rc
    }
    cm_host_vm() { # the host's goroce cm dials VM2
        local j rc
        j=$(job_start 2 150 "cd /tmp && $C -cm.role hw -cm.listen $(vm_ip 2):$((CMPORT + 2)) 2>&1")
        timeout 120 ip netns exec "$NS" "$OUT/hwverbs-cm.test" -test.v -test.run '^TestCrossCM$' -cm.role soft \
            -cm.addr "$HOST_IP" -cm.peer "$(vm_ip 2):$((CMPORT + 2))"
        rc=$?
        job_wait 2 "$j" 170 || rc=1
        echo "--- VM2 side:"
        job_out 2 "$j"
        job_clean 2 "$j"
        return $rc
    }
    step "rdma_cm hw VM2 -> hw VM1 (librdmacm both)" cm_vm_vm
    step "rdma_cm hw VM1 -> soft host (librdmacm dials goroce's cm)" cm_vm_host
    step "rdma_cm soft host -> hw VM2 (goroce's cm dials librdmacm)" cm_host_vm
fi
if [ $fail = 0 ]; then echo "PASS: hwverbs in the lab ($WHAT)"; else echo "FAIL: hwverbs in the lab ($WHAT)"; fi
exit $fail
