#!/bin/bash
# hwverbs (goroce's libibverbs backend, cgo) against the Linux kernel's soft-RoCE in the lab VMs:
#   suite  the hwverbs package's tests, rocetest.EveryOperation included (the same test body the
#          pure-Go engine runs), built on the host with -tags hwverbs and run in VM1 on rxe0
#   race   the same built with -race (GODEBUG=cgocheck=1) and with GOEXPERIMENT=cgocheck2
#   cross  TestCross, every RC operation both ways between two processes with their own backend:
#          hw (VM1) <-> hw (VM2); soft (goroce's engine on the host, 198.18.0.1) <-> hw (VM1,
#          listening); hw (VM2) <-> soft (host, listening)
#
#   interop/hwverbs.sh [-k] [all|suite|race|cross]     (default: all)
# Needs root, cgo and libibverbs-dev on the host (installed with apt-get when missing). Reuses a
# running lab and leaves it up; otherwise boots one and stops it at the end (unless -k).
# Exit: 0 all passed, 1 a test failed, 77 the lab cannot run here.
source "$(dirname "$0")/lib.sh"

KEEP=0
[ "${1:-}" = -k ] && { KEEP=1; shift; }
WHAT="${1:-all}"
case $WHAT in all | suite | race | cross) ;; *) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 2 ;; esac
PORT="${HWV_PORT:-18600}"

need_root
if ! [ -e /usr/include/infiniband/verbs.h ]; then
    apt-get install -y -q --no-install-recommends libibverbs-dev > /dev/null 2>&1 ||
        { apt-get update -q > /dev/null 2>&1 && apt-get install -y -q --no-install-recommends libibverbs-dev > /dev/null; } ||
        skip "libibverbs-dev cannot be installed (needed to build hwverbs)"
fi
mkdir -p "$STATE"
exec 7> "$STATE/run.lock"
flock -n 7 || skip "another interop run is using the lab ($STATE/run.lock)"
OUT="$STATE/hwverbs"
rm -rf "$OUT"
mkdir -p "$OUT"
LAB_STARTED=0
finish() { if [ "$LAB_STARTED" = 1 ] && [ "$KEEP" != 1 ]; then lab_down > /dev/null 2>&1; fi; }
trap finish EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
build() { # output-name go-test-flags...: a test binary, copied into both guests' /lab/bin
    local o=$1
    shift
    (cd "$SRC" && CGO_ENABLED=1 timeout 600 "$GO" test -c -tags hwverbs "$@" -o "$OUT/$o" ./hwverbs) || die "build $o failed"
}
if vm_ready 1 && vm_ready 2 && ns_exists; then
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
push_files "$OUT/hwverbs.test" || die "cannot copy into the guests"
if [ "$WHAT" = all ] || [ "$WHAT" = suite ]; then
    step "suite in VM1 (rxe0)" vm_run 1 500 \
        'cd /tmp && GODEBUG=cgocheck=1 hwverbs.test -test.v -test.count 1 -test.timeout 480s 2>&1 | grep -v "^=== RUN"; exit ${PIPESTATUS[0]}'
fi
if [ "$WHAT" = all ] || [ "$WHAT" = race ]; then
    build hwverbs-race.test -race
    GOEXPERIMENT=cgocheck2 build hwverbs-cgocheck2.test
    push_files "$OUT/hwverbs-race.test" "$OUT/hwverbs-cgocheck2.test" || die "cannot copy into the guests"
    step "suite with -race in VM1" vm_run 1 500 \
        'cd /tmp && GODEBUG=cgocheck=1 hwverbs-race.test -test.count 1 -test.timeout 480s 2>&1 | tail -20; exit ${PIPESTATUS[0]}'
    step "suite with cgocheck2 in VM1" vm_run 1 500 \
        'cd /tmp && hwverbs-cgocheck2.test -test.count 1 -test.timeout 480s 2>&1 | tail -20; exit ${PIPESTATUS[0]}'
fi
if [ "$WHAT" = all ] || [ "$WHAT" = cross ]; then
    T='hwverbs.test -test.v -test.run ^TestCross$ -cross.wait 90s'
    vm1_listens() { # job id of VM1's listening side on port $1
        job_start 1 150 "cd /tmp && $T -cross.role hw -cross.listen $(vm_ip 1):$1 2>&1"
    }
    vm1_result() { # wait VM1's job $1 and print it
        local rc
        job_wait 1 "$1" 170
        rc=$?
        echo "--- VM1 side:"
        job_out 1 "$1"
        job_clean 1 "$1"
        return $rc
    }
    cross_vm_vm() {
        local j rc
        j=$(vm1_listens "$PORT")
        vm_run 2 150 "cd /tmp && $T -cross.role hw -cross.peer $(vm_ip 1):$PORT 2>&1"
        rc=$?
        vm1_result "$j" || rc=1
        return $rc
    }
    cross_host_vm() {
        local j rc
        j=$(vm1_listens $((PORT + 1)))
        timeout 120 ip netns exec "$NS" "$OUT/hwverbs.test" -test.v -test.run '^TestCross$' -cross.role soft \
            -cross.addr "$HOST_IP" -cross.peer "$(vm_ip 1):$((PORT + 1))"
        rc=$?
        vm1_result "$j" || rc=1
        return $rc
    }
    cross_vm_host() {
        local pid rc
        timeout 120 ip netns exec "$NS" "$OUT/hwverbs.test" -test.v -test.run '^TestCross$' -cross.role soft \
            -cross.addr "$HOST_IP" -cross.listen "$HOST_IP:$((PORT + 2))" > "$OUT/host.txt" 2>&1 &
        pid=$!
        vm_run 2 150 "cd /tmp && $T -cross.role hw -cross.peer $HOST_IP:$((PORT + 2)) 2>&1"
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
if [ $fail = 0 ]; then echo "PASS: hwverbs in the lab ($WHAT)"; else echo "FAIL: hwverbs in the lab ($WHAT)"; fi
exit $fail
