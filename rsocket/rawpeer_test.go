package rsocket

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// rawPeer is an rsocket peer written on the verbs directly, from the
// protocol's description in rdma-core (docs/rsocket, rsocket.c) and not
// from this package's code: the tests script it message by message to
// check what a Conn sends and how it takes what a librdmacm peer sends.
type rawPeer struct {
	t     testing.TB
	order binary.ByteOrder // of its target SGL entries (RS_CONN_FLAG_NET)
	cq    verbs.CQ
	qp    verbs.QP
	rbuf  verbs.MR // 8 KiB receive buffer; the first half in the conn data
	tsgl  verbs.MR // 2-entry target SGL, then a rawIomap-entry iomap table
	sbuf  verbs.MR
	cc    *cm.Conn

	// What the Conn announced in its rs_conn_data.
	credits   uint16
	flags     byte
	connSGL   [3]uint64 // target SGL: addr, rkey, entries
	connFirst [3]uint64 // first receive buffer: addr, rkey, bytes
	connIomap byte      // its iomap table's size, scaled
	peerSGE   int       // the entry of the Conn's target SGL written next
}

const (
	rawCredits = 16
	rawIomap   = 2 // entries of the raw peer's iomap table
)

// newRawPeer listens on h.b at port with a raw peer whose SGL entries
// are big-endian when bigEndian, and returns it once a Conn dialled from
// h.a with opts has connected.
func newRawPeer(t *testing.T, h *hosts, port uint16, bigEndian bool, opts *Options) (*rawPeer, *Conn) {
	t.Helper()
	p := &rawPeer{t: t, order: binary.LittleEndian, peerSGE: 1}
	pd, err := h.b.AllocPD()
	must(t, err)
	p.cq, err = h.b.CreateCQ(256)
	must(t, err)
	p.qp, err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	p.rbuf, err = pd.RegMR(make([]byte, 8192), verbs.LocalWrite|verbs.RemoteWrite)
	must(t, err)
	p.tsgl, err = pd.RegMR(make([]byte, 32+rawIomap*24), verbs.LocalWrite|verbs.RemoteWrite)
	must(t, err)
	p.sbuf, err = pd.RegMR(make([]byte, 1<<16), verbs.LocalWrite)
	must(t, err)
	t.Cleanup(func() { // after the connections' cleanup, registered later
		p.qp.Destroy()
		p.cq.Destroy()
		for _, m := range []verbs.MR{p.rbuf, p.tsgl, p.sbuf} {
			m.Dereg()
		}
		pd.Dealloc()
	})
	must(t, roce.ModifyToInit(p.qp, nil))
	must(t, p.qp.PostRecv(make([]verbs.RecvWR, 32)))

	cd := make([]byte, 40)
	cd[0], cd[1], cd[7] = 1, 2, rawIomap // RS_CONN_FLAG_IOMAP
	if bigEndian {
		cd[1], p.order = 3, binary.BigEndian
	}
	binary.BigEndian.PutUint16(cd[2:], rawCredits)
	binary.BigEndian.PutUint64(cd[8:], p.tsgl.Addr())
	binary.BigEndian.PutUint32(cd[16:], p.tsgl.RKey())
	binary.BigEndian.PutUint32(cd[20:], 2)
	binary.BigEndian.PutUint64(cd[24:], p.rbuf.Addr())
	binary.BigEndian.PutUint32(cd[32:], p.rbuf.RKey())
	binary.BigEndian.PutUint32(cd[36:], 4096)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := h.ab.Listen(ctx, netip.AddrPortFrom(h.addrB, port), &cm.ListenConfig{
		OnRequest: func(_ context.Context, r *cm.Request) (*cm.Params, error) {
			b := r.PrivateData
			if b[0] != 1 {
				t.Errorf("conn data version %d", b[0])
			}
			p.flags, p.credits, p.connIomap = b[1], binary.BigEndian.Uint16(b[2:]), b[7]
			p.connSGL = [3]uint64{binary.BigEndian.Uint64(b[8:]), uint64(binary.BigEndian.Uint32(b[16:])),
				uint64(binary.BigEndian.Uint32(b[20:]))}
			p.connFirst = [3]uint64{binary.BigEndian.Uint64(b[24:]), uint64(binary.BigEndian.Uint32(b[32:])),
				uint64(binary.BigEndian.Uint32(b[36:]))}
			return &cm.Params{QP: p.qp, PrivateData: cd}, nil
		}})
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan error, 1)
	go func() {
		var err error
		p.cc, err = ln.Accept(ctx)
		accepted <- err
	}()
	d := &Dialer{Device: h.a}
	if opts != nil {
		d.Options = *opts
	}
	d.Agent = h.aa
	c, err := d.Dial(ctx, h.a, netip.AddrPortFrom(h.addrB, port))
	must(t, err)
	must(t, <-accepted)
	t.Cleanup(func() {
		c.Close()
		p.cc.Close()
	})
	return p, c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// next returns the peer's next completion, failing the test if it is not
