//go:build linux

package afpacket

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// neighbors finds the MAC address of the next hop to a destination: the
// route (RTM_GETROUTE) gives the gateway, if any, and the neighbour table
// (RTM_GETNEIGH) its MAC. When the kernel has no entry yet, an empty UDP
// datagram to the destination's discard port makes the kernel resolve it
// (ARP or NDP), and the table is read again until ResolveTimeout. Results
// are cached for NeighborTTL. It is safe for concurrent use.
type neighbors struct {
	mu       sync.Mutex
	fd       int // NETLINK_ROUTE socket
	seq      uint32
	ifindex  int
	loopback bool
	poke     *net.UDPConn
	ttl      time.Duration
	timeout  time.Duration
	cache    map[netip.Addr]neighEntry
	buf      []byte
}

type neighEntry struct {
	mac     [6]byte
	expires time.Time
}

func newNeighbors(ifi *net.Interface, poke *net.UDPConn, ttl, timeout time.Duration) (*neighbors, error) {
	n := &neighbors{
		fd: -1, ifindex: ifi.Index, loopback: ifi.Flags&net.FlagLoopback != 0, poke: poke,
		ttl: ttl, timeout: timeout, cache: make(map[netip.Addr]neighEntry), buf: make([]byte, 1<<16),
	}
	if n.loopback {
		return n, nil
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("afpacket: netlink socket: %w", os.NewSyscallError("socket", err))
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afpacket: netlink bind: %w", os.NewSyscallError("bind", err))
	}
	tv := unix.NsecToTimeval(int64(time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afpacket: netlink: %w", os.NewSyscallError("setsockopt", err))
	}
	n.fd = fd
	return n, nil
}

func (n *neighbors) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
}

// lookup returns the MAC address to send frames for dst to.
func (n *neighbors) lookup(dst netip.Addr, now time.Time) ([6]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.cache[dst]; ok && now.Before(e.expires) {
		return e.mac, nil
	}
	if n.loopback {
		n.cache[dst] = neighEntry{expires: now.Add(n.ttl)}
		return [6]byte{}, nil
	}
	if n.fd < 0 {
		return [6]byte{}, fmt.Errorf("afpacket: resolve %v: %w", dst, net.ErrClosed)
	}
	hop, err := n.route(dst)
	if err != nil {
		return [6]byte{}, err
	}
	mac, ok, err := n.neighbor(hop)
	deadline := now.Add(n.timeout)
	for tries := 0; err == nil && !ok; tries++ { // bounded by the deadline
		if tries%50 == 0 { // every 250 ms, ask the kernel again
			_, _ = n.poke.WriteToUDPAddrPort(nil, netip.AddrPortFrom(dst, 9))
		}
		if time.Now().After(deadline) {
			return [6]byte{}, errorf(ErrNoNeighbor, "no ARP/NDP answer from %v (next hop to %v) within %v", hop, dst, n.timeout)
		}
		time.Sleep(5 * time.Millisecond)
		mac, ok, err = n.neighbor(hop)
	}
	if err != nil {
		return [6]byte{}, err
	}
	n.cache[dst] = neighEntry{mac: mac, expires: time.Now().Add(n.ttl)}
	return mac, nil
}

// request sends a netlink request and returns the messages of the answer.
func (n *neighbors) request(typ uint16, flags uint16, body []byte) ([]syscall.NetlinkMessage, error) {
	n.seq++
	msg := make([]byte, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(msg[8:], n.seq)
	copy(msg[unix.NLMSG_HDRLEN:], body)
	if err := unix.Sendto(n.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("afpacket: netlink: %w", os.NewSyscallError("sendto", err))
	}
	var out []syscall.NetlinkMessage
	for range 1000 { // a dump arrives in a bounded number of parts
		k, _, err := unix.Recvfrom(n.fd, n.buf, 0)
		if err != nil {
			return nil, fmt.Errorf("afpacket: netlink: %w", os.NewSyscallError("recvfrom", err))
		}
		msgs, err := syscall.ParseNetlinkMessage(n.buf[:k])
		if err != nil {
			return nil, fmt.Errorf("afpacket: netlink: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != n.seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return out, syscall.Errno(-e)
					}
				}
				return out, nil
			}
			out = append(out, m)
		}
		if flags&unix.NLM_F_DUMP == 0 && len(out) > 0 {
			return out, nil
		}
	}
	return out, fmt.Errorf("afpacket: netlink: answer too long")
}

