package hwverbs

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestOpenExplains checks that a build or host without RDMA says what to
// do: without the backend, what to install and how to build; with it but
// without a device, how to get one.
func TestOpenExplains(t *testing.T) {
	names, derr := Devices()
	d, err := Open("", nil)
	if err == nil {
		d.Close()
		if !Built {
			t.Fatal("Open worked in a build without the backend")
		}
		t.Skipf("this host has RDMA devices %v", names)
	}
	if !Built {
		if !errors.Is(err, ErrNotBuilt) || !errors.Is(derr, ErrNotBuilt) {
			t.Fatalf("Open: %v; Devices: %v; want ErrNotBuilt", err, derr)
		}
		for _, want := range []string{"libibverbs-dev", "rdma-core", "go build -tags hwverbs"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
		return
	}
	if derr != nil || len(names) != 0 {
		t.Skipf("Devices: %v %v", names, derr)
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open without a device: %v, want ErrNoDevice", err)
	}
	for _, want := range []string{"rdma-core", "rdma link add"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if _, err := Open("mlx5_7", nil); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open(mlx5_7): %v", err)
	}
}

// negENOMEM is -ENOMEM as a provider that returns -errno gives it.
var negENOMEM = syscall.Errno(uintptr(minusOne) * uintptr(syscall.ENOMEM))

var minusOne = -1

func TestErrorMapping(t *testing.T) {
	for _, c := range []struct {
		op    string
		errno syscall.Errno
		kind  error
	}{
		{"ibv_post_send", syscall.ENOMEM, verbs.ErrQueueFull},
		{"ibv_post_send", negENOMEM, verbs.ErrQueueFull},
		{"ibv_post_recv", syscall.EINVAL, verbs.ErrInvalidWR},
		{"ibv_post_srq_recv", syscall.ENOMEM, verbs.ErrQueueFull},
		{"ibv_dealloc_pd", syscall.EBUSY, verbs.ErrBusy},
		{"ibv_destroy_cq", syscall.EBUSY, verbs.ErrBusy},
		{"ibv_create_qp", syscall.EINVAL, verbs.ErrInvalidCap},
		{"ibv_modify_qp", syscall.EINVAL, verbs.ErrInvalidAttr},
		{"ibv_create_qp", syscall.ENOMEM, nil},
		{"ibv_reg_mr", syscall.EFAULT, nil},
		{"ibv_dereg_mr", syscall.EINVAL, verbs.ErrBusy},
		{"ibv_bind_mw", syscall.EPERM, verbs.ErrInvalidWR},
		{"ibv_alloc_mw", syscall.EOPNOTSUPP, ErrUnsupported},
		{"ibv_open_device", 0, nil},
	} {
		t.Run(c.op+"/"+c.errno.Error(), func(t *testing.T) {
			err := error(errnoError(c.op, c.errno))
			want := c.errno
			if want == negENOMEM {
				want = syscall.ENOMEM
			}
			if want == 0 {
				want = syscall.EIO
			}
			if !errors.Is(err, want) {
				t.Errorf("%v is not %v", err, want)
			}
			if c.kind != nil && !errors.Is(err, c.kind) {
				t.Errorf("%v is not %v", err, c.kind)
			}
			if c.kind == nil && errors.Is(err, verbs.ErrInvalidAttr) {
				t.Errorf("%v maps to a sentinel", err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Op != c.op || !strings.Contains(err.Error(), c.op) {
				t.Errorf("%v: not an *Error naming %s", err, c.op)
			}
		})
	}
}

func gid(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func TestChooseGID(t *testing.T) {
	rxe := []gidEntry{
		{index: 0, gid: gid("fe80::5054:ff:fe18:b"), roce2: true},
		{index: 1, gid: gid("::ffff:198.18.0.11"), roce2: true},
	}
	mlx := []gidEntry{
		{index: 0, gid: gid("fe80::1")},
		{index: 1, gid: gid("fe80::1"), roce2: true},
		{index: 2, gid: gid("::ffff:10.0.0.1")},
		{index: 3, gid: gid("::ffff:10.0.0.1"), roce2: true},
		{index: 4, gid: gid("2001:db8::1"), roce2: true},
	}
	v6 := []gidEntry{
		{index: 0, gid: gid("fe80::1")},
		{index: 1, gid: gid("fe80::1"), roce2: true},
		{index: 2},
	}
	for _, c := range []struct {
		name    string
		entries []gidEntry
		cfg     Config
		want    int
		err     error
	}{
		{"rxe", rxe, Config{}, 1, nil},
		{"mlx prefers IPv4 RoCEv2", mlx, Config{}, 3, nil},
		{"IPv6 only prefers RoCEv2", v6, Config{}, 1, nil},
		{"index given", mlx, Config{GIDIndex: 4}, 4, nil},
		{"index empty", v6, Config{GIDIndex: 2}, 2, nil},
		{"index absent", rxe, Config{GIDIndex: 7}, 0, ErrNoGID},
		{"address", mlx, Config{GIDAddr: netip.MustParseAddr("2001:db8::1")}, 4, nil},
		{"IPv4 address", rxe, Config{GIDAddr: netip.MustParseAddr("198.18.0.11")}, 1, nil},
		{"link-local address", rxe, Config{GIDAddr: netip.MustParseAddr("fe80::5054:ff:fe18:b")}, 0, nil},
		{"address absent", rxe, Config{GIDAddr: netip.MustParseAddr("198.18.0.12")}, 0, ErrNoGID},
		{"empty table", nil, Config{}, 0, ErrNoGID},
		{"only zero GIDs", []gidEntry{{index: 0}}, Config{}, 0, ErrNoGID},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := chooseGID(c.entries, &c.cfg)
			if !errors.Is(err, c.err) || err == nil && got != c.want {
				t.Fatalf("chooseGID = %d, %v; want %d, %v", got, err, c.want, c.err)
			}
		})
	}
}

func TestGIDIndexMapping(t *testing.T) {
	for _, c := range []struct{ verbs, chosen, table int }{
		{0, 1, 1}, {1, 1, 1}, {2, 1, 2}, {0, 3, 3}, {3, 3, 3}, {0, 0, 0}, {5, 0, 5},
	} {
		if got := tableIndex(c.verbs, c.chosen); got != c.table {
			t.Errorf("tableIndex(%d, chosen %d) = %d, want %d", c.verbs, c.chosen, got, c.table)
		}
		back := verbsIndex(c.table, c.chosen)
		if tableIndex(back, c.chosen) != c.table {
			t.Errorf("verbsIndex(%d, chosen %d) = %d does not map back", c.table, c.chosen, back)
		}
	}
	if verbsIndex(1, 1) != 0 {
		t.Error("the chosen entry is not reported as index 0")
	}
}

func TestClassifyModify(t *testing.T) {
	const (
		init = verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
		rtr  = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
			verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer
		rts = verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
			verbs.AttrMaxQPRDAtomic
	)
	for _, c := range []struct {
		name      string
		typ       verbs.QPType
		cur, next verbs.QPState
		mask      verbs.AttrMask
		want      error
	}{
		{"RC init ok", verbs.RC, verbs.StateReset, verbs.StateInit, init, nil},
		{"RC reset to RTS", verbs.RC, verbs.StateReset, verbs.StateRTS, rts, verbs.ErrInvalidTransition},
		{"RC init without port", verbs.RC, verbs.StateReset, verbs.StateInit, init &^ verbs.AttrPort, verbs.ErrMissingAttr},
		{"UD init with access", verbs.UD, verbs.StateReset, verbs.StateInit, init | verbs.AttrQKey, verbs.ErrExtraAttr},
		{"UD init ok", verbs.UD, verbs.StateReset, verbs.StateInit,
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey, nil},
		{"RC RTR ok", verbs.RC, verbs.StateInit, verbs.StateRTR, rtr, nil},
		{"RC RTR without AV", verbs.RC, verbs.StateInit, verbs.StateRTR, rtr &^ verbs.AttrAV, verbs.ErrMissingAttr},
		{"UC RTR with RNR timer", verbs.UC, verbs.StateInit, verbs.StateRTR, rtr, verbs.ErrExtraAttr},
		{"UD RTR", verbs.UD, verbs.StateInit, verbs.StateRTR, verbs.AttrState, nil},
		{"RC RTS ok", verbs.RC, verbs.StateRTR, verbs.StateRTS, rts, nil},
		{"RC RTS without timeout", verbs.RC, verbs.StateRTR, verbs.StateRTS, rts &^ verbs.AttrTimeout, verbs.ErrMissingAttr},
		{"UD RTS ok", verbs.UD, verbs.StateRTR, verbs.StateRTS, verbs.AttrState | verbs.AttrSQPSN, nil},
		{"RTS to RTR", verbs.RC, verbs.StateRTS, verbs.StateRTR, rtr, verbs.ErrInvalidTransition},
		{"to ERR", verbs.RC, verbs.StateRTS, verbs.StateErr, verbs.AttrState, nil},
		{"to RESET", verbs.UD, verbs.StateErr, verbs.StateReset, verbs.AttrState, nil},
		{"RC from SQE", verbs.RC, verbs.StateSQE, verbs.StateRTS, verbs.AttrState, verbs.ErrInvalidTransition},
		{"UC from SQE", verbs.UC, verbs.StateSQE, verbs.StateRTS, verbs.AttrState, nil},
		{"RTS to SQD with notify", verbs.RC, verbs.StateRTS, verbs.StateSQD, verbs.AttrState | verbs.AttrEnSQDAsyncNotfy, nil},
		{"GSI reset to RTS", verbs.GSI, verbs.StateReset, verbs.StateRTS, verbs.AttrState, verbs.ErrInvalidTransition},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := classifyModify(c.typ, c.cur, c.next, c.mask)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("classifyModify = %v, want %v", err, c.want)
			}
		})
	}
}

