package transport_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/internal/transporttest"
	"github.com/goroce/goroce/transport/udp"
)

func roce(rng *rand.Rand, op bth.Opcode, n int, psn bth.PSN) []byte {
	b := make([]byte, bth.Len(op, n))
	var p bth.Packet
	p.Build(b, &bth.BTHFields{Opcode: op, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: psn}, n)
	for i := range p.Payload {
		p.Payload[i] = byte(rng.Uint32())
	}
	return b
}

// readCapture returns the IP packets in a LinkTypeRaw capture.
func readCapture(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != pcapfile.LinkTypeRaw {
		t.Fatalf("link type %d", r.LinkType())
	}
	var out [][]byte
	for range 100000 {
		d, _, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// TestSniffUDP records a udp transport pair, IPv4 with GSO and IPv6 on
// ports other than 4791, and checks that every record's ICRC verifies
// against the synthesized headers and that the records are what went and
// came.
func TestSniffUDP(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[ipv6], func(t *testing.T) {
			if runtime.GOOS != "linux" {
				t.Skip("udp transport is Linux-only")
			}
			ca := &udp.Config{Addr: netip.MustParseAddrPort("127.71.50.1:4791")}
			cb := &udp.Config{Addr: netip.MustParseAddrPort("127.71.50.2:4791")}
			if ipv6 {
				ca = &udp.Config{Addr: netip.MustParseAddrPort("[::1]:47911"), PeerPort: 47912}
				cb = &udp.Config{Addr: netip.MustParseAddrPort("[::1]:47912"), PeerPort: 47911}
			}
			a, err := udp.New(ca)
			if err != nil {
				t.Fatal(err)
			}
			b, err := udp.New(cb)
			if err != nil {
				a.Close()
				t.Fatal(err)
			}
			defer b.Close()
			path := filepath.Join(t.TempDir(), "sniff.pcap")
			file, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer file.Close()
			w, err := pcapfile.NewWriter(file, pcapfile.LinkTypeRaw)
			if err != nil {
				t.Fatal(err)
			}
			sa := transport.Sniff(a, w)
			var mu sync.Mutex
			var echoed int
			got := make(chan struct{}, 1)
			if err := b.Start(func(p []transport.Packet) {
				// Echo back to a, through its own Send.
				back := make([]transport.Packet, len(p))
				for i := range p {
					back[i] = transport.Packet{Data: append([]byte(nil), p[i].Data...), Dst: p[i].Src, TOS: 0x04}
				}
				b.Send(back)
			}); err != nil {
				t.Fatal(err)
			}
			if err := sa.Start(func(p []transport.Packet) {
				for i := range p {
					if err := transporttest.CheckParsed(&p[i]); err != nil {
						t.Errorf("through the sniffer: %v", err)
					}
				}
				mu.Lock()
				echoed += len(p)
				mu.Unlock()
				select {
				case got <- struct{}{}:
				default:
				}
			}); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var pkts []transport.Packet
			for i := range 20 {
				op, n := bth.Opcode(0x01), 1024
				if i%5 == 4 {
					op, n = 0x02, rng.IntN(1024)
				}
				pkts = append(pkts, transport.Packet{Data: roce(rng, op, n, bth.PSN(i)), Dst: b.LocalAddr(), TOS: 0x02})
			}
			if err := sa.Send(pkts); err != nil {
				t.Fatal(err)
			}
			deadline := time.After(5 * time.Second)
			for done := false; !done; {
				select {
				case <-got:
					mu.Lock()
					done = echoed >= len(pkts)
					mu.Unlock()
				case <-deadline:
					t.Fatalf("echo: %d of %d", echoed, len(pkts))
				}
			}
			if err := sa.Close(); err != nil {
				t.Fatal(err)
			}
			recs := readCapture(t, path)
			if len(recs) != 2*len(pkts) {
				t.Fatalf("%d records, want %d", len(recs), 2*len(pkts))
			}
			var sent, recv int
			for i, r := range recs {
				var fr bth.Frame
				if err := bth.ParseFrame(&fr, r, bth.LinkIP); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				icrc := binary.LittleEndian.Uint32(fr.Payload[len(fr.Payload)-4:])
				if bth.FrameICRC(fr.IP) != icrc {
					t.Errorf("record %d (%v:%d -> %v:%d ID %d): ICRC does not verify", i,
						fr.Flow.Src, fr.Flow.SrcPort, fr.Flow.Dst, fr.Flow.DstPort, fr.Flow.ID)
				}
				if fr.Flow.Dst == b.LocalAddr() && fr.Flow.DstPort == b.LocalPort() {
					if !bytes.Equal(fr.Payload, pkts[sent].Data) || fr.Flow.Src != a.LocalAddr() || fr.Flow.SrcPort != a.SendPort() {
						t.Errorf("sent record %d differs (from %v:%d)", sent, fr.Flow.Src, fr.Flow.SrcPort)
					}
					sent++
				} else {
					recv++
				}
			}
			if sent != len(pkts) || recv != len(pkts) {
				t.Errorf("%d sent and %d received records", sent, recv)
			}
			if tshark, err := exec.LookPath("tshark"); err == nil {
				out, err := exec.Command(tshark, "-r", path, "-d", "udp.port==47911,infiniband",
					"-d", "udp.port==47912,infiniband", "-T", "fields", "-e", "infiniband.bth.opcode").Output()
				if err != nil {
					t.Fatalf("tshark: %v\n%s", err, out)
				}
				if n := len(strings.Fields(string(out))); n != len(recs) {
					t.Errorf("tshark decoded %d InfiniBand packets of %d:\n%s", n, len(recs), out)
				}
			}
		})
	}
}

