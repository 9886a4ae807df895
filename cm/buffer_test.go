package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

func TestRemoteBufferWire(t *testing.T) {
	b := RemoteBuffer{Addr: 0x0102030405060708, RKey: 0x0A0B0C0D, Len: 0x00010000}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0B, 0x0C, 0x0D, 0, 1, 0, 0}
	got := b.Append(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("Append = % x, want % x", got, want)
	}
	// Zero-padded, as CM private data always is.
	padded := append(append([]byte(nil), want...), make([]byte, 180)...)
	if p, err := ParseRemoteBuffer(padded); err != nil || p != b {
		t.Fatalf("ParseRemoteBuffer = %+v, %v", p, err)
	}
	// The minimal samples' 12 bytes (address, rkey) and their padding.
	minimal := append(append([]byte(nil), want[:12]...), make([]byte, 184)...)
	if p, err := ParseRemoteBuffer(minimal); err != nil || p != (RemoteBuffer{Addr: b.Addr, RKey: b.RKey}) {
		t.Fatalf("ParseRemoteBuffer(minimal sample) = %+v, %v", p, err)
	}
	for _, bad := range [][]byte{nil, want[:15], make([]byte, 56)} {
		if _, err := ParseRemoteBuffer(bad); !errors.Is(err, ErrNoBuffer) {
			t.Errorf("ParseRemoteBuffer(% x) = %v, want ErrNoBuffer", bad, err)
		}
	}
	if BufferOf(nil) != (RemoteBuffer{}) {
		t.Error("BufferOf(nil) is not zero")
	}
	var c *Conn
	var r *Request
	if _, err := c.PeerBuffer(); !errors.Is(err, ErrNoBuffer) {
		t.Errorf("nil Conn: %v", err)
	}
	if _, err := r.PeerBuffer(); !errors.Is(err, ErrNoBuffer) {
		t.Errorf("nil Request: %v", err)
	}
}

// TestPeerBuffer passes a buffer each way in the private data and uses
// both with RDMA WRITE.
func TestPeerBuffer(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ha, hb := be.open(t)
			ctx := ctxT(t, 20*time.Second)
			cli, srv := newSide(t, ha.dev), newSide(t, hb.dev)
			var fromReq RemoteBuffer
			l, err := hb.agent.Listen(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174), &ListenConfig{
				OnRequest: func(_ context.Context, r *Request) (*Params, error) {
					var err error
					fromReq, err = r.PeerBuffer()
					return &Params{QP: srv.qp, PrivateData: BufferData(srv.mr)}, err
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			accepted := make(chan acceptResult, 1)
			go func() {
				c, err := l.Accept(ctx)
				accepted <- acceptResult{conn: c, err: err}
			}()
			c, err := ha.agent.Dial(ctx, netip.AddrPortFrom(hb.agent.Addr(), 7174),
				&Params{QP: cli.qp, PrivateData: BufferData(cli.mr)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := <-accepted
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.conn.Close()
			if want := BufferOf(cli.mr); fromReq != want {
				t.Fatalf("OnRequest saw %+v, want %+v", fromReq, want)
			}
			if pb, err := r.conn.PeerBuffer(); err != nil || pb != fromReq {
				t.Fatalf("passive Conn.PeerBuffer = %+v, %v", pb, err)
			}
			pb, err := c.PeerBuffer()
			if want := BufferOf(srv.mr); err != nil || pb != want || pb.Len != 1<<16 {
				t.Fatalf("active Conn.PeerBuffer = %+v, %v, want %+v", pb, err, want)
			}
			writeInto(t, ctx, cli, pb, []byte("to the server"))
			writeInto(t, ctx, srv, fromReq, []byte("to the client"))
			// Each side's completion came from its own device, the data
			// was written by the other's: order the two (mr.MR.Sync).
			for _, m := range []verbs.MR{cli.mr, srv.mr} {
				m.(interface{ Sync() }).Sync()
			}
			if got := srv.mr.Bytes()[pb.Len-13 : pb.Len]; string(got) != "to the server" {
				t.Errorf("server buffer ends with %q", got)
			}
			if got := cli.mr.Bytes()[fromReq.Len-13 : fromReq.Len]; string(got) != "to the client" {
				t.Errorf("client buffer ends with %q", got)
			}
		})
	}
}

// writeInto RDMA-WRITEs msg to the last bytes of the peer's buffer b and
// waits for the completion.
func writeInto(t *testing.T, ctx context.Context, s *side, b RemoteBuffer, msg []byte) {
	t.Helper()
	copy(s.mr.Bytes(), msg)
	wr := verbs.SendWR{Opcode: verbs.OpWrite, Flags: verbs.Signaled,
		SGL:        []verbs.SGE{{Addr: s.mr.Addr(), Length: uint32(len(msg)), LKey: s.mr.LKey()}},
		RemoteAddr: b.Addr + uint64(b.Len) - uint64(len(msg)), RKey: b.RKey}
	if err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if _, err := roce.PollOne(ctx, s.cq); err != nil {
		t.Fatal(err)
	}
}
