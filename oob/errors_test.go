package oob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

// shortTimeout is the step timeout of the error tests.
const shortTimeout = 150 * time.Millisecond

// peerAction is one thing a scripted peer does.
type peerAction func(conn net.Conn) error

func send(b []byte) peerAction {
	return func(c net.Conn) error { _, err := c.Write(b); return err }
}

func recv(n int) peerAction {
	return func(c net.Conn) error {
		_, err := io.ReadFull(c, make([]byte, n))
		return err
	}
}

// hold keeps the connection open, silent, until the other side closes it
// (or testTimeout passes).
func hold() peerAction {
	return func(c net.Conn) error {
		_, err := io.Copy(io.Discard, c)
		return err
	}
}

// scriptedPeer runs actions on conn, then closes it.
func scriptedPeer(conn net.Conn, actions []peerAction) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testTimeout))
	for _, a := range actions {
		if a(conn) != nil {
			return
		}
	}
}

func validDest() []byte {
	b := make([]byte, DestLen)
	(&Dest{QPN: 0x11, PSN: 0xabcdef, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 11}}).Encode(b)
	return b
}

func validPerftestDest() []byte {
	b := make([]byte, PerftestDestLen)
	(&PerftestDest{QPN: 0x11, PSN: 0x22, RKey: 0x33}).Encode(b)
	return b
}

func version(v string) []byte {
	b := make([]byte, VersionLen)
	copy(b, v)
	return b
}

func withByte(b []byte, i int, c byte) []byte {
	b = bytes.Clone(b)
	b[i] = c
	return b
}

// perftestPrelude is what a 6.06 server does up to its MTU message: it
// reads each client message before answering.
func perftestPrelude() []peerAction {
	return []peerAction{
		recv(16), send(version("6.06")), recv(4), send([]byte{0, 0, 0x10, 0}), recv(4), send([]byte{0, 0, 0, 0x40}), recv(2),
	}
}

// clientUpToDests runs a perftest client through one handshake and a barrier.
func clientUpToDests(ctx context.Context, conn net.Conn, cfg *Config) error {
	p := NewPerftest(conn, Client, cfg)
	if _, err := p.ExchangeVersions(ctx); err != nil {
		return err
	}
	if _, err := p.CheckSysData(ctx, DefaultSysData); err != nil {
		return err
	}
	if _, err := p.CheckMTU(ctx, bth.MTU1024); err != nil {
		return err
	}
	if _, err := p.ExchangeDests(ctx, []PerftestDest{{QPN: 1}}); err != nil {
		return err
	}
	if err := p.Barrier(ctx); err != nil {
		return err
	}
	return p.CloseConnection(ctx)
}

func serverUpToDests(ctx context.Context, conn net.Conn, cfg *Config) error {
	p := NewPerftest(conn, Server, cfg)
	if _, err := p.ExchangeVersions(ctx); err != nil {
		return err
	}
	if _, err := p.CheckSysData(ctx, DefaultSysData); err != nil {
		return err
	}
	if _, err := p.CheckMTU(ctx, bth.MTU1024); err != nil {
		return err
	}
	if _, err := p.ExchangeDests(ctx, []PerftestDest{{QPN: 1}}); err != nil {
		return err
	}
	return p.CloseConnection(ctx)
}

func pingpongClient(ctx context.Context, conn net.Conn, cfg *Config) error {
	_, err := PingpongClient(ctx, conn, []Dest{{QPN: 1}}, 1, cfg)
	return err
}

func pingpongServer(ctx context.Context, conn net.Conn, cfg *Config) error {
	s := NewPingpongServer(conn, 1, cfg)
	if _, err := s.ReadDests(ctx); err != nil {
		return err
	}
	return s.Reply(ctx, []Dest{{QPN: 2}})
}

