package qp

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/transport"
)

// TestDeregWaitsForInPlaceSend: a packet that carries a region's bytes in
// place (a READ response, or a request's payload, of 512 bytes or more)
// is read by the link after the engine's access to the region has ended.
// Dereg must not return, and hand the memory back, until that send is
// done: until the link returns, here held up on purpose. (Dereg returned
// at once before regions were pinned for the send.)
func TestDeregWaitsForInPlaceSend(t *testing.T) {
	for _, c := range []struct {
		name   string
		region func(a *adversary) *mr.MR
		start  func(a *adversary)
	}{
		{"READ response from the responder's region", func(a *adversary) *mr.MR { return a.mr }, func(a *adversary) {
			a.inject(a.req(bth.RCReadRequest, 0, 0).rethOf(a.mr.Addr(), a.mr.RKey(), 1024))
		}},
		{"WRITE from the requester's buffer", func(a *adversary) *mr.MR { return a.lbuf }, func(a *adversary) {
			a.post(a.write(1, 0, 1024))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAdversary(t, advOpts{mtu: bth.MTU1024})
			m := c.region(a)
			want := bytes.Clone(m.Bytes()[:1024])
			inSend, release := make(chan []byte, 1), make(chan struct{})
			a.link.onSend = func(pkts []transport.Packet) {
				for _, p := range pkts {
					if p.Payload != nil {
						inSend <- p.Payload
						<-release
						return
					}
				}
			}
			go c.start(a)
			var payload []byte
			select {
			case payload = <-inSend:
			case <-time.After(5 * time.Second):
				t.Fatal("no packet with its payload in place was sent")
			}
			dereged := make(chan error, 1)
			go func() { dereged <- m.Dereg() }()
			select {
			case err := <-dereged:
				close(release)
				t.Fatalf("Dereg returned (%v) while the link was still reading the region in place", err)
			case <-time.After(100 * time.Millisecond):
			}
			if !bytes.Equal(payload, want) {
				t.Errorf("the packet carries other bytes than the region's")
			}
			close(release)
			select {
			case err := <-dereged:
				if err != nil {
					t.Fatalf("Dereg: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Dereg did not return within 5 s of the send's end")
			}
		})
	}
}