// fake is a Transport that delivers what it sends to its own handler, with
// the ports and ID it reports.
type fake struct {
	h transport.Handler
}

func (f *fake) Start(h transport.Handler) error { f.h = h; return nil }
func (f *fake) Send(p []transport.Packet) error {
	for i := range p {
		if len(p[i].Data) < bth.BTHLen+bth.ICRCLen {
			continue
		}
		if !p[i].Src.IsValid() {
			p[i].Src = f.LocalAddr()
		}
		fl := bth.Flow{Src: p[i].Src, Dst: p[i].Dst, SrcPort: p[i].SrcPort, DstPort: bth.UDPPort, ID: 7, DF: true}
		fl.Seal(p[i].Data)
		p[i].IPID = 7
	}
	if f.h != nil {
		f.h(p)
	}
	return nil
}
func (f *fake) LocalAddr() netip.Addr  { return netip.MustParseAddr("198.18.0.1") }
func (f *fake) BatchSize() int         { return 8 }
func (f *fake) MaxPacket() int         { return 4224 }
func (f *fake) Stats() transport.Stats { return transport.Stats{} }
func (f *fake) Close() error           { return nil }

// TestSniffFake records through a transport without PortReporter (ports
// 4791), with IPv4-mapped addresses and bad packets that are skipped.
func TestSniffFake(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcapfile.NewWriter(&buf, pcapfile.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	s := transport.Sniff(&fake{}, w)
	if err := s.Start(func([]transport.Packet) {}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	pkts := []transport.Packet{
		{Data: roce(rng, 0x04, 10, 1), Src: netip.MustParseAddr("::ffff:198.18.0.1"), Dst: netip.MustParseAddr("::ffff:198.18.0.11"), SrcPort: 0xC001},
		{Data: []byte{1, 2}, Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.11")},
		{Data: roce(rng, 0x04, 10, 1), Dst: netip.MustParseAddr("198.18.0.11"), SrcPort: 0xC002}, // no Src: the local address
	}
	if err := s.Send(pkts); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "f.pcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	recs := readCapture(t, path)
	// The fake hands what it sends to its handler, so each of the two good
	// packets is recorded as received and as sent; the short one is not.
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	for i, r := range recs {
		var fr bth.Frame
		if err := bth.ParseFrame(&fr, r, bth.LinkIP); err != nil {
			t.Fatal(err)
		}
		if fr.IPv4 == nil || fr.Flow.ID != 7 || fr.Flow.DstPort != bth.UDPPort {
			t.Errorf("record %d: %+v", i, fr.Flow)
		}
		if bth.FrameICRC(fr.IP) != binary.LittleEndian.Uint32(fr.Payload[len(fr.Payload)-4:]) {
			t.Errorf("record %d: ICRC does not verify", i)
		}
	}
}
