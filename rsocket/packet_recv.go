package rsocket

import (
	"context"
	"net/netip"
	"time"

	"github.com/goroce/goroce/verbs"
)

// The receiving side of a PacketConn: a goroutine that takes the CQ's
// completions (datagrams from the UD QP, and sends done), and one that
// reads the UDP socket (rsocket.c's udp_svc thread). Both queue what they
// accept for ReadFrom.

// pollLoop takes the CQ's completions until ctx ends.
func (c *PacketConn) pollLoop(ctx context.Context) {
	defer c.wg.Done()
	wcs := make([]verbs.WC, 32)
	for {
		n := c.ep.cq.Poll(wcs)
		for i := range wcs[:n] {
			c.complete(&wcs[i])
		}
		if n > 0 {
			continue
		}
		if c.ep.cq.Wait(ctx) != nil {
			return
		}
	}
}

// complete handles one completion: a send's frees its buffer; a
// receive's datagram is checked, queued and its slot posted again.
func (c *PacketConn) complete(wc *verbs.WC) {
	if wc.ID&recvFlag == 0 {
		if wc.Status != verbs.Success {
			c.stats.failed.Add(1)
		}
		c.slots <- int(wc.ID)
		return
	}
	i := int(wc.ID &^ recvFlag)
	if wc.Status == verbs.WRFlushErr {
		return // the QP is going away
	}
	if wc.Status != verbs.Success {
		c.stats.failed.Add(1)
	} else {
		c.receive(c.ep.rbuf[i*rslot:(i+1)*rslot], wc)
	}
	if err := c.ep.postRecv(i); err != nil {
		c.log.Debug("rsocket: datagram receive", "qpn", c.ep.qp.QPN(), "err", err)
	}
}

// receive checks the datagram of a UD receive into slot b and queues it:
// it must start with a valid ds_header whose address is the one the
// packet came from (its GRH's source); when this side has learned that
// address's QPN, the datagram must come from that QP. (A datagram from an
// address not learned yet is taken, as rsocket.c takes it: a peer's answer
// may overtake, on the device, the UDP message that teaches its QPN.)
func (c *PacketConn) receive(b []byte, wc *verbs.WC) {
	if int(wc.ByteLen) > len(b) || wc.ByteLen < grhLen {
		c.stats.badHeader.Add(1)
		return
	}
	data := b[grhLen:wc.ByteLen]
	from, n, ok := parseDSHeader(data)
	if !ok || from.Port() == 0 {
		c.stats.badHeader.Add(1)
		return
	}
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	c.mu.Lock()
	d := c.dests[from]
	stale := d != nil && d.qpn != wc.SrcQP
	c.mu.Unlock()
	if stale || grhSource(b[:grhLen]) != from.Addr() {
		c.stats.unknown.Add(1)
		return
	}
	c.deliver(from, data[n:])
}

// grhSource returns the source address of the GRH a UD receive starts
// with: an IPv4 header in its last 20 bytes, or an IPv6 header.
func grhSource(g []byte) netip.Addr {
	if g[20]>>4 == 4 {
		return netip.AddrFrom4([4]byte(g[32:36]))
	}
	return netip.AddrFrom16([16]byte(g[8:24])).Unmap()
}

// deliver queues a datagram for ReadFrom, or drops it when the queue is
// full.
func (c *PacketConn) deliver(from netip.AddrPort, p []byte) {
	select {
	case b := <-c.free:
		c.stats.received.Add(1)
		c.in <- datagram{from: from, b: b[:copy(b, p)]}
	default:
		c.stats.overflow.Add(1)
	}
}

// udpLoop reads the UDP socket until it is closed.
func (c *PacketConn) udpLoop() {
	defer c.wg.Done()
	buf := make([]byte, dsUDPHdrLen6+dsSlot+1) // one more: a datagram too long shows
	for {
		n, from, err := c.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			select {
			case <-c.closed:
				return
			case <-time.After(10 * time.Millisecond): // a transient error: not a busy loop
				continue
			}
		}
		c.udpDatagram(buf[:n], netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	}
}

// udpDatagram handles a datagram from the UDP socket, as udp_svc does:
// a valid ds_udp_header teaches the sender's QPN; data is answered with
// this side's QPN (a control message) and queued.
func (c *PacketConn) udpDatagram(b []byte, from netip.AddrPort) {
	h, n, ok := parseUDPHeader(b, from.Addr().Is4())
	switch {
	case !ok || (h.op != opData && h.op != opCtrl) || len(b)-n > dsSlot-dsHdrLen(from.Addr()):
		c.stats.badHeader.Add(1)
		return
	case h.qpn < 2:
		c.stats.unknown.Add(1)
		return
	}
	if err := c.learn(from, h.qpn); err != nil {
		c.log.Debug("rsocket: datagram peer", "peer", from, "qpn", h.qpn, "err", err)
		return
	}
	if h.op != opData {
		return
	}
	if err := c.sendUDP(opCtrl, nil, from); err != nil {
		c.log.Debug("rsocket: datagram answer", "peer", from, "err", err)
	}
	c.deliver(from, b[n:])
}

// learn records that from's QP is qpn, with an address handle to it. It
// holds sendMu too: a send's address handle is not destroyed under it.
func (c *PacketConn) learn(from netip.AddrPort, qpn uint32) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.dests[from]; d != nil {
		d.qpn = qpn
		return nil
	}
	select {
	case <-c.closed:
		return nil
	default:
	}
	ah, err := c.ep.pd.CreateAH(verbs.AHAttr{DGID: verbs.GIDFromAddr(from.Addr()), HopLimit: 64, Port: 1})
	if err != nil {
		return err
	}
	if len(c.dests) >= maxDests {
		for k, d := range c.dests {
			d.ah.Destroy()
			delete(c.dests, k)
			break
		}
	}
	c.dests[from] = &dest{ah: ah, qpn: qpn}
	c.log.Debug("rsocket: datagram peer", "peer", from, "qpn", qpn)
	return nil
}
