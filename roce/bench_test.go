package roce_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/roce/rocetest"
	"github.com/goroce/goroce/verbs"
)

// BenchmarkUDPStream streams RDMA WRITEs (and READs, SENDs) from one
// device to another over loopback UDP sockets in this process, keeping
// depth requests in flight: the engine, the transport and the kernel's
// UDP path together.
func BenchmarkUDPStream(b *testing.B) {
	for _, c := range []struct {
		op   verbs.WROpcode
		size int
	}{
		{verbs.OpWrite, 64 << 10}, {verbs.OpRead, 64 << 10}, {verbs.OpSend, 64 << 10}, {verbs.OpWrite, 2},
	} {
		b.Run(fmt.Sprintf("%v/%d", c.op, c.size), func(b *testing.B) {
			port := freePortB(b)
			da := openB(b, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port}})
			db := openB(b, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.2"), Port: port, PeerPort: port}})
			rocetest.Stream(b, da, db, c.op, c.size, 16)
		})
	}
}

func openB(b *testing.B, c *roce.Config) verbs.Device {
	d, err := roce.Open(c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func freePortB(b *testing.B) uint16 {
	var t testing.T
	p := freePort(&t)
	if t.Failed() {
		b.Fatal("no free port")
	}
	return p
}

// BenchmarkUDPPingPong measures the round trip of a 2-byte SEND answered by
// a SEND, over loopback UDP, with both sides' threads spinning on their
// CQs: with busy polling each thread receives and handles its own packets.
func BenchmarkUDPPingPong(b *testing.B) {
	for _, busy := range []bool{false, true} {
		b.Run(fmt.Sprintf("busypoll=%v", busy), func(b *testing.B) {
			port := freePortB(b)
			var bp time.Duration
			if busy {
				bp = time.Microsecond
			}
			da := openB(b, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port, PeerPort: port}, BusyPoll: bp})
			db := openB(b, &roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.2"), Port: port, PeerPort: port}, BusyPoll: bp})
			rocetest.PingPong(b, da, db, 2)
		})
	}
}