func TestCheckSendOp(t *testing.T) {
	for _, c := range []struct {
		typ verbs.QPType
		op  verbs.WROpcode
		ok  bool
	}{
		{verbs.RC, verbs.OpRead, true}, {verbs.RC, verbs.OpAtomicCmpSwp, true}, {verbs.RC, verbs.OpSendInv, true},
		{verbs.RC, verbs.OpBindMW, true}, {verbs.UC, verbs.OpBindMW, true}, {verbs.UD, verbs.OpBindMW, false},
		{verbs.RC, 10, false}, {verbs.RC, 200, false},
		{verbs.UC, verbs.OpWriteImm, true}, {verbs.UC, verbs.OpRead, false}, {verbs.UC, verbs.OpAtomicFetchAdd, false},
		{verbs.UD, verbs.OpSendImm, true}, {verbs.UD, verbs.OpWrite, false},
	} {
		err := checkSendOp(c.typ, c.op)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, verbs.ErrInvalidWR) {
			t.Errorf("%v %v: %v", c.typ, c.op, err)
		}
	}
}

func TestEventType(t *testing.T) {
	want := map[int]verbs.EventType{0: verbs.EventCQErr, 1: verbs.EventQPFatal, 2: verbs.EventQPReqErr,
		3: verbs.EventQPAccessErr, 4: verbs.EventCommEstablished, 5: verbs.EventSQDrained,
		15: verbs.EventSRQLimitReached, 16: verbs.EventLastWQEReached}
	for i := range 20 {
		got, ok := eventType(i)
		w, wok := want[i]
		if ok != wok || got != w {
			t.Errorf("eventType(%d) = %v %v, want %v %v", i, got, ok, w, wok)
		}
	}
}

