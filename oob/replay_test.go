package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

// testTimeout bounds every exchange in the tests; nothing should come near it.
const testTimeout = 10 * time.Second

// recordConn records the size of each Write, to check message framing.
type recordConn struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (c *recordConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(b))
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// fakePeer plays the messages of role from a recorded exchange on conn and
// collects what the other side sends at its steps. It ends by checking
// that the other side sends nothing more and closes.
func fakePeer(conn net.Conn, role Role, steps []step, msgs [][]byte) ([]byte, error) {
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		return nil, err
	}
	var got []byte
	for i, s := range steps {
		if s.from == role {
			if _, err := conn.Write(msgs[i]); err != nil {
				return got, fmt.Errorf("step %d: write %v: %w", i, s.kind, err)
			}
			continue
		}
		buf := make([]byte, s.size)
		if n, err := io.ReadFull(conn, buf); err != nil {
			return append(got, buf[:n]...), fmt.Errorf("step %d: read %v (%d bytes): got %d: %w", i, s.kind, s.size, n, err)
		}
		got = append(got, buf...)
	}
	var extra [1]byte
	if n, err := conn.Read(extra[:]); n != 0 || !errors.Is(err, io.EOF) {
		return got, fmt.Errorf("after the script: %d more bytes, %v (want end of stream)", n, err)
	}
	return got, nil
}

// connPair returns two ends of a loopback TCP connection: the dialer's and
// the acceptor's.
func connPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := Accept(ctx, ln, nil)
		ch <- result{c, err}
	}()
	client, err = Dial(ctx, ln.Addr().String(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		client.Close()
		tb.Fatal(r.err)
	}
	return client, r.c
}

// replay runs our side (run) in role ours against a fake peer that plays
// the recorded messages of the other role, and checks that our side sent
// exactly the recorded bytes of its role, one Write per message.
func replay(t *testing.T, c *oobCapture, steps []step, msgs [][]byte, ours Role, run func(ctx context.Context, conn net.Conn) error) {
	t.Helper()
	peerRole := Client
	if ours == Client {
		peerRole = Server
	}
	clientConn, serverConn := connPair(t)
	ourConn, peerConn := clientConn, serverConn
	if ours == Server {
		ourConn, peerConn = serverConn, clientConn
	}
	type result struct {
		got []byte
		err error
	}
	peerDone := make(chan result, 1)
	go func() {
		got, err := fakePeer(peerConn, peerRole, steps, msgs)
		peerDone <- result{got, err}
	}()

	rec := &recordConn{Conn: ourConn}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	err := run(ctx, rec)
	rec.Close()
	if err != nil {
		t.Errorf("our %v: %v", ours, err)
	}
	var r result
	select {
	case r = <-peerDone:
	case <-time.After(testTimeout):
		t.Fatal("the fake peer did not finish")
	}
	if r.err != nil {
		t.Errorf("fake %v: %v", peerRole, r.err)
	}
	want := c.client
	if ours == Server {
		want = c.server
	}
	if !bytes.Equal(r.got, want) {
		i := 0
		for i < len(r.got) && i < len(want) && r.got[i] == want[i] {
			i++
		}
		t.Errorf("our %v sent %d bytes, the recording has %d; first difference at %d", ours, len(r.got), len(want), i)
	}
	var wantWrites []int
	for _, s := range steps {
		if s.from == ours {
			wantWrites = append(wantWrites, s.size)
		}
	}
	if !slices.Equal(rec.writes, wantWrites) {
		t.Errorf("our %v wrote %v, want one write per message %v", ours, rec.writes, wantWrites)
	}
}

// planResult is what our side got back from the peer.
type planResult struct {
	compat   Compat
	sys      SysData
	mtu      bth.MTU
	dests    []PerftestDest // every remote entry returned, in order
	report   BWReport
	reported bool
}

