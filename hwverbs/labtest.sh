#!/bin/bash
# Runs hwverbs against the Linux kernel's soft-RoCE (rxe) in the rxe lab VMs.
#
#   hwverbs/labtest.sh [all|suite|race|cross]    (default: all)
#     suite  the package's tests, rocetest.EveryOperation included, in VM1 on rxe0
#     race   the same, built with -race, GODEBUG=cgocheck=1, and with GOEXPERIMENT=cgocheck2
#     cross  TestCross: every RC operation both ways between two processes, each with its own
#            backend: hw (VM1) <-> hw (VM2); soft (goroce's engine on the host, 198.18.0.1 in
#            netns rxelab) <-> hw (VM1, which listens); soft (host listens) <-> hw (VM2)
# Needs root (ip netns exec), cgo and libibverbs-dev on the host, and a running lab:
#   (cd "$LAB" && ./up.sh)       ... and ./down.sh when done.
# Environment: LAB (default ../shared/lab from the repository root), RXELAB_DIR
# (/var/tmp/rxelab), RXELAB_NS (rxelab), GO (go), HWV_PORT (first TCP port of the exchange, 18600).
# Exit status: 0 all passed, 1 a test failed, 77 the lab is not running.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LAB="${LAB:-$(cd "$ROOT/.." && pwd)/shared/lab}"
STATE="${RXELAB_DIR:-/var/tmp/rxelab}"
NS="${RXELAB_NS:-rxelab}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
PORT="${HWV_PORT:-18600}"
WHAT="${1:-all}"
OUT="$(mktemp -d /tmp/hwverbs-lab.XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
fail=0

for vm in 1 2; do
    [ -e "$STATE/run/vm$vm/share/ready" ] || { echo "SKIP: lab VM$vm is not running (cd $LAB && ./up.sh)"; exit 77; }
done
build() { # output-name go-test-flags...
    local o=$1; shift
    (cd "$ROOT" && "$GO" test -c -tags hwverbs "$@" -o "$OUT/$o" ./hwverbs) || { echo "FAIL: build $o"; exit 1; }
    for vm in 1 2; do cp "$OUT/$o" "$STATE/run/vm$vm/share/$o"; done
}
step() { # name command...
    local name=$1; shift
    echo "=== $name"
    if "$@"; then echo "--- ok: $name"; else echo "--- FAIL: $name"; fail=1; fi
}

build hwverbs.test
if [ "$WHAT" = all ] || [ "$WHAT" = suite ]; then
    step "suite in VM1 (rxe0)" "$LAB/run.sh" -t 500 1 \
        'cd /tmp && GODEBUG=cgocheck=1 /lab/hwverbs.test -test.v -test.count 1 -test.timeout 480s 2>&1 | grep -v "^=== RUN"; exit ${PIPESTATUS[0]}'
fi
if [ "$WHAT" = all ] || [ "$WHAT" = race ]; then
    build hwverbs-race.test -race
    GOEXPERIMENT=cgocheck2 build hwverbs-cgocheck2.test
    step "suite with -race in VM1" "$LAB/run.sh" -t 500 1 \
        'cd /tmp && GODEBUG=cgocheck=1 /lab/hwverbs-race.test -test.count 1 -test.timeout 480s 2>&1 | tail -20; exit ${PIPESTATUS[0]}'
    step "suite with cgocheck2 in VM1" "$LAB/run.sh" -t 500 1 \
        'cd /tmp && /lab/hwverbs-cgocheck2.test -test.count 1 -test.timeout 480s 2>&1 | tail -20; exit ${PIPESTATUS[0]}'
fi
if [ "$WHAT" = all ] || [ "$WHAT" = cross ]; then
    T='/lab/hwverbs.test -test.v -test.run ^TestCross$ -cross.wait 90s'
    cross_vm_vm() {
        local j rc
        j=$("$LAB/run.sh" -b -t 150 1 "cd /tmp && $T -cross.role hw -cross.listen 198.18.0.11:$PORT 2>&1")
        "$LAB/run.sh" -t 150 2 "cd /tmp && $T -cross.role hw -cross.peer 198.18.0.11:$PORT 2>&1"; rc=$?
        echo "--- VM1 side:"; "$LAB/run.sh" -w "$j" 1 || rc=1
        return $rc
    }
    cross_host_vm() {
        local j rc
        j=$("$LAB/run.sh" -b -t 150 1 "cd /tmp && $T -cross.role hw -cross.listen 198.18.0.11:$((PORT + 1)) 2>&1")
        timeout 120 ip netns exec "$NS" "$OUT/hwverbs.test" -test.v -test.run '^TestCross$' -cross.role soft \
            -cross.addr 198.18.0.1 -cross.peer "198.18.0.11:$((PORT + 1))"; rc=$?
        echo "--- VM1 side:"; "$LAB/run.sh" -w "$j" 1 || rc=1
        return $rc
    }
    cross_vm_host() {
        local pid rc
        timeout 120 ip netns exec "$NS" "$OUT/hwverbs.test" -test.v -test.run '^TestCross$' -cross.role soft \
            -cross.addr 198.18.0.1 -cross.listen "198.18.0.1:$((PORT + 2))" > "$OUT/host.txt" 2>&1 &
        pid=$!
        "$LAB/run.sh" -t 150 2 "cd /tmp && $T -cross.role hw -cross.peer 198.18.0.1:$((PORT + 2)) 2>&1"; rc=$?
        wait "$pid" || rc=1
        echo "--- host side:"; cat "$OUT/host.txt"
        return $rc
    }
    step "cross hw VM1 <-> hw VM2" cross_vm_vm
    step "cross soft host <-> hw VM1 (VM1 listens)" cross_host_vm
    step "cross hw VM2 <-> soft host (host listens)" cross_vm_host
fi
[ $fail = 0 ] && echo "PASS: hwverbs lab ($WHAT)" || echo "FAIL: hwverbs lab ($WHAT)"
exit $fail