// route returns the next hop to dst: its gateway, or dst itself when it is
// on link. The route must leave through our interface.
func (n *neighbors) route(dst netip.Addr) (netip.Addr, error) {
	family, alen := unix.AF_INET6, 16
	if dst.Is4() {
		family, alen = unix.AF_INET, 4
	}
	body := make([]byte, unix.SizeofRtMsg+unix.SizeofRtAttr+alen)
	body[0] = byte(family)
	body[1] = byte(alen * 8) // rtm_dst_len
	binary.NativeEndian.PutUint16(body[unix.SizeofRtMsg:], uint16(unix.SizeofRtAttr+alen))
	binary.NativeEndian.PutUint16(body[unix.SizeofRtMsg+2:], unix.RTA_DST)
	copy(body[unix.SizeofRtMsg+unix.SizeofRtAttr:], dst.AsSlice())
	msgs, err := n.request(unix.RTM_GETROUTE, 0, body)
	if err != nil {
		return netip.Addr{}, errorf(ErrNoNeighbor, "no route to %v: %w", dst, err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWROUTE {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			continue
		}
		hop, oif := dst, 0
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.RTA_GATEWAY:
				if g, ok := netip.AddrFromSlice(a.Value); ok {
					hop = g
				}
			case unix.RTA_OIF:
				if len(a.Value) >= 4 {
					oif = int(binary.NativeEndian.Uint32(a.Value))
				}
			}
		}
		if oif != n.ifindex {
			return netip.Addr{}, errorf(ErrNoNeighbor, "the route to %v leaves through interface %d, not %d", dst, oif, n.ifindex)
		}
		return hop, nil
	}
	return netip.Addr{}, errorf(ErrNoNeighbor, "no route to %v", dst)
}

// Usable neighbour states: the kernel has a MAC address it stands by.
const usableNUD = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE |
	unix.NUD_PERMANENT | unix.NUD_NOARP

// neighbor reads the kernel's neighbour table for hop on our interface.
func (n *neighbors) neighbor(hop netip.Addr) (mac [6]byte, ok bool, err error) {
	family := unix.AF_INET6
	if hop.Is4() {
		family = unix.AF_INET
	}
	body := make([]byte, unix.SizeofNdMsg)
	body[0] = byte(family)
	binary.NativeEndian.PutUint32(body[4:], uint32(n.ifindex))
	msgs, err := n.request(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, body)
	if err != nil {
		return mac, false, err
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWNEIGH || len(m.Data) < unix.SizeofNdMsg {
			continue
		}
		ifindex := int(int32(binary.NativeEndian.Uint32(m.Data[4:])))
		state := binary.NativeEndian.Uint16(m.Data[8:])
		if ifindex != n.ifindex || state&usableNUD == 0 {
			continue
		}
		var dst netip.Addr
		var ll []byte
		for b := m.Data[unix.SizeofNdMsg:]; len(b) >= unix.SizeofRtAttr; {
			l := int(binary.NativeEndian.Uint16(b))
			if l < unix.SizeofRtAttr || l > len(b) {
				break
			}
			switch binary.NativeEndian.Uint16(b[2:]) {
			case unix.NDA_DST:
				dst, _ = netip.AddrFromSlice(b[unix.SizeofRtAttr:l])
			case unix.NDA_LLADDR:
				ll = b[unix.SizeofRtAttr:l]
			}
			al := (l + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1)
			if al >= len(b) {
				break
			}
			b = b[al:]
		}
		if dst == hop && len(ll) == 6 {
			return [6]byte(ll), true, nil
		}
	}
	return mac, false, nil
}
