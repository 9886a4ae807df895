package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// The flush mode: IBTA 1.5's FLUSH and ATOMIC_WRITE, in goroce's session
// protocol over rdma_cm, as interop/peers' flush_server and flush_client
// speak it too. The server registers two regions: one with FlushGlobal
// (fa, fk in its private data) and one without (pa, pk); once connected
// it gives its QP FlushGlobal and SENDs "flush-ready". The client then
// WRITEs 256 bytes at 1024 of the first region, FLUSHes that range,
// ATOMIC_WRITEs 8 bytes at 64, READs both back, FLUSHes the whole
// region, and ends with a FLUSH the server must NAK: -s qp (the default)
// one of the persistent placement type, which the server's QP does not
// allow (an invalid request), -s mr one to the region without FlushGlobal
// (a remote access error). When the client has gone the server prints
// what landed.

const (
	flushReady  = "flush-ready"
	flushAWOff  = 64   // the ATOMIC_WRITE's place in the first region
	flushWrOff  = 1024 // the WRITE's
	flushWrLen  = 256
	flushRegion = 4096
	flushValue  = 0x1122334455667788
	flushWait   = time.Minute // the most a server waits for its client to leave
)

// flushState is what the flush server's sessions share: the two regions.
type flushState struct {
	flushable, plain verbs.MR
}