func TestErrorCases(t *testing.T) {
	prelude := perftestPrelude()
	then := func(a ...peerAction) []peerAction { return append(append([]peerAction{}, prelude...), a...) }
	// The server side of perftest reads first: it needs the client's
	// messages before each of its own.
	clientPrelude := []peerAction{
		send(version("6.06")), recv(16), send([]byte{0, 0, 0x10, 0}), recv(4), send([]byte{0, 0, 0, 0x40}), recv(4),
		send([]byte("3\x00")), recv(2),
	}
	cthen := func(a ...peerAction) []peerAction { return append(append([]peerAction{}, clientPrelude...), a...) }

	for _, tc := range []struct {
		name   string
		ours   func(ctx context.Context, conn net.Conn, cfg *Config) error
		ourEnd Role // which end our code takes
		peer   []peerAction
		ctx    func() (context.Context, context.CancelFunc)
		want   error
		text   []string // substrings of the message
	}{
		// pingpong client
		{name: "pingpong client/non-hex", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{recv(DestLen), send(withByte(validDest(), 7, 'z'))},
			want: ErrFormat, text: []string{"not a hex digit at offset 7", "entry 0 of 1", `%04x:%06x`}},
		{name: "pingpong client/no NUL", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{recv(DestLen), send(withByte(validDest(), 51, '0'))},
			want: ErrFormat, text: []string{"no NUL at offset 51"}},
		{name: "pingpong client/garbage", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{recv(DestLen), send(bytes.Repeat([]byte{0xde, 0xad}, 26))},
			want: ErrFormat, text: []string{`\xde\xad`}},
		{name: "pingpong client/short then close", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{recv(DestLen), send(validDest()[:20])},
			want: ErrClosed, text: []string{"expected 52 bytes", "got 20 bytes", "end of stream"}},
		{name: "pingpong client/closed at once", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{},
			want: ErrClosed},
		{name: "pingpong client/silent", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{hold()},
			want: ErrTimeout, text: []string{"nothing more within 150ms"}},
		{name: "pingpong client/context deadline", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{hold()},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), shortTimeout)
			},
			want: context.DeadlineExceeded},
		{name: "pingpong client/context cancelled", ours: pingpongClient, ourEnd: Client,
			peer: []peerAction{hold()},
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(shortTimeout/3, cancel)
				return ctx, cancel
			},
			want: context.Canceled},
		// pingpong server
		{name: "pingpong server/wrong length", ours: pingpongServer, ourEnd: Server,
			peer: []peerAction{send(validDest()[:51])},
			want: ErrClosed, text: []string{"expected 52 bytes", "got 51 bytes"}},
		{name: "pingpong server/bad done", ours: pingpongServer, ourEnd: Server,
			peer: []peerAction{send(validDest()), recv(DestLen), send([]byte("dome\x00"))},
			want: ErrFormat, text: []string{"closing message", `"dome\x00"`}},
		{name: "pingpong server/no done", ours: pingpongServer, ourEnd: Server,
			peer: []peerAction{send(validDest()), recv(DestLen)},
			want: ErrClosed},
		{name: "pingpong server/silent", ours: pingpongServer, ourEnd: Server,
			peer: []peerAction{hold()},
			want: ErrTimeout},
		// perftest client
		{name: "perftest client/garbage version", ours: clientUpToDests, ourEnd: Client,
			peer: []peerAction{recv(16), send(bytes.Repeat([]byte{0xff}, 16))},
			want: ErrFormat, text: []string{"exchange_versions", "no NUL"}},
		{name: "perftest client/unprintable version", ours: clientUpToDests, ourEnd: Client,
			peer: []peerAction{recv(16), send(version("6.\x0106"))},
			want: ErrFormat, text: []string{"unprintable"}},
		{name: "perftest client/old version", ours: clientUpToDests, ourEnd: Client,
			peer: []peerAction{recv(16), send(version("5.60"))},
			want: ErrVersion, text: []string{`"5.60"`, "5.7 or later"}},
		{name: "perftest client/HTTP instead", ours: clientUpToDests, ourEnd: Client,
			peer: []peerAction{recv(16), send([]byte("HTTP/1.1 400 Bad Request\r\n"))},
			want: ErrFormat},
		{name: "perftest client/bad MTU", ours: clientUpToDests, ourEnd: Client,
			peer: then(send([]byte("9\x00"))),
			want: ErrFormat, text: []string{"check_mtu", `"9\x00"`}},
		{name: "perftest client/bad handshake", ours: clientUpToDests, ourEnd: Client,
			peer: then(send([]byte("3\x00")), recv(108), send(withByte(validPerftestDest(), 16, '-'))),
			want: ErrFormat, text: []string{"hand_shake", "no ':' at offset 16", "hand_shake (QP 0 of 1)"}},
		{name: "perftest client/early close mid-handshake", ours: clientUpToDests, ourEnd: Client,
			peer: then(send([]byte("3\x00")), recv(108), send(validPerftestDest()[:50])),
			want: ErrClosed, text: []string{"expected 108 bytes of handshake", "got 50 bytes"}},
		{name: "perftest client/silent at barrier", ours: clientUpToDests, ourEnd: Client,
			peer: then(send([]byte("3\x00")), recv(108), send(validPerftestDest()), hold()),
			want: ErrTimeout},
		{name: "perftest client/bad done", ours: clientUpToDests, ourEnd: Client,
			peer: then(send([]byte("3\x00")), recv(108), send(validPerftestDest()), recv(108), send(validPerftestDest()),
				recv(108), send(validPerftestDest()), recv(5), send([]byte("done!"))),
			want: ErrFormat, text: []string{"close_connection"}},
		// perftest server
		{name: "perftest server/garbage first", ours: serverUpToDests, ourEnd: Server,
			peer: []peerAction{send([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))},
			want: ErrFormat, text: []string{"empty version"}},
		{name: "perftest server/closed mid-version", ours: serverUpToDests, ourEnd: Server,
			peer: []peerAction{send([]byte("6.0"))},
			want: ErrClosed, text: []string{"got 3 bytes"}},
		{name: "perftest server/bad handshake", ours: serverUpToDests, ourEnd: Server,
			peer: cthen(send(withByte(validPerftestDest(), 107, ':'))),
			want: ErrFormat, text: []string{"no NUL at offset 107"}},
		{name: "perftest server/silent after MTU", ours: serverUpToDests, ourEnd: Server,
			peer: cthen(hold()),
			want: ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := connPair(t)
			ours, theirs := client, server
			if tc.ourEnd == Server {
				ours, theirs = server, client
			}
			peerDone := make(chan struct{})
			go func() {
				scriptedPeer(theirs, tc.peer)
				close(peerDone)
			}()
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			cfg := &Config{Timeout: shortTimeout}
			errc := make(chan error, 1)
			go func() { errc <- tc.ours(ctx, ours, cfg) }()
			var err error
			select {
			case err = <-errc:
			case <-time.After(testTimeout):
				t.Fatal("no error within the test timeout: the exchange hangs")
			}
			ours.Close()
			<-peerDone
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not an *Error", err)
			}
			for _, s := range tc.text {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if tc.want == context.DeadlineExceeded && !errors.Is(err, ErrTimeout) {
				t.Errorf("a context deadline should also be ErrTimeout: %v", err)
			}
		})
	}
}

