package diagram

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// psnState follows the PSNs of one flow: next is one past the highest PSN
// the flow has used, valid once it has used one.
type psnState struct {
	next  bth.PSN
	valid bool
}

// seen reports whether psn comes before next.
func (s *psnState) seen(psn bth.PSN) bool { return s.valid && psn.LessThan(s.next) }

// advance moves next to end when end is further.
func (s *psnState) advance(end bth.PSN) {
	if !s.valid || s.next.LessThan(end) {
		s.next, s.valid = end, true
	}
}

// pendKey names the request that would retry a NAK: its flow and PSN.
type pendKey struct {
	flow int
	psn  bth.PSN
}

// nakRetry is a NAK or RNR NAK waiting for the request that retries it.
type nakRetry struct {
	step  int // the NAK's step
	note  int // its note in the step
	retry int // the record of the retry, or -1
}

// cmKey names a connection by one side's host and comm ID.
type cmKey struct {
	host netip.Addr
	id   uint32
}

// cmConn is a connection that a CM REQ asked for.
type cmConn struct {
	active, passive     netip.Addr
	activeQP, passiveQP uint32
	passiveKnown        bool
}

// analyzer walks the steps in order and adds their notes.
type analyzer struct {
	b       *builder
	req     []psnState // per flow: its requests
	resp    []psnState // per flow: its READ responses
	pmtu    map[[2]netip.Addr]int
	pending map[pendKey][]int // indexes into naks
	naks    []nakRetry
	conns   map[cmKey]*cmConn
}

func newAnalyzer(b *builder) *analyzer {
	return &analyzer{
		b: b, req: make([]psnState, len(b.flows)), resp: make([]psnState, len(b.flows)),
		pmtu: map[[2]netip.Addr]int{}, pending: map[pendKey][]int{}, conns: map[cmKey]*cmConn{},
	}
}

// run adds the notes of every step, then the retry times of the NAKs.
func (a *analyzer) run() {
	d := a.b.d
	for i := range d.Steps {
		a.analyze(i)
	}
	for _, n := range a.naks {
		note := &d.Steps[n.step].Notes[n.note]
		if n.retry < 0 {
			note.Text += "; not retried in the capture"
			continue
		}
		wait := d.Records[n.retry].Time - d.Records[d.Steps[n.step].Record].Time
		note.Text += "; retried after " + duration(wait) + " (frame " + strconv.Itoa(d.Records[n.retry].Frame) + ")"
	}
}

// addNote appends a note to step i.
func (a *analyzer) addNote(i int, kind NoteKind, text string, over ...int) int {
	s := &a.b.d.Steps[i]
	s.Notes = append(s.Notes, Note{Over: over, Kind: kind, Text: text})
	return len(s.Notes) - 1
}

// analyze adds the notes of step i.
func (a *analyzer) analyze(i int) {
	s := &a.b.d.Steps[i]
	r := &a.b.d.Records[s.Record]
	if r.Malformed != "" {
		a.addNote(i, NoteMalformed, "frame "+strconv.Itoa(r.Frame)+" does not decode: "+r.Malformed, s.From)
		return
	}
	info := r.BTH.Opcode.Info()
	if info.Position == bth.PosFirst || info.Position == bth.PosMiddle {
		k := hostPair(r.Src, r.Dst)
		a.pmtu[k] = max(a.pmtu[k], r.PayloadLen) // First and Middle packets carry a whole path MTU
	}
	f := a.b.recFlow[s.Record]
	switch {
	case r.MAD != nil:
		a.cmNote(i, r)
	case info.Has(bth.HdrAETH) && info.Operation != bth.OpReadResponse:
		a.ackNote(i, r, f)
	case info.Operation == bth.OpReadResponse:
		a.readResponse(i, r, f)
	case isRequest(info.Operation) && info.Transport == bth.TransportRC:
		a.request(i, r, f)
	}
	if !r.Truncated && !r.ICRCOK {
		a.addNote(i, NoteBadICRC, "bad ICRC: "+host(r.Dst)+" drops frame "+strconv.Itoa(r.Frame), s.To)
	}
}

// hostPair names the path between two hosts, in either direction.
func hostPair(x, y netip.Addr) [2]netip.Addr {
	if y.Less(x) {
		x, y = y, x
	}
	return [2]netip.Addr{x, y}
}

