package oob

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// errStop ends a scripted peer's actions (its connection is then closed).
var errStop = errors.New("stop")

// resetOnClose makes the scripted peer's close a reset (SO_LINGER 0), as a
// close with bytes left unread is: perftest 25 closes with this side's
// "done\0" in its receive queue.
func resetOnClose() peerAction {
	return func(c net.Conn) error {
		if err := c.(*net.TCPConn).SetLinger(0); err != nil {
			return err
		}
		return errStop
	}
}

// perftest25Server is what ib_write_bw of perftest 25.01 does as the server
// of clientUpToDests: it announces 6.24 and, after the handshake of
// ctx_close_connection, closes the connection without writing "done\0".
// last follows the closing handshake.
func perftest25Server(last ...peerAction) []peerAction {
	a := []peerAction{
		recv(VersionLen), send(version("6.24")), recv(4), send([]byte{0, 0, 0x10, 0}), recv(4), send([]byte{0, 0, 0, 0x40}),
		recv(2), send([]byte("3\x00")),
		recv(PerftestDestLen), send(validPerftestDest()), // the QP's entry
		recv(PerftestDestLen), send(validPerftestDest()), // the barrier
		recv(PerftestDestLen), send(validPerftestDest()), // ctx_close_connection's handshake
	}
	return append(a, last...)
}

// perftest25Client is perftest 25.01's client against serverUpToDests: it
// closes as soon as it has the answer to the closing handshake.
func perftest25Client(last ...peerAction) []peerAction {
	a := []peerAction{
		send(version("6.24")), recv(VersionLen), send([]byte{0, 0, 0x10, 0}), recv(4), send([]byte{0, 0, 0, 0x40}), recv(4),
		send([]byte("3\x00")), recv(2),
		send(validPerftestDest()), recv(PerftestDestLen), // the QP's entry
		send(validPerftestDest()), recv(PerftestDestLen), // ctx_close_connection's handshake
	}
	return append(a, last...)
}

// pause waits a moment, so that what this side sent next has arrived.
func pause() peerAction {
	return func(net.Conn) error { time.Sleep(shortTimeout / 3); return nil }
}

// runAgainst runs ours in role ourEnd against a scripted peer over TCP
// loopback and returns our error.
func runAgainst(t *testing.T, ours func(ctx context.Context, conn net.Conn, cfg *Config) error, ourEnd Role, peer []peerAction) error {
	t.Helper()
	client, server := connPair(t)
	mine, theirs := client, server
	if ourEnd == Server {
		mine, theirs = server, client
	}
	peerDone := make(chan struct{})
	go func() {
		scriptedPeer(theirs, peer)
		close(peerDone)
	}()
	defer func() {
		mine.Close()
		<-peerDone
	}()
	errc := make(chan error, 1)
	go func() { errc <- ours(context.Background(), mine, &Config{Timeout: shortTimeout}) }()
	select {
	case err := <-errc:
		return err
	case <-time.After(testTimeout):
		t.Fatal("no result within the test timeout: the exchange hangs")
		return nil
	}
}

// TestCloseWithoutDone: perftest 23.10 and later (Debian 13's 25.01) end
// the exchange with the closing handshake and close the connection, with
// no "done\0"; the end of the connection then, by a FIN or a reset, ends
// our side well in either role, while a peer that goes away before the
// handshake, or in the middle of a "done\0", is still an error.
func TestCloseWithoutDone(t *testing.T) {
	short := func(a []peerAction, n int) []peerAction { return a[:len(a)-n] }
	for _, tc := range []struct {
		name   string
		ours   func(ctx context.Context, conn net.Conn, cfg *Config) error
		ourEnd Role
		peer   []peerAction
		want   error    // nil: success
		text   []string // substrings of the error
	}{
		{name: "client/peer closes", ours: clientUpToDests, ourEnd: Client, peer: perftest25Server()},
		{name: "client/peer resets", ours: clientUpToDests, ourEnd: Client, peer: perftest25Server(resetOnClose())},
		// the reset comes once our "done\0" has reached the peer, unread
		{name: "client/peer resets after our done", ours: clientUpToDests, ourEnd: Client,
			peer: perftest25Server(pause(), resetOnClose())},
		{name: "server/peer closes", ours: serverUpToDests, ourEnd: Server, peer: perftest25Client()},
		{name: "server/peer resets", ours: serverUpToDests, ourEnd: Server, peer: perftest25Client(resetOnClose())},
		// perftest 4.5's close: "done\0", read or not
		{name: "client/peer says done", ours: clientUpToDests, ourEnd: Client, peer: perftest25Server(send([]byte(Done)))},
		{name: "server/peer says done", ours: serverUpToDests, ourEnd: Server,
			peer: perftest25Client(send([]byte(Done)), recv(DoneLen))},
		// what stays an error
		{name: "client/peer closes inside done", ours: clientUpToDests, ourEnd: Client,
			peer: perftest25Server(send([]byte("do"))),
			want: ErrClosed, text: []string{"close_connection: read", `expected 5 bytes of "done\0"`, `got 2 bytes "do"`}},
		{name: "server/peer resets inside done", ours: serverUpToDests, ourEnd: Server,
			peer: perftest25Client(send([]byte("don")), pause(), resetOnClose()),
			want: ErrClosed, text: []string{"perftest server close_connection: read", "got 3 bytes"}},
		{name: "client/peer sends another message", ours: clientUpToDests, ourEnd: Client,
			peer: perftest25Server(send([]byte("stop\x00"))),
			want: ErrFormat, text: []string{"close_connection"}},
		{name: "client/peer closes before the closing handshake", ours: clientUpToDests, ourEnd: Client,
			peer: short(perftest25Server(), 1),
			want: ErrClosed, text: []string{"close_connection handshake: read"}},
		{name: "server/peer closes before the closing handshake", ours: serverUpToDests, ourEnd: Server,
			peer: short(perftest25Client(), 2),
			want: ErrClosed, text: []string{"close_connection handshake: read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runAgainst(t, tc.ours, tc.ourEnd, tc.peer)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("our %v: %v", tc.ourEnd, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			for _, s := range tc.text {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

// TestCloseConnectionClosedHere: a connection closed on this side is not a
// peer that went away: CloseConnection reports it.
func TestCloseConnectionClosedHere(t *testing.T) {
	client, server := connPair(t)
	defer server.Close()
	go scriptedPeer(server, perftest25Server(hold()))
	p := NewPerftest(closeBeforeDone{Conn: client}, Client, &Config{Timeout: shortTimeout})
	ctx := context.Background()
	if _, err := p.ExchangeVersions(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CheckSysData(ctx, DefaultSysData); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CheckMTU(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ExchangeDests(ctx, []PerftestDest{{QPN: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	err := p.CloseConnection(ctx)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("error %v, want ErrClosed for a connection closed on this side", err)
	}
}

// closeBeforeDone closes the connection when the "done\0" is written, as a
// caller that closes it under the exchange would.
type closeBeforeDone struct{ net.Conn }

func (c closeBeforeDone) Write(b []byte) (int, error) {
	if string(b) == Done {
		c.Conn.Close()
	}
	return c.Conn.Write(b)
}
