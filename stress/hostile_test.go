//go:build linux

package stress

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goroce/goroce/bth"
)

// hostile sends RoCEv2 packets it builds itself from a plain UDP socket,
// bound to the address it claims to be (any 127/8 address will do on
// loopback, so it can pose as a legitimate peer) and aimed at a victim's
// address and port.
type hostile struct {
	conn *net.UDPConn
	dst  netip.AddrPort
	flow bth.Flow
}

// newHostile opens a socket on src (port 0: an ephemeral one) towards dst.
func newHostile(t testing.TB, src netip.AddrPort, dst netip.AddrPort) *hostile {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(src))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Don't fragment, as the engine's sockets send: the ICRC covers the
	// IPv4 flags.
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_DO)
		if serr == nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<20)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	return &hostile{conn: c, dst: dst, flow: bth.Flow{Src: local.Addr().Unmap(), Dst: dst.Addr(),
		SrcPort: local.Port(), DstPort: dst.Port(), DF: true}}
}

// pkt describes one hostile packet.
type pkt struct {
	op      bth.Opcode
	qpn     uint32
	psn     bth.PSN
	ackReq  bool
	reth    *bth.RETHFields
	atomic  *bth.AtomicETHFields
	aeth    *bth.AETHFields
	deth    *bth.DETHFields
	payload int
	data    []byte // the payload, when set (else 0xEE bytes)
}

// build returns the sealed packet p describes, its payload p.data or
// 0xEE bytes.
func (h *hostile) build(p pkt) []byte {
	b := make([]byte, bth.Len(p.op, p.payload))
	var v bth.Packet
	v.Build(b, &bth.BTHFields{Opcode: p.op, PKey: bth.DefaultPKey, DestQP: p.qpn, PSN: p.psn, AckReq: p.ackReq},
		p.payload)
	if p.reth != nil && v.RETH != nil {
		v.RETH.Encode(p.reth)
	}
	if p.atomic != nil && v.AtomicETH != nil {
		v.AtomicETH.Encode(p.atomic)
	}
	if p.aeth != nil && v.AETH != nil {
		v.AETH.Encode(p.aeth)
	}
	if p.deth != nil && v.DETH != nil {
		v.DETH.Encode(p.deth)
	}
	for i := range v.Payload {
		v.Payload[i] = 0xEE
	}
	copy(v.Payload, p.data)
	h.flow.Seal(b)
	return b
}

// send sends b once and reports whether it went.
func (h *hostile) send(b []byte) bool {
	_, err := h.conn.WriteToUDPAddrPort(b, h.dst)
	return err == nil
}

// garbage returns n random bytes.
func garbage(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