func TestMisuse(t *testing.T) {
	c, s := connPair(t)
	defer c.Close()
	defer s.Close()
	ctx := context.Background()
	p := NewPerftest(c, Client, nil)
	type check struct {
		name string
		err  error
	}
	var checks []check
	add := func(name string, err error) { checks = append(checks, check{name, err}) }
	_, err := p.CheckSysData(ctx, DefaultSysData)
	add("sys data before versions", err)
	_, err = p.CheckMTU(ctx, bth.MTU1024)
	add("MTU before versions", err)
	_, err = p.HandShake(ctx, PerftestDest{})
	add("handshake before versions", err)
	add("barrier before handshake", p.Barrier(ctx))
	_, err = p.ExchangeDests(ctx, nil)
	add("no dests", err)
	_, err = p.ExchangeBWReports(ctx, BWReport{})
	add("reports before versions", err)
	_, err = NewPerftest(c, Role(7), nil).ExchangeVersions(ctx)
	add("bad role", err)
	_, err = NewPerftest(c, Client, &Config{PerftestVersion: "a version that is too long"}).ExchangeVersions(ctx)
	add("long version", err)
	_, err = PingpongClient(ctx, c, nil, 0, nil)
	add("0 entries", err)
	_, err = PingpongClient(ctx, c, nil, SRQEntries+1, nil)
	add("257 entries", err)
	_, err = PingpongClient(ctx, c, make([]Dest, 2), 1, nil)
	add("more local entries than on the wire", err)
	_, err = PingpongClient(ctx, c, []Dest{{QPN: 1 << 24}}, 1, nil)
	add("25-bit QPN", err)
	ps := NewPingpongServer(s, 1, nil)
	add("reply before read", ps.Reply(ctx, nil))
	_, err = NewPingpongServer(s, 0, nil).ReadDests(ctx)
	add("server 0 entries", err)
	for _, ch := range checks {
		if !errors.Is(ch.err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", ch.name, ch.err)
		}
	}
	// None of that may have written anything.
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := s.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("misuse wrote %d bytes (%v)", n, err)
	}
}

func TestAcceptDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	cfg := &Config{Timeout: shortTimeout}
	if _, err := Accept(context.Background(), ln, cfg); !errors.Is(err, ErrTimeout) {
		t.Errorf("accept with no client: %v, want ErrTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Accept(ctx, ln, cfg); !errors.Is(err, context.Canceled) {
		t.Errorf("accept with a cancelled context: %v, want context.Canceled", err)
	}
	ln.Close()
	if _, err := Dial(context.Background(), addr, cfg); !errors.Is(err, ErrIO) {
		t.Errorf("dial a closed port: %v, want ErrIO", err)
	}
	if _, err := Accept(context.Background(), noDeadlineListener{ln}, cfg); !errors.Is(err, ErrInvalid) {
		t.Errorf("accept on a listener without deadlines: %v, want ErrInvalid", err)
	}
}

type noDeadlineListener struct{ net.Listener }

// TestClosedErrors pins what ErrClosed is linked to: a connection this
// side closed also matches net.ErrClosed (the closed errors of verbs and
// cm match it too); one the peer closed does not.
func TestClosedErrors(t *testing.T) {
	ctx := context.Background()
	cfg := &Config{Timeout: shortTimeout}
	c, s := connPair(t)
	c.Close()
	err := pingpongClient(ctx, c, cfg)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("exchange on a connection closed here: %v, want ErrClosed and net.ErrClosed", err)
	}
	s.Close()
	c, s = connPair(t)
	defer c.Close()
	s.Close()
	err = pingpongClient(ctx, c, cfg)
	if !errors.Is(err, ErrClosed) || errors.Is(err, net.ErrClosed) {
		t.Errorf("exchange on a connection the peer closed: %v, want ErrClosed, not net.ErrClosed", err)
	}
}