// a success.
func (p *rawPeer) next() verbs.WC {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc, err := roce.PollOne(ctx, p.cq)
	if err != nil {
		p.t.Fatalf("raw peer: %v", err)
	}
	return wc
}

// recv returns the next received message: its immediate and length,
// after completions of the peer's own sends.
func (p *rawPeer) recv() (imm, n uint32) {
	p.t.Helper()
	for {
		wc := p.next()
		if wc.Opcode == verbs.WCRecvRDMAWithIm {
			if wc.Flags&verbs.WithImm == 0 {
				p.t.Fatalf("raw peer: a message without immediate: %v", &wc)
			}
			must(p.t, p.qp.PostRecv(make([]verbs.RecvWR, 1)))
			return wc.Imm, wc.ByteLen
		}
	}
}

// send posts an RDMA WRITE with immediate imm of data to addr/rkey (no
// data: a zero-length write) and waits for its completion.
func (p *rawPeer) send(imm uint32, data []byte, addr uint64, rkey uint32) {
	p.t.Helper()
	p.write(verbs.SendWR{Opcode: verbs.OpWriteImm, Imm: imm, RemoteAddr: addr, RKey: rkey}, data)
}

// writePlain posts an RDMA WRITE without immediate of data to addr/rkey,
// which the Conn's program does not see, and waits for its completion.
func (p *rawPeer) writePlain(data []byte, addr uint64, rkey uint32) {
	p.t.Helper()
	p.write(verbs.SendWR{Opcode: verbs.OpWrite, RemoteAddr: addr, RKey: rkey}, data)
}

// write posts wr, signaled, with data and waits for its completion.
func (p *rawPeer) write(wr verbs.SendWR, data []byte) {
	p.t.Helper()
	wr.Flags |= verbs.Signaled
	p.load(&wr, data)
	must(p.t, p.qp.PostSend([]verbs.SendWR{wr}))
	if wc := p.next(); wc.Opcode != verbs.WCWrite {
		p.t.Fatalf("raw peer: a receive while waiting for its write: %v", &wc)
	}
}

// load puts data in the send buffer as wr's one SGE (none for no data).
func (p *rawPeer) load(wr *verbs.SendWR, data []byte) {
	if len(data) > 0 {
		copy(p.sbuf.Bytes(), data)
		wr.SGL = []verbs.SGE{{Addr: p.sbuf.Addr(), Length: uint32(len(data)), LKey: p.sbuf.LKey()}}
	}
}

// sgeAt reads entry i of the raw peer's target SGL, in its byte order.
func (p *rawPeer) sgeAt(i int) (addr uint64, key, length uint32) {
	b := p.tsgl.Bytes()[i*16:]
	return p.order.Uint64(b), p.order.Uint32(b[8:]), p.order.Uint32(b[12:])
}

// iomapAt reads entry i of the raw peer's iomap table, in its byte order:
// offset, buffer address, rkey, bytes.
func (p *rawPeer) iomapAt(i int) (offset, addr uint64, key, length uint32) {
	b := p.tsgl.Bytes()[32+i*24:]
	return p.order.Uint64(b), p.order.Uint64(b[8:]), p.order.Uint32(b[16:]), p.order.Uint32(b[20:])
}

// publishIomap writes entry (offset; addr, rkey, length) at index i of
// the Conn's iomap table with an iomap SGL message of index imm, as a
// peer's riomap does (imm is i unless a test lies).
func (p *rawPeer) publishIomap(i, imm uint32, offset, addr uint64, rkey, length uint32) {
	p.t.Helper()
	e := make([]byte, 24)
	binary.LittleEndian.PutUint64(e, offset)
	binary.LittleEndian.PutUint64(e[8:], addr)
	binary.LittleEndian.PutUint32(e[16:], rkey)
	binary.LittleEndian.PutUint32(e[20:], length)
	p.send(6<<29|imm, e, p.connSGL[0]+p.connSGL[2]*16+uint64(i)*24, uint32(p.connSGL[1]))
}

// publish writes a new entry into the Conn's target SGL with a credit
// message granting credits.
func (p *rawPeer) publish(addr uint64, length uint32, credits uint32) {
	p.t.Helper()
	slot, key := p.nextSlot()
	p.send(4<<29|credits, p.sglEntry(addr, length), slot, key)
	p.peerSGE = (p.peerSGE + 1) % int(p.connSGL[2])
}

// sglEntry is an entry of the raw peer's receive buffer at addr for the
// Conn's target SGL (little-endian, as it announced).
func (p *rawPeer) sglEntry(addr uint64, length uint32) []byte {
	e := make([]byte, 16)
	binary.LittleEndian.PutUint64(e, addr)
	binary.LittleEndian.PutUint32(e[8:], p.rbuf.RKey())
	binary.LittleEndian.PutUint32(e[12:], length)
	return e
}

// nextSlot is the address and rkey of the Conn's target SGL entry that
// publish writes next.
func (p *rawPeer) nextSlot() (uint64, uint32) {
	return p.connSGL[0] + uint64(p.peerSGE)*16, uint32(p.connSGL[1])
}
