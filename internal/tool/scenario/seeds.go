package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// Three seed programs have their own protocol on top of rdma_cm, and
// their modes speak it over rdma_cm instead of goroce's "m=MODE a=HEX ..."
// private data, so that either end can be the real program:
//
//   - writeread is rdma-example (rdma_server, rdma_client). The client
//     posts a receive, connects (no private data; initiator depth and
//     responder resources 3) and SENDs a 16-byte description of its
//     source buffer; the server, which posted a receive before accepting,
//     takes the length in it as the size of the buffer to offer and SENDs
//     back the description of that buffer. A description is rdma-example's
//     packed struct in x86 byte order (little-endian): address (8 bytes),
//     length (4), steering tag (4, the rkey). The client then WRITEs, READs
//     back and compares.
//   - minimal is the rdma-roce-lab minimal sample (rdma_min_server,
//     rdma_min_client). The client connects without private data; the
//     server accepts with 12 bytes of private data, its buffer's address
//     (8 bytes) and rkey (4), big-endian, and 1 outstanding READ each way.
//   - write-imm is rdma-roce-lab's Example 2 (rdma_server_imm,
//     rdma_client_imm): the server's accept is the minimal sample's, with
//     one 64-byte receive posted; the client RDMA WRITEs its string and
//     NUL to the start of the server's buffer WITH_IMM, the immediate the
//     length; the server prints the immediate and its buffer and
//     disconnects.
//
// A goroce client still puts its mode in the REQ (the seeds' servers
// ignore private data), so a goroce server refuses a goroce client of
// another mode; a REQ without goroce private data is the seed's client.

// cmSeed is how one mode connects over rdma_cm when its seed program's
// protocol replaces goroce's private data.
type cmSeed struct {
	// depth is the initiator depth and responder resources the seed
	// offers (0: goroce's).
	depth uint8
	// repData returns the REP's private data for a server session; nil
	// sends goroce's.
	repData func(s *session) []byte
	// dialed runs on the client once the connection is up, with the REP's
	// private data; it sets s.peer (and s.extra).
	dialed func(ctx context.Context, s *session, c *sessionConfig, rep []byte) error
	// accepted runs on the server once the connection is up; it sets
	// s.peer and s.extra. nil: they stay as the REQ gave them.
	accepted func(ctx context.Context, s *session, c *sessionConfig) error
}

// cmSeeds are the modes that speak their seed program's protocol over
// rdma_cm. It is not modified.
var cmSeeds = map[string]*cmSeed{
	"writeread": {depth: rdmaexDepth, dialed: rdmaexDialed, accepted: rdmaexAccepted},
	"minimal":   {depth: 1, repData: minimalRepData, dialed: minimalDialed},
	"write-imm": {depth: 1, repData: minimalRepData, dialed: minimalDialed},
}

// --- rdma-example ----------------------------------------------------

const (
	rdmaexDepth   = 3  // rdma_conn_param's initiator_depth and responder_resources
	rdmaexMetaLen = 16 // struct rdma_buffer_attr
	rdmaexCtrl    = 64 // the end of the session's buffer that holds the descriptions
)

// rdmaexSlots returns where, in a session buffer of bufLen bytes, the
// description of the peer's buffer is received (32 bytes) and this
// side's is sent from (16 bytes): the last rdmaexCtrl bytes, so that the
// data stays at offset 0.
func rdmaexSlots(bufLen int) (recv, send int) {
	return bufLen - rdmaexCtrl, bufLen - rdmaexCtrl/2
}

// rdmaexRecv is the receive writeread posts before connecting with
// rdma-example's protocol, for the peer's description (none with goroce's).
func rdmaexRecv(c *sessionConfig, _ *modeOpts) [][2]int {
	if c.cmSeed() == nil {
		return nil
	}
	recv, _ := rdmaexSlots(max(c.bufSize, 64))
	return [][2]int{{recv, rdmaexCtrl / 2}}
}

// putRdmaexMeta writes rdma-example's description of b into p.
func putRdmaexMeta(p []byte, b bufInfo) {
	binary.LittleEndian.PutUint64(p[0:], b.addr)
	binary.LittleEndian.PutUint32(p[8:], b.len)
	binary.LittleEndian.PutUint32(p[12:], b.rkey)
}

// rdmaexMeta reads a description.
func rdmaexMeta(p []byte) bufInfo {
	return bufInfo{addr: binary.LittleEndian.Uint64(p[0:]), len: binary.LittleEndian.Uint32(p[8:]),
		rkey: binary.LittleEndian.Uint32(p[12:])}
}

