//go:build interop && linux

package udp_test

// Interoperability with the Linux kernel's soft-RoCE driver (rxe) in the
// lab VMs (shared/lab): the test plays the client of ibv_rc_pingpong, sends
// RC SEND messages through each transport (udp with and without GSO,
// afpacket) and checks that rxe accepts them (it ACKs them and answers, and
// it drops packets with a wrong ICRC silently) and that rxe's packets
// arrive verified. Run it in the lab's namespace:
//
//	cd shared/lab && ./up.sh
//	GOROCE_INTEROP_VM=198.18.0.11 GOROCE_INTEROP_LAB=$PWD \
//	  ip netns exec rxelab go test -tags interop -run Interop -v ./transport/udp/
//
// With GOROCE_INTEROP_LAB set, each subtest starts
// `ibv_rc_pingpong -d rxe0 -g 1 -n 5 -s 4096` in VM 1 with the lab's run.sh
// and checks that it exits 0; without it, start one server per subtest by
// hand. GOROCE_INTEROP_LOCAL (198.18.0.1) and GOROCE_INTEROP_IFACE (vhost0)
// name the host side.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/transport/afpacket"
	"github.com/goroce/goroce/transport/udp"
)

const (
	iters = 5
	size  = 4096
	mtu   = 1024 // ibv_rc_pingpong's default path MTU
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestInteropRCPingpong(t *testing.T) {
	vm := os.Getenv("GOROCE_INTEROP_VM")
	if vm == "" {
		t.Skip("set GOROCE_INTEROP_VM to the address of a lab VM (198.18.0.11)")
	}
	server := netip.MustParseAddr(vm)
	local := netip.MustParseAddr(env("GOROCE_INTEROP_LOCAL", "198.18.0.1"))
	lab := os.Getenv("GOROCE_INTEROP_LAB")
	for i, tc := range []struct {
		name string
		open func() (transport.Transport, error)
	}{
		{"udp/gso=on", func() (transport.Transport, error) {
			return udp.New(&udp.Config{Addr: netip.AddrPortFrom(local, bth.UDPPort), GSO: udp.OffloadOn, GRO: udp.OffloadOn})
		}},
		{"udp/gso=off", func() (transport.Transport, error) {
			return udp.New(&udp.Config{Addr: netip.AddrPortFrom(local, bth.UDPPort), GSO: udp.OffloadOff, GRO: udp.OffloadOff})
		}},
		{"afpacket", func() (transport.Transport, error) {
			return afpacket.New(&afpacket.Config{Interface: env("GOROCE_INTEROP_IFACE", "vhost0"), Addr: local})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var job string
			if lab != "" {
				out, err := exec.Command(filepath.Join(lab, "run.sh"), "-b", "-t", "120", "1",
					fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g 1 -n %d -s %d", iters, size)).Output()
				if err != nil {
					t.Fatalf("starting the server: %v", err)
				}
				job = strings.TrimSpace(string(out))
			}
			tr, err := tc.open()
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			pingpong(t, tr, local, server, uint32(0x100+i))
			if s := tr.Stats(); s.RxICRCErrors != 0 || s.RxMalformed != 0 || s.TxErrors != 0 {
				t.Errorf("stats %+v", s)
			}
			if u, ok := tr.(*udp.Transport); ok {
				t.Logf("udp GSO in use at the end: %v", u.GSO())
			}
			t.Logf("stats %+v", tr.Stats())
			if job != "" {
				out, err := exec.Command(filepath.Join(lab, "run.sh"), "-w", job, "1").CombinedOutput()
				t.Logf("ibv_rc_pingpong in the VM:\n%s", out)
				if err != nil {
					t.Errorf("server: %v", err)
				}
			}
		})
	}
}

// pingpong is the client side of ibv_rc_pingpong -n iters -s size.
func pingpong(t *testing.T, tr transport.Transport, local, server netip.Addr, qpn uint32) {
	rx := make(chan transport.Packet, 1024)
	if err := tr.Start(func(p []transport.Packet) {
		for _, q := range p {
			q.Data = append([]byte(nil), q.Data...)
			select {
			case rx <- q:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	// Out of band: "LID:QPN:PSN:GID\0" each way, then "done\0".
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; {
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(server, 18515).String(), 5*time.Second)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("connecting to ibv_rc_pingpong: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	myPSN := bth.PSN(rand.Uint32() & bth.PSNMask)
	gid := netip.AddrFrom16(local.As16()) // ::ffff:a.b.c.d
	g := gid.As16()
	msg := fmt.Sprintf("%04x:%06x:%06x:%x", 0, qpn, uint32(myPSN), g[:]) + "\x00"
	if len(msg) != 52 {
		t.Fatalf("message of %d bytes", len(msg))
	}
	if _, err := io.WriteString(conn, msg); err != nil {
		t.Fatal(err)
	}
	rep := make([]byte, 52)
	if _, err := io.ReadFull(conn, rep); err != nil {
		t.Fatal(err)
	}
	f := strings.Split(strings.TrimRight(string(rep), "\x00"), ":")
	if len(f) != 4 {
		t.Fatalf("server message %q", rep)
	}
	rqpn, err1 := strconv.ParseUint(f[1], 16, 32)
	rpsn, err2 := strconv.ParseUint(f[2], 16, 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("server message %q", rep)
	}
	if _, err := io.WriteString(conn, "done\x00"); err != nil {
		t.Fatal(err)
	}
	t.Logf("server QPN %#06x PSN %#06x GID %s; ours QPN %#06x PSN %#06x", rqpn, rpsn, f[3], qpn, myPSN)

	per := size / mtu
	srcPort := 0xC000 | uint16(qpn&0x3FFF)
	psn, theirPSN := myPSN, bth.PSN(rpsn)
	ids := map[uint16]bool{}
	for i := range iters {
		// Our message: SEND FIRST, MIDDLE..., LAST, equal sizes (one GSO send).
		pkts := make([]transport.Packet, per)
		for k := range per {
			op := bth.Opcode(0x01)
			switch k {
			case 0:
				op = 0x00
			case per - 1:
				op = 0x02
			}
			b := make([]byte, bth.Len(op, mtu))
			var p bth.Packet
			p.Build(b, &bth.BTHFields{Opcode: op, PKey: bth.DefaultPKey, DestQP: uint32(rqpn), PSN: psn.Add(uint32(k)), AckReq: k == per-1}, mtu)
			for j := range p.Payload {
				p.Payload[j] = byte(i + j)
			}
			pkts[k] = transport.Packet{Data: b, Src: local, Dst: server, SrcPort: srcPort}
		}
		if err := tr.Send(pkts); err != nil {
			t.Fatalf("iteration %d: Send: %v", i, err)
		}
		lastPSN := psn.Add(uint32(per - 1))
		acked, got := false, 0
		timeout := time.NewTimer(20 * time.Second)
		for !acked || got < per {
			select {
			case q := <-rx:
				h := bth.BTH(q.Data)
				ids[q.IPID] = true
				if h.DestQP() != qpn {
					t.Fatalf("packet to QPN %#x", h.DestQP())
				}
				switch op := h.Opcode(); op {
				case 0x11: // ACKNOWLEDGE
					a := bth.AETH(q.Data[bth.BTHLen:])
					if a.Syndrome().Kind() != bth.AckKind(0) {
						t.Fatalf("iteration %d: rxe answered %v for PSN %#x", i, a.Syndrome(), h.PSN())
					}
					if h.PSN() == lastPSN {
						acked = true
					}
				case 0x00, 0x01, 0x02, 0x04:
					if h.PSN() != theirPSN.Add(uint32(got)) {
						continue // a retransmission
					}
					got++
					if h.AckReq() {
						ack := make([]byte, bth.Len(0x11, 0))
						var p bth.Packet
						p.Build(ack, &bth.BTHFields{Opcode: 0x11, PKey: bth.DefaultPKey, DestQP: uint32(rqpn), PSN: h.PSN()}, 0)
						p.AETH.Encode(&bth.AETHFields{Syndrome: bth.ACKSyndrome(31), MSN: uint32(i + 1)})
						if err := tr.Send([]transport.Packet{{Data: ack, Src: local, Dst: server, SrcPort: srcPort}}); err != nil {
							t.Fatalf("ACK: %v", err)
						}
					}
				default:
					t.Logf("opcode %v ignored", op)
				}
			case <-timeout.C:
				t.Fatalf("iteration %d: ACK %v, %d of %d packets of the server's message", i, acked, got, per)
			}
		}
		timeout.Stop()
		psn = psn.Add(uint32(per))
		theirPSN = theirPSN.Add(uint32(per))
	}
	t.Logf("%d messages each way; rxe's IPv4 IDs seen: %d distinct", iters, len(ids))
}