// isRequest reports whether op is sent by a requester, with a PSN of its
// own unless it is sent again.
func isRequest(op bth.Operation) bool {
	switch op {
	case bth.OpSend, bth.OpWrite, bth.OpReadRequest, bth.OpCompareSwap, bth.OpFetchAdd, bth.OpFlush,
		bth.OpAtomicWrite:
		return true
	}
	return false
}

// request checks an RC request for a retransmission and for the retry of
// a NAK.
func (a *analyzer) request(i int, r *Record, f int) {
	psn := r.BTH.PSN
	if a.req[f].seen(psn) {
		a.b.d.Steps[i].Retransmit = true
	}
	span := uint32(1)
	if r.BTH.Opcode.Info().Operation == bth.OpReadRequest {
		if mtu := a.pmtu[hostPair(r.Src, r.Dst)]; mtu > 0 && r.RETH.DMALen > uint32(mtu) {
			span = (r.RETH.DMALen + uint32(mtu) - 1) / uint32(mtu) // a response per path MTU
		}
	}
	a.req[f].advance(psn.Add(span))
	k := pendKey{f, psn}
	for _, n := range a.pending[k] {
		a.naks[n].retry = a.b.d.Steps[i].Record
	}
	delete(a.pending, k)
}

// readResponse checks a READ response for a resend; its PSN is one of the
// requester's.
func (a *analyzer) readResponse(i int, r *Record, f int) {
	psn := r.BTH.PSN
	if a.resp[f].seen(psn) {
		a.b.d.Steps[i].Retransmit = true
	}
	a.resp[f].advance(psn.Next())
	if p := a.b.flows[f].pair; p >= 0 {
		a.req[p].advance(psn.Next())
	}
}

// nakNames describe the NAK codes (IBTA Vol. 1 Table 44).
var nakNames = [...]string{"PSN sequence error", "invalid request", "remote access error",
	"remote operational error", "invalid RD request"}

func nakName(c bth.NAKCode) string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return "NAK code " + strconv.Itoa(int(c))
}

// ackNote adds the note of a NAK or RNR NAK, and waits for its retry.
func (a *analyzer) ackNote(i int, r *Record, f int) {
	s := &a.b.d.Steps[i]
	syn := r.AETH.Syndrome
	psn := strconv.FormatUint(uint64(r.BTH.PSN), 10)
	var n int
	switch syn.Kind() {
	case bth.KindRNRNAK:
		n = a.addNote(i, NoteRNR, "RNR NAK for PSN "+psn+": "+a.b.d.Participants[s.From].Name+" is not ready to receive; wait at least "+
			duration(bth.RNRTimerDuration(syn.Value())), s.From, s.To)
	case bth.KindNAK:
		if syn.NAKCode() != bth.NAKPSNSequenceError {
			// Invalid request, remote access and remote operational
			// errors are fatal: nothing is retried (IBTA Vol. 1 §9.7.5.2).
			a.addNote(i, NoteNAK, "NAK "+nakName(syn.NAKCode())+" for PSN "+psn+": the request fails and "+
				a.b.d.Participants[s.To].Name+" goes to the error state", s.From, s.To)
			return
		}
		n = a.addNote(i, NoteNAK, "NAK PSN sequence error: "+a.b.d.Participants[s.From].Name+" expects PSN "+psn, s.From, s.To)
	default:
		return
	}
	p := a.b.flows[f].pair
	if p < 0 {
		return // the requester's flow is not known: no retry to look for
	}
	k := pendKey{p, r.BTH.PSN}
	a.pending[k] = append(a.pending[k], len(a.naks))
	a.naks = append(a.naks, nakRetry{step: i, note: n, retry: -1})
}

// duration formats d to the microsecond, as 853µs or 12.313ms.
func duration(d time.Duration) string { return d.Round(time.Microsecond).String() }

// qpName names QP qp of host h, as participants are named.
func qpName(h netip.Addr, qp uint32, known bool) string {
	if !known {
		return host(h) + " QP ?"
	}
	return host(h) + " QP " + strconv.FormatUint(uint64(qp), 10)
}

// host names a host by its address, "?" when the record had none.
func host(h netip.Addr) string {
	if !h.IsValid() {
		return "?"
	}
	return h.String()
}