// rdmaexAttr formats a description as both rdma-example programs print it.
func rdmaexAttr(b bufInfo) string {
	return fmt.Sprintf("%s\nbuffer attr, addr: %#x , len: %d , stag : %#x\n%s\n", dashes, b.addr, b.len, b.rkey, dashes)
}

// rdmaexDialed is rdma_client's exchange: SEND the description of the
// source buffer (the -s string at offset 0), receive the server's.
func rdmaexDialed(ctx context.Context, s *session, c *sessionConfig, _ []byte) error {
	n, _ := strconv.Atoi(c.extra["strlen"])
	recvOff, sendOff := rdmaexSlots(s.mr.Len())
	switch {
	case n == 0:
		return cli.Usagef("writeread needs -s STRING")
	case 2*n > recvOff:
		return cli.Usagef("-s is %d bytes; a %d-byte --buf holds a string of at most %d", n, s.mr.Len(), recvOff/2)
	}
	cli.Step(s.log, roce.StepControl, "SEND the source buffer's description (address, length, stag); receive the server's")
	putRdmaexMeta(s.mr.Bytes()[sendOff:], bufInfo{addr: s.mr.Addr(), len: uint32(n), rkey: s.mr.RKey()})
	wr := verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.Signaled, SGL: s.sge(sendOff, rdmaexMetaLen)}
	if err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	// rdma_client waits for both completions, in whichever order.
	var sent, recvd bool
	var got verbs.WC
	for !sent || !recvd {
		wc, err := s.expectAny(ctx)
		if err != nil {
			return fmt.Errorf("the exchange of buffer descriptions: %w", err)
		}
		switch wc.Opcode {
		case verbs.WCSend:
			sent = true
		case verbs.WCRecv:
			recvd, got = true, wc
		default:
			return fmt.Errorf("the exchange of buffer descriptions: unexpected %v", &wc)
		}
	}
	if got.ByteLen != rdmaexMetaLen {
		return fmt.Errorf("the server's buffer description is %d bytes, want %d (is it rdma-example's rdma_server?)", got.ByteLen, rdmaexMetaLen)
	}
	s.peer, s.extra = rdmaexMeta(s.mr.Bytes()[recvOff:]), map[string]string{}
	return nil
}

// rdmaexAccepted is rdma_server's exchange: receive the client's
// description, offer a buffer of the length it asks for (the start of
// the session's, zeroed), SEND its description.
func rdmaexAccepted(ctx context.Context, s *session, _ *sessionConfig) error {
	recvOff, sendOff := rdmaexSlots(s.mr.Len())
	cli.Step(s.log, roce.StepControl, "wait for the client's buffer description")
	wc, err := s.expect(ctx, verbs.WCRecv)
	if err != nil {
		return fmt.Errorf("the client's buffer description: %w", err)
	}
	if wc.ByteLen != rdmaexMetaLen {
		return fmt.Errorf("the client's buffer description is %d bytes, want %d", wc.ByteLen, rdmaexMetaLen)
	}
	theirs := rdmaexMeta(s.mr.Bytes()[recvOff:])
	if theirs.len == 0 || int(theirs.len) > recvOff {
		return fmt.Errorf("the client asks for a %d-byte buffer; this server offers 1 to %d (--buf %d less %d)",
			theirs.len, recvOff, s.mr.Len(), rdmaexCtrl)
	}
	s.peer, s.extra = theirs, map[string]string{"strlen": strconv.Itoa(int(theirs.len))}
	clear(s.mr.Bytes()[:theirs.len])
	cli.Step(s.log, roce.StepControl, "SEND the description of a %d-byte buffer", theirs.len)
	putRdmaexMeta(s.mr.Bytes()[sendOff:], bufInfo{addr: s.mr.Addr(), len: theirs.len, rkey: s.mr.RKey()})
	return s.do(ctx, verbs.SendWR{ID: 2, Opcode: verbs.OpSend, SGL: s.sge(sendOff, rdmaexMetaLen)}, verbs.WCSend)
}

// --- the minimal sample ----------------------------------------------

const (
	minimalInfoLen = 12   // struct remote_buf_info: addr, rkey
	minimalBufLen  = 4096 // the sample's BUF_SZ: the server's buffer, the client's READ
)

// minimalRepData is the sample server's accept: its buffer's address and
// rkey, big-endian.
func minimalRepData(s *session) []byte {
	b := make([]byte, minimalInfoLen)
	binary.BigEndian.PutUint64(b, s.mr.Addr())
	binary.BigEndian.PutUint32(b[8:], s.mr.RKey())
	return b
}