// flushPattern is the WRITE's bytes.
func flushPattern() []byte {
	b := make([]byte, flushWrLen)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

func flushSetup(l *sessionListener, _ *modeOpts) (any, error) {
	f, err := l.pd.RegMR(make([]byte, flushRegion), verbs.LocalWrite|verbs.RemoteAccess|verbs.FlushGlobal)
	if err != nil {
		return nil, fmt.Errorf("a region with FlushGlobal (the device needs FLUSH: rxe from kernel 6.2): %w", err)
	}
	p, err := l.pd.RegMR(make([]byte, flushRegion), verbs.LocalWrite|verbs.RemoteAccess)
	if err != nil {
		f.Dereg()
		return nil, err
	}
	for k, v := range map[string]uint64{"fa": f.Addr(), "fk": uint64(f.RKey()), "pa": p.Addr(), "pk": uint64(p.RKey())} {
		l.cfg.extra[k] = strconv.FormatUint(v, 16)
	}
	return &flushState{flushable: f, plain: p}, nil
}

func flushServer(ctx context.Context, s *session, o *modeOpts, state any) error {
	st := state.(*flushState)
	clear(st.flushable.Bytes())
	cli.SyncMR(st.flushable)
	a := verbs.QPAttr{State: verbs.StateRTS,
		Access: verbs.RemoteWrite | verbs.RemoteRead | verbs.RemoteAtomic | verbs.FlushGlobal}
	if err := s.qp.Modify(&a, verbs.AttrState|verbs.AttrAccessFlags); err != nil {
		return fmt.Errorf("give the QP FlushGlobal: %w", err)
	}
	cli.Step(s.log, roce.StepControl, "the QP takes FLUSH of the global placement type; tell the client")
	if err := s.sendBytes(ctx, 0, []byte(flushReady), nil); err != nil {
		return err
	}
	t := time.NewTimer(flushWait)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		return errors.New("the client did not leave within a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
	cli.SyncMR(st.flushable)
	b := st.flushable.Bytes()
	fmt.Fprintf(o.out, "ATOMIC_WRITE landed: %#x\n", binary.NativeEndian.Uint64(b[flushAWOff:]))
	if !bytes.Equal(b[flushWrOff:flushWrOff+flushWrLen], flushPattern()) {
		fmt.Fprintln(o.out, "the WRITE before the FLUSH is NOT in place")
		return errors.New("the WRITE before the FLUSH is not in the region")
	}
	fmt.Fprintln(o.out, "the WRITE before the FLUSH is in place")
	return nil
}

// flushPeer returns the server's two regions from its private data.
func flushPeer(s *session) (f, p bufInfo, err error) {
	var v [4]uint64
	for i, k := range []string{"fa", "fk", "pa", "pk"} {
		if v[i], err = strconv.ParseUint(s.extra[k], 16, 64); err != nil {
			return f, p, fmt.Errorf("the server's private data has no %s (is it a flush server?): %w", k, err)
		}
	}
	return bufInfo{v[0], uint32(v[1]), flushRegion}, bufInfo{v[2], uint32(v[3]), flushRegion}, nil
}

func flushClient(ctx context.Context, s *session, o *modeOpts) error {
	nak := o.str
	if nak == "" {
		nak = "qp"
	}
	if nak != "qp" && nak != "mr" {
		return cli.Usagef("-s takes qp (end with a FLUSH the server's QP does not allow) or mr (one its region does not)")
	}
	f, p, err := flushPeer(s)
	if err != nil {
		return err
	}
	if _, err := s.expect(ctx, verbs.WCRecv); err != nil {
		return fmt.Errorf("waiting for %q: %w", flushReady, err)
	}
	b := s.mr.Bytes()
	copy(b[flushWrOff:], flushPattern())
	steps := []struct {
		say string
		wr  verbs.SendWR
		op  verbs.WCOpcode
	}{
		{"", verbs.SendWR{Opcode: verbs.OpWrite, SGL: s.sge(flushWrOff, flushWrLen), RemoteAddr: f.addr + flushWrOff,
			RKey: f.rkey}, verbs.WCWrite},
		{"FLUSH global range", verbs.SendWR{Opcode: verbs.OpFlush, RemoteAddr: f.addr + flushWrOff, RKey: f.rkey,
			Flush: verbs.FlushWR{Len: flushWrLen, Type: verbs.PlaceGlobal, Level: verbs.FlushRange}}, verbs.WCFlush},
		{"ATOMIC_WRITE", verbs.SendWR{Opcode: verbs.OpAtomicWrite, RemoteAddr: f.addr + flushAWOff, RKey: f.rkey,
			CompareAdd: flushValue}, verbs.WCAtomicWrite},
	}
	for i, st := range steps {
		st.wr.ID = uint64(i + 1)
		if err := s.do(ctx, st.wr, st.op); err != nil {
			return fmt.Errorf("%v: %w", st.wr.Opcode, err)
		}
		if st.say != "" {
			fmt.Fprintf(o.out, "%s: SUCCESS\n", st.say)
		}
	}
	clear(b[2048 : 2048+8+flushWrLen])
	for _, r := range [][3]int{{2048, flushAWOff, 8}, {2056, flushWrOff, flushWrLen}} {
		if err := s.do(ctx, verbs.SendWR{ID: 10, Opcode: verbs.OpRead, SGL: s.sge(r[0], r[2]),
			RemoteAddr: f.addr + uint64(r[1]), RKey: f.rkey}, verbs.WCRead); err != nil {
			return fmt.Errorf("READ back: %w", err)
		}
	}
	got := binary.NativeEndian.Uint64(b[2048:])
	if got != flushValue || !bytes.Equal(b[2056:2056+flushWrLen], flushPattern()) {
		return fmt.Errorf("read back %#x and the WRITE's bytes %v", got, bytes.Equal(b[2056:2056+flushWrLen], flushPattern()))
	}
	fmt.Fprintf(o.out, "read back: %#x and %d bytes as written\n", got, flushWrLen)
	if err := s.do(ctx, verbs.SendWR{ID: 11, Opcode: verbs.OpFlush, RKey: f.rkey,
		Flush: verbs.FlushWR{Type: verbs.PlaceGlobal, Level: verbs.FlushMR}}, verbs.WCFlush); err != nil {
		return fmt.Errorf("FLUSH of the whole region: %w", err)
	}
	fmt.Fprintln(o.out, "FLUSH global whole region: SUCCESS")
	say, want := "FLUSH persistent to a QP without FLUSH_PERSISTENT", verbs.RemInvReqErr
	last := verbs.SendWR{ID: 12, Opcode: verbs.OpFlush, RemoteAddr: f.addr, RKey: f.rkey,
		Flush: verbs.FlushWR{Len: 8, Type: verbs.PlacePersistent}}
	if nak == "mr" {
		say, want = "FLUSH to a region without FLUSH_GLOBAL", verbs.RemAccessErr
		last.RemoteAddr, last.RKey, last.Flush.Type = p.addr, p.rkey, verbs.PlaceGlobal
	}
	if err := s.postSend(last); err != nil {
		return err
	}
	wc, err := s.wait(ctx)
	if err != nil {
		return err
	}
	if wc.Status != want {
		return fmt.Errorf("%s: %v, want %v", say, wc.Status, want)
	}
	fmt.Fprintf(o.out, "%s: %v (as expected)\n", say, wc.Status)
	fmt.Fprintln(o.out, "flush: all as expected")
	return nil
}