// runPlan runs a perftest plan with the values in in.
func runPlan(ctx context.Context, p *Perftest, plan []op, in decoded) (planResult, error) {
	var out planResult
	var err error
	for _, o := range plan {
		switch o {
		case opVersions:
			out.compat, err = p.ExchangeVersions(ctx)
		case opSys:
			out.sys, err = p.CheckSysData(ctx, in.sys)
		case opMTU:
			out.mtu, err = p.CheckMTU(ctx, in.mtu)
		case opHandShake:
			var r PerftestDest
			r, err = p.HandShake(ctx, in.dests[0])
			out.dests = append(out.dests, r)
		case opDests:
			var r []PerftestDest
			r, err = p.ExchangeDests(ctx, in.dests[:1])
			out.dests = append(out.dests, r...)
		case opBarrier:
			err = p.Barrier(ctx)
		case opReports:
			out.report, err = p.ExchangeBWReports(ctx, in.report)
			out.reported = true
		case opClose:
			err = p.CloseConnection(ctx)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// sameReport compares reports bit for bit (a garbage report may hold NaNs).
func sameReport(a, b BWReport) bool {
	var x, y [72]byte
	c := CompatFor(PerftestVersion)
	n, _ := a.Encode(x[:], c, true)
	b.Encode(y[:], c, true)
	return bytes.Equal(x[:n], y[:n])
}

func TestReplayPerftest(t *testing.T) {
	for name, plan := range perftestPlans {
		c := loadOOBCapture(t, name)
		steps := perftestSteps(plan)
		msgs := c.split(t, steps)
		sides := map[Role]decoded{
			Client: decodeSide(t, name, steps, msgs, Client),
			Server: decodeSide(t, name, steps, msgs, Server),
		}
		for _, ours := range []Role{Client, Server} {
			t.Run(name+"/"+ours.String(), func(t *testing.T) {
				peer := sides[Server]
				if ours == Server {
					peer = sides[Client]
				}
				replay(t, c, steps, msgs, ours, func(ctx context.Context, conn net.Conn) error {
					p := NewPerftest(conn, ours, &Config{Timeout: testTimeout})
					got, err := runPlan(ctx, p, plan, sides[ours])
					if err != nil {
						return err
					}
					if got.compat.Version != PerftestVersion || !got.compat.Iters64 || got.compat.MTULen != MTULen {
						t.Errorf("peer compat %+v", got.compat)
					}
					if got.sys != DefaultSysData || got.mtu != bth.MTU1024 {
						t.Errorf("agreed sys %+v MTU %v", got.sys, got.mtu)
					}
					for i, d := range got.dests {
						if d != peer.dests[0] {
							t.Errorf("remote entry %d: %+v, the peer sent %+v", i, d, peer.dests[0])
						}
					}
					if got.reported && !sameReport(got.report, peer.report) {
						t.Errorf("remote report %+v, the peer sent %+v", got.report, peer.report)
					}
					return nil
				})
			})
		}
	}
}

func TestReplayPingpong(t *testing.T) {
	for name, entries := range pingpongEntries {
		c := loadOOBCapture(t, name)
		steps := pingpongSteps(entries)
		msgs := c.split(t, steps)
		cl := decodeSide(t, name, steps, msgs, Client)
		sv := decodeSide(t, name, steps, msgs, Server)
		t.Run(name+"/client", func(t *testing.T) {
			replay(t, c, steps, msgs, Client, func(ctx context.Context, conn net.Conn) error {
				// Only the used entries: the client pads with zero entries.
				local := cl.entries
				for len(local) > 0 && local[len(local)-1] == (Dest{}) {
					local = local[:len(local)-1]
				}
				remote, err := PingpongClient(ctx, conn, local, entries, nil)
				if err == nil && !slices.Equal(remote, sv.entries) {
					t.Errorf("remote entries differ from the recorded server's")
				}
				return err
			})
		})
		t.Run(name+"/server", func(t *testing.T) {
			replay(t, c, steps, msgs, Server, func(ctx context.Context, conn net.Conn) error {
				s := NewPingpongServer(conn, entries, nil)
				remote, err := s.ReadDests(ctx)
				if err != nil {
					return err
				}
				if !slices.Equal(remote, cl.entries) {
					t.Errorf("remote entries differ from the recorded client's")
				}
				return s.Reply(ctx, sv.entries)
			})
		})
	}
}