// errNoBufInfo means the server's accept did not carry a buffer.
var errNoBufInfo = errors.New("no or short private_data: the server's accept carries no buffer address and rkey")

// minimalDialed reads the buffer the server offers from its REP (the
// minimal sample's and Example 2's). The samples' buffer is minimalBufLen
// bytes; the private data does not say.
func minimalDialed(_ context.Context, s *session, c *sessionConfig, rep []byte) error {
	if len(rep) < minimalInfoLen || bytes.Count(rep[:minimalInfoLen], []byte{0}) == minimalInfoLen {
		return fmt.Errorf("%w (is it %s's server?)", errNoBufInfo, c.program.name)
	}
	s.peer = bufInfo{addr: binary.BigEndian.Uint64(rep), rkey: binary.BigEndian.Uint32(rep[8:]), len: minimalBufLen}
	s.extra = map[string]string{}
	cli.Step(s.log, roce.StepControl, "read private_data: remote addr=%#x rkey=%#x", s.peer.addr, s.peer.rkey)
	return nil
}

// --- Example 2: WRITE_WITH_IMM --------------------------------------

const (
	immWrite   = "client-wrote-with-imm" // what Example 2's client writes (its server's buffer holds minimalInitial first)
	immNoteLen = 64                      // its server's receive, which only the immediate completes
)

// immRecv is the receive Example 2's server posts before it accepts: at
// the end of the buffer, away from the data the WRITE puts at its start.
func immRecv(c *sessionConfig, _ *modeOpts) [][2]int {
	n := max(c.bufSize, 64)
	return [][2]int{{n - immNoteLen, immNoteLen}}
}

// immServer is rdma_server_imm once connected: the receive's completion,
// the immediate, the buffer; then the session ends, which disconnects.
func immServer(ctx context.Context, s *session, o *modeOpts, _ any) error {
	wc, err := s.expectAny(ctx)
	if err != nil {
		return fmt.Errorf("waiting for the WRITE_WITH_IMM: %w", err)
	}
	cli.SyncMR(s.mr)
	if wc.Opcode != verbs.WCRecvRDMAWithIm && wc.Flags&verbs.WithImm == 0 {
		fmt.Fprintf(o.out, "got RECV without IMM: opcode=%d\n", wc.Opcode)
		fmt.Fprintf(o.out, "after WRITE_WITH_IMM, buf='%s'\n", cString(s.mr.Bytes()))
		return fmt.Errorf("the client's message came as %v, not RDMA_WRITE_WITH_IMM", wc.Opcode)
	}
	fmt.Fprintln(o.out, "got RECV with IMM")
	fmt.Fprintf(o.out, "  imm_data net=%#x\n", bits.ReverseBytes32(wc.Imm)) // as x86 prints the big-endian field
	fmt.Fprintf(o.out, "  imm_data host=%d\n", wc.Imm)
	fmt.Fprintf(o.out, "after WRITE_WITH_IMM, buf='%s'\n", cString(s.mr.Bytes()))
	return nil
}

// immClient is rdma_client_imm once connected: -s (client-wrote-with-imm)
// and its NUL RDMA WRITTEN to the start of the server's buffer WITH_IMM,
// the immediate the length unless --imm says otherwise.
func immClient(ctx context.Context, s *session, o *modeOpts) error {
	str := o.str
	if str == "" {
		str = immWrite
	}
	n := len(str) + 1
	if n > int(s.peer.len) || n > s.mr.Len() || strings.IndexByte(str, 0) >= 0 {
		return cli.Usagef("-s takes at most %d bytes without NUL", min(int(s.peer.len), s.mr.Len())-1)
	}
	imm := uint32(n)
	if o.immSet {
		imm = uint32(o.imm)
	}
	copy(s.mr.Bytes(), str)
	s.mr.Bytes()[n-1] = 0
	fmt.Fprintf(o.out, "post RDMA_WRITE_WITH_IMM len=%d\n", n)
	fmt.Fprintf(o.out, "  imm_data host=%d\n", imm)
	fmt.Fprintf(o.out, "  imm_data net=%#x\n", bits.ReverseBytes32(imm))
	if err := s.do(ctx, verbs.SendWR{ID: 1, Opcode: verbs.OpWriteImm, Imm: imm, SGL: s.sge(0, n),
		RemoteAddr: s.peer.addr, RKey: s.peer.rkey}, verbs.WCWrite); err != nil {
		return err
	}
	fmt.Fprintln(o.out, "RDMA_WRITE_WITH_IMM completed")
	return nil
}