func TestAlloc(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := Alloc(10); err == nil {
			t.Fatal("Alloc worked off Linux")
		}
		return
	}
	for _, n := range []int{1, 4096, 5000} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || cap(b)%4096 != 0 || cap(b) < n {
			t.Errorf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("Alloc(%d): byte %d is %d", n, i, b[i])
			}
			b[i] = byte(i)
		}
		if err := Free(b[:n/2]); err != nil {
			t.Errorf("Free: %v", err)
		}
	}
	for _, n := range []int{0, -1} {
		if _, err := Alloc(n); err == nil {
			t.Errorf("Alloc(%d) worked", n)
		}
	}
	if err := Free(make([]byte, 10)); err == nil {
		t.Error("Free of Go memory worked")
	}
	b, err := Alloc(8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := Free(b[4096:]); err == nil {
		t.Error("Free of the second page alone worked")
	}
	if err := Free(b); err != nil {
		t.Error(err)
	}
}

// TestArgumentChecks checks what CreateQP, Modify, RegMR and CreateAH
// refuse before the device sees it, and that each refusal says what to
// give instead.
func TestArgumentChecks(t *testing.T) {
	cq := &CQ{}
	for _, c := range []struct {
		name string
		err  error
		want error
		says string // "" for no error
	}{
		{"nil QPInitAttr", checkQPInit(nil), errNilKind, "type, CQs and capabilities"},
		{"no SendCQ", checkQPInit(&verbs.QPInitAttr{RecvCQ: cq}), errNilKind, "SendCQ is missing"},
		{"no RecvCQ", checkQPInit(&verbs.QPInitAttr{SendCQ: cq}), errNilKind, "RecvCQ is missing"},
		{"QPInitAttr", checkQPInit(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq}), nil, ""},
		{"nil QPAttr", checkModify(nil, verbs.AttrState), errNilKind, "the attributes the mask names"},
		{"wide PSN", checkModify(&verbs.QPAttr{SQPSN: 1 << 24}, verbs.AttrSQPSN), verbs.ErrInvalidAttr, "24 bits"},
		{"wide PSN not in mask", checkModify(&verbs.QPAttr{SQPSN: 1 << 24}, verbs.AttrState), nil, ""},
		{"wide QPN", checkModify(&verbs.QPAttr{DestQPN: 1 << 24}, verbs.AttrDestQPN), verbs.ErrInvalidAttr, "dest QPN"},
		{"nil buffer", checkRegMR(nil, verbs.LocalWrite), verbs.ErrInvalidAttr, "1 byte or more"},
		{"empty buffer", checkRegMR([]byte{}, 0), verbs.ErrInvalidAttr, "zero-length"},
		{"unknown access", checkRegMR(make([]byte, 1), 1<<20), verbs.ErrInvalidAttr, "access"},
		{"buffer", checkRegMR(make([]byte, 1), verbs.LocalWrite), nil, ""},
		{"zero DGID", checkAH(&verbs.AHAttr{}), verbs.ErrInvalidAttr, "destination's GID"},
		{"DGID", checkAH(&verbs.AHAttr{DGID: verbs.GIDFromAddr(netip.MustParseAddr("198.18.0.1"))}), nil, ""},
	} {
		if c.says == "" {
			if c.err != nil {
				t.Errorf("%s: %v, want no error", c.name, c.err)
			}
			continue
		}
		if !errors.Is(c.err, c.want) || !strings.Contains(fmt.Sprint(c.err), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, c.err, c.want, c.says)
		}
	}
	if s := (*Error)(nil).Error(); s != "<nil>" {
		t.Errorf("nil *Error says %q", s)
	}
}

