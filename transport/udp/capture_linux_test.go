//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netnstest"
	"github.com/goroce/goroce/transport"
)

// TestWireICRC proves the header prediction: it captures what the kernel
// puts on the wire (an AF_PACKET socket on lo, in a namespace of its own
// whose lo segments UDP GSO sends in software, as a NIC without UDP
// segmentation offload does) and checks every frame's ICRC against its
// real IP header with bth.FrameICRC, and the IPv4 IDs: 0 for a single
// datagram, 0, 1, 2... for the segments of a GSO send.
func TestWireICRC(t *testing.T) {
	ns := netnstest.New(t)
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Skip("needs ethtool")
	}
	netnstest.Run(t, "ip", "netns", "exec", ns, "ethtool", "-K", "lo", "tx-udp-segmentation", "off")
	for _, tc := range []struct {
		name string
		ipv6 bool
		gso  Offload
	}{
		{"ipv4/gso", false, OffloadOn},
		{"ipv4/plain", false, OffloadOff},
		{"ipv6/gso", true, OffloadOn},
		{"ipv6/plain", true, OffloadOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := &Config{Addr: netip.MustParseAddrPort("127.0.0.1:4791"), GSO: tc.gso}
			cb := &Config{Addr: netip.MustParseAddrPort("127.0.0.2:4791")}
			if tc.ipv6 {
				ca = &Config{Addr: netip.MustParseAddrPort("[::1]:4791"), PeerPort: 4792, GSO: tc.gso}
				cb = &Config{Addr: netip.MustParseAddrPort("[::1]:4792"), PeerPort: bth.UDPPort}
			}
			var a, b *Transport
			var fd int
			netnstest.In(t, ns, func() {
				a, b = mustNew(t, ca), mustNew(t, cb)
				fd = captureSocket(t)
			})
			rng := rand.New(rand.NewPCG(11, 12))
			var sent []transport.Packet
			for _, n := range []int{1, 5, 64, 17} {
				pkts := randomBatch(rng, n, a.LocalAddr(), b.LocalAddr(), 0x01)
				if err := a.Send(pkts); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, pkts...)
			}
			gsoIDs := 0
			for i, p := range sent {
				fr, ip := nextFrame(t, fd, a.SendPort(), b.LocalPort())
				if ip == nil {
					t.Fatalf("frame %d of %d not captured", i, len(sent))
				}
				if !bytes.Equal(fr.Payload, p.AppendTo(nil)) {
					t.Fatalf("frame %d: UDP payload of %d bytes, sent %d (a GSO train left whole?)", i, len(fr.Payload), p.Len())
				}
				if got, want := bth.FrameICRC(ip), binary.LittleEndian.Uint32(p.Data[len(p.Data)-4:]); got != want {
					t.Errorf("frame %d: ICRC of the wire header %#08x, sealed %#08x", i, got, want)
				}
				if fr.IPv4 != nil {
					if !fr.IPv4.DF() || fr.IPv4.ID() != p.IPID {
						t.Errorf("frame %d: DF %v ID %d, predicted DF and ID %d", i, fr.IPv4.DF(), fr.IPv4.ID(), p.IPID)
					}
					if fr.IPv4.ID() != 0 {
						gsoIDs++
					}
					if fr.IPv4.TOS() != 0x01 {
						t.Errorf("frame %d: TOS %#x", i, fr.IPv4.TOS())
					}
				} else if fr.IPv6.TrafficClass() != 0x01 {
					t.Errorf("frame %d: traffic class %#x", i, fr.IPv6.TrafficClass())
				}
			}
			if tc.gso == OffloadOn && !tc.ipv6 && gsoIDs == 0 {
				t.Error("GSO on, but every frame has ID 0")
			}
			if tc.gso == OffloadOff && gsoIDs != 0 {
				t.Errorf("GSO off, but %d frames have a non-zero ID", gsoIDs)
			}
		})
	}
}

// captureSocket opens an AF_PACKET socket on lo (index 1) that sees each
// frame once (not the outgoing copy) and times out reads after a second.
func captureSocket(t *testing.T) int {
	t.Helper()
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Skipf("AF_PACKET: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: 1}); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return fd
}

// nextFrame returns the next captured UDP frame from port sport to dport,
// skipping others; ip is nil on timeout.
func nextFrame(t *testing.T, fd int, sport, dport uint16) (fr bth.Frame, ip []byte) {
	t.Helper()
	buf := make([]byte, 70000)
	for range 10000 {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fr, nil
		}
		if bth.ParseFrame(&fr, buf[:n], bth.LinkEthernet) != nil || fr.Truncated {
			continue
		}
		if fr.Flow.SrcPort == sport && fr.Flow.DstPort == dport {
			return fr, fr.IP
		}
	}
	return fr, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
