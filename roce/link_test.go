package roce

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/mem"
)

// TestBusyPollThroughRejecter checks that the device still finds its
// link's Poller under the rejecter, and only where the link has one.
func TestBusyPollThroughRejecter(t *testing.T) {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	d, err := Open(&Config{Link: &UDP{Addr: netip.MustParseAddr("127.0.0.1"), Port: port}, BusyPoll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok := d.dev.eng.Transport().(transport.Poller); !ok {
		t.Error("the udp link's Poller is hidden")
	}
	if _, ok := d.dev.eng.Transport().(transport.Waiter); !ok {
		t.Error("the udp link's Waiter is hidden: waiting goroutines cannot receive themselves")
	}
	n := mem.NewNetwork(nil)
	defer n.Close()
	m, err := Open(&Config{Link: &Mem{Network: n, Addr: netip.MustParseAddr("198.18.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.dev.eng.Transport().(transport.Poller); ok {
		t.Error("the mem link has no Poller, but the device sees one")
	}
	if _, ok := m.dev.eng.Transport().(transport.Waiter); ok {
		t.Error("the mem link has no Waiter, but the device sees one")
	}
	if !transport.SendsPayload(m.dev.eng.Transport()) {
		t.Error("the mem link takes payloads apart, but the device no longer sees it")
	}
}