// TestExOps: an RC QP asks ibv_create_qp_ex for the FLUSH and
// ATOMIC_WRITE builders the device's capabilities name (rxe 6.12's
// device_cap_flags_ex has both, rxe 6.1's neither), and no other QP for
// any.
func TestExOps(t *testing.T) {
	const rxe612, rxe61 = verbs.DeviceCap(0x1C001223C76), verbs.DeviceCap(0x1223C76)
	for _, c := range []struct {
		typ  verbs.QPType
		caps verbs.DeviceCap
		want uint32
	}{
		{verbs.RC, rxe612, exWithFlush | exWithAtomicWrite},
		{verbs.RC, rxe61, 0},
		{verbs.RC, verbs.CapFlushPersistent, exWithFlush},
		{verbs.RC, verbs.CapAtomicWrite, exWithAtomicWrite},
		{verbs.UC, rxe612, 0},
		{verbs.UD, rxe612, 0},
	} {
		if got := exOps(c.typ, c.caps); got != c.want {
			t.Errorf("%v with %v: %#x, want %#x", c.typ, c.caps, got, c.want)
		}
	}
}

// TestCheckExWR: what a post of FLUSH or ATOMIC_WRITE refuses before
// libibverbs sees it, EOPNOTSUPP among it where the QP has no builder
// for the operation (rxe 6.1, rdma-core 44 for FLUSH).
func TestCheckExWR(t *testing.T) {
	flush := verbs.SendWR{Opcode: verbs.OpFlush, Flush: verbs.FlushWR{Len: 8, Type: verbs.PlaceGlobal, Level: verbs.FlushMR}}
	aw := verbs.SendWR{Opcode: verbs.OpAtomicWrite, CompareAdd: 1}
	withSGE, badType, badLevel := aw, flush, flush
	withSGE.SGL = []verbs.SGE{{Length: 8}}
	badType.Flush.Type = 4
	badLevel.Flush.Level = 2
	all := uint32(exWithFlush | exWithAtomicWrite)
	for _, c := range []struct {
		name string
		wr   verbs.SendWR
		ops  uint32
		want error
	}{
		{"FLUSH", flush, all, nil},
		{"ATOMIC_WRITE", aw, all, nil},
		{"ATOMIC_WRITE with an SGE", withSGE, all, verbs.ErrInvalidWR},
		{"FLUSH of a reserved type", badType, all, verbs.ErrInvalidWR},
		{"FLUSH of a reserved level", badLevel, all, verbs.ErrInvalidWR},
		{"FLUSH without the builder", flush, exWithAtomicWrite, syscall.EOPNOTSUPP},
		{"ATOMIC_WRITE without the builder", aw, exWithFlush, ErrUnsupported},
	} {
		err := checkExWR(&c.wr, c.ops)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if !isFlushOrAtomicWrite(verbs.OpFlush) || !isFlushOrAtomicWrite(verbs.OpAtomicWrite) || isFlushOrAtomicWrite(verbs.OpWrite) {
		t.Error("isFlushOrAtomicWrite")
	}
}