// conn returns the connection a CM message from src to dst is about.
func (a *analyzer) conn(src, dst netip.Addr, c *CMMessage) *cmConn {
	if cn := a.conns[cmKey{src, c.LocalCommID}]; cn != nil {
		return cn
	}
	return a.conns[cmKey{dst, c.RemoteCommID}]
}

// cmNote adds the note of a CM message: the connection state it leads to.
func (a *analyzer) cmNote(i int, r *Record) {
	s := &a.b.d.Steps[i]
	m := r.MAD
	if m.Class != mad.ClassCM {
		return
	}
	if m.CM == nil {
		if m.CMError == "" {
			return
		}
		a.addNote(i, NoteCM, "CM "+mad.AttrName(m.AttrID)+" does not decode: "+m.CMError, s.From, s.To)
		return
	}
	if text := a.cmText(r, m.AttrID, m.CM); text != "" {
		a.addNote(i, NoteCM, text, s.From, s.To)
	}
}

// cmText describes a CM message and the connection state it leads to, or
// returns "" for messages that do not change one.
func (a *analyzer) cmText(r *Record, attr uint16, c *CMMessage) string {
	cn := a.conn(r.Src, r.Dst, c)
	switch attr {
	case mad.AttrREQ:
		return a.reqText(r, c)
	case mad.AttrREP:
		if cn == nil {
			return "CM REP: " + qpName(r.Src, c.LocalQPN, true) + " accepts a connection from " + host(r.Dst)
		}
		cn.passiveQP, cn.passiveKnown = c.LocalQPN, true
		a.conns[cmKey{r.Src, c.LocalCommID}] = cn
		return "CM REP: " + qpName(r.Src, c.LocalQPN, true) + " accepts " + qpName(cn.active, cn.activeQP, true) +
			"; " + host(r.Dst) + " is to send from PSN " + strconv.FormatUint(uint64(c.StartingPSN), 10)
	case mad.AttrRTU:
		return "CM RTU: " + cn.describe(r, "are connected")
	case mad.AttrDREQ:
		if cn == nil {
			return "CM DREQ: " + host(r.Src) + " disconnects from " + qpName(r.Dst, c.RemoteQPN, true)
		}
		return "CM DREQ: " + cn.describe(r, "are disconnecting")
	case mad.AttrDREP:
		return "CM DREP: " + cn.describe(r, "are disconnected")
	case mad.AttrREJ:
		return "CM REJ: " + host(r.Src) + " rejects the " + c.Rejected.String() + ": " + c.Reason.String() +
			" (reason " + strconv.Itoa(int(c.Reason)) + ")" + cn.noConnection()
	case mad.AttrMRA:
		return "CM MRA: " + host(r.Src) + " needs more time to answer the " + c.MRAed.String()
	}
	return ""
}

// reqText describes a REQ and remembers the connection it asks for.
func (a *analyzer) reqText(r *Record, c *CMMessage) string {
	k := cmKey{r.Src, c.LocalCommID}
	again := ""
	if a.conns[k] != nil {
		again = " (again)"
	}
	a.conns[k] = &cmConn{active: r.Src, passive: r.Dst, activeQP: c.LocalQPN}
	service := "service ID 0x" + strconv.FormatUint(c.ServiceID, 16)
	if c.IsRDMACM {
		service = "port " + strconv.Itoa(int(c.ServicePort))
	}
	return "CM REQ" + again + ": " + qpName(r.Src, c.LocalQPN, true) + " asks " + host(r.Dst) +
		" to connect to " + service + "; " + host(r.Dst) + " is to send from PSN " +
		strconv.FormatUint(uint64(c.StartingPSN), 10)
}

// describe names the two QPs of the connection and what state they are
// in; without a connection, the two hosts.
func (cn *cmConn) describe(r *Record, state string) string {
	if cn == nil {
		return host(r.Src) + " and " + host(r.Dst) + " " + state
	}
	return qpName(cn.active, cn.activeQP, true) + " and " + qpName(cn.passive, cn.passiveQP, cn.passiveKnown) +
		" " + state
}

// noConnection says which connection a REJ refuses.
func (cn *cmConn) noConnection() string {
	if cn == nil {
		return ""
	}
	return "; no connection for " + qpName(cn.active, cn.activeQP, true)
}
