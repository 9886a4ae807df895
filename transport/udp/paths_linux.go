//go:build linux

package udp

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// A transport with Config.Paths > 1 is a Transport per path: the first is
// the one New returns, which holds the others in more. Each has its own
// receiving socket (all of them bound to one address and port with
// SO_REUSEPORT, in path order), its own sending socket and receive
// goroutine, and its own send buffers, so that the paths never wait for
// one another.
//
// Steering keeps each QP's packets on one path, in order. A packet leaves
// on the path its destination QP number picks (modulo the number of
// paths), from that path's sending port, whose remainder modulo the
// number of paths is the path's index (openPathSender). The kernel hands
// a received datagram to the socket that a BPF program on the group picks
// by UDP source port, modulo the number of paths (steerProgram): all the
// packets of a peer's QP come from one port, and a GRO train, whose
// segments share their ports, goes whole to the path each of them would
// take alone. Between two goroce transports with the same number of paths,
// a QP's packets thus reach the path of the QP's own number at each end.

// openPaths opens a transport of r.Paths paths.
func openPaths(r resolved) (*Transport, error) {
	// Sockets with SO_REUSEPORT join a group that another process of
	// the same user could have made on the address already, and would
	// share its datagrams; a plain socket fails to bind there.
	if err := portFree(r); err != nil {
		return nil, err
	}
	t, err := open(r, 0)
	if err != nil {
		return nil, err
	}
	for k := 1; k < r.Paths; k++ {
		p, err := open(r, k)
		if err != nil {
			t.Close()
			return nil, err
		}
		t.more = append(t.more, p)
	}
	if err := t.steer(); err != nil {
		// The kernel then picks by a hash of the addresses and ports:
		// each peer QP's packets still take one path.
		t.log.Warn("udp: paths not steered by source port", "addr", t.local, "err", err)
	}
	return t, nil
}

// portFree fails, as listening there would without SO_REUSEPORT, if a
// socket is bound to r.Addr.
func portFree(r resolved) error {
	network := "udp6"
	if r.ipv4 {
		network = "udp4"
	}
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), network, r.Addr.String())
	if err != nil {
		return fmt.Errorf("udp: listen on %v: %w", r.Addr, err)
	}
	return pc.Close()
}

// reusePort is the ListenConfig.Control of a path's receiving socket.
func reusePort(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); cerr != nil {
		return cerr
	}
	return os.NewSyscallError("setsockopt SO_REUSEPORT", err)
}

// skfNetOff is SKF_NET_OFF: a classic BPF load at this offset plus k
// reads byte k of the IP header.
const skfNetOff = 0xfff00000

// steerProgram returns the classic BPF program that picks a path's socket
// for a datagram: its UDP source port modulo n. The program of a
// reuseport group sees the datagram's payload; the port is read from the
// IP header's end (the header's length from IPv4's IHL; IPv6 as RoCEv2
// sends it, without extension headers). A datagram too short to read
// returns 0: the first path, where it is counted as malformed.
func steerProgram(ipv4 bool, n int) ([]unix.SockFilter, error) {
	var prog []bpf.Instruction
	if ipv4 {
		prog = []bpf.Instruction{
			bpf.LoadMemShift{Off: skfNetOff},          // X = the IPv4 header's length
			bpf.LoadIndirect{Off: skfNetOff, Size: 2}, // A = the UDP source port
		}
	} else {
		prog = []bpf.Instruction{bpf.LoadAbsolute{Off: skfNetOff + 40, Size: 2}}
	}
	prog = append(prog, bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(n)}, bpf.RetA{})
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	f := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		f[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return f, nil
}

// steer attaches steerProgram to the paths' reuseport group.
func (t *Transport) steer() error {
	f, err := steerProgram(t.cfg.ipv4, t.cfg.Paths)
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if cerr := t.rc.Control(func(fd uintptr) {
		err = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &prog)
	}); cerr != nil {
		return cerr
	}
	return os.NewSyscallError("setsockopt SO_ATTACH_REUSEPORT_CBPF", err)
}

// openPathSender opens the path's sending socket, on a port whose
// remainder modulo the number of paths is the path's index when there is
// more than one: the free port of that kind nearest the kernel's choice.
func (t *Transport) openPathSender() error {
	n, k := t.cfg.Paths, t.path
	if err := t.openSender(0); err != nil || n <= 1 {
		return err
	}
	got := int(t.txPort)
	if got%n == k {
		return nil
	}
	first := t.txFD
	base := got - got%n + k
	for j := range 64 {
		for _, p := range [2]int{base + j*n, base - (j+1)*n} {
			if p >= 1024 && p <= 65535 && t.openSender(uint16(p)) == nil {
				unix.Close(first)
				return nil
			}
		}
	}
	t.log.Debug("udp: no send port for the path; peers may steer its packets to another", "path", k, "port", got)
	return nil
}

// pathOf returns the path of n that p leaves on: its destination QP
// number modulo n.
func pathOf(p *transport.Packet, n int) int {
	if len(p.Data) < bth.BTHLen {
		return 0
	}
	qpn := uint32(p.Data[5])<<16 | uint32(p.Data[6])<<8 | uint32(p.Data[7])
	return int(qpn % uint32(n))
}

// sendPaths is Send on a transport of several paths: each path sends its
// packets, in their order, on its own socket.
func (t *Transport) sendPaths(pkts []transport.Packet) error {
	n := 1 + len(t.more)
	var firstErr error
	for k := range n {
		p := t
		if k > 0 {
			p = t.more[k-1]
		}
		if err := p.sendPath(pkts, k, n); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// sendPath sends the packets of pkts that take path k of n, which t is,
// and writes back into each what Send writes.
func (t *Transport) sendPath(pkts []transport.Packet, k, n int) error {
	tx := t.lockTx(pkts)
	defer tx.mu.Unlock()
	sel, at := tx.sel[:0], tx.selAt[:0]
	for i := range pkts {
		if pathOf(&pkts[i], n) == k {
			sel = append(sel, pkts[i])
			at = append(at, i)
		}
	}
	var err error
	if len(sel) > 0 {
		err = t.send(tx, sel)
		for j, i := range at {
			pkts[i].IPID, pkts[i].SrcPort, pkts[i].Src = sel[j].IPID, sel[j].SrcPort, sel[j].Src
		}
		clear(sel) // the caller's memory is not the path's to keep
	}
	tx.sel, tx.selAt = sel[:0], at[:0]
	return err
}

// addStats returns the sum of a and b.
func addStats(a, b transport.Stats) transport.Stats {
	a.TxPackets += b.TxPackets
	a.TxBytes += b.TxBytes
	a.RxPackets += b.RxPackets
	a.RxBytes += b.RxBytes
	a.TxErrors += b.TxErrors
	a.RxICRCErrors += b.RxICRCErrors
	a.RxMalformed += b.RxMalformed
	a.RxDropped += b.RxDropped
	return a
}
