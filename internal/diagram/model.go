package diagram

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// Diagram is a capture as a sequence diagram: its participants and one
// step per record, in capture order, each with the notes that explain it.
// Build one with New or FromCapture. Its writers do not modify it, so once
// built it is safe for concurrent use by them; setting Title meanwhile is
// not.
type Diagram struct {
	// Title heads the diagram; the decode tool sets the capture's name.
	Title string
	// Records are the records the diagram was built from, in capture
	// order; Steps index them.
	Records []Record
	// Participants are the hosts and QPs, ordered by host (in the order
	// each host first appears) and then by first appearance, the last
	// host's in reverse: with two hosts, the QPs of each connection face
	// each other, nested, QP 1 of the CM on the outside.
	Participants []Participant
	// Steps has one step per record.
	Steps []Step
	// Omitted counts the RoCE packets past FromCapture's MaxPackets,
	// which the diagram leaves out.
	Omitted int
}

// Participant is one queue pair of one host, a lifeline of the diagram.
type Participant struct {
	Host netip.Addr
	// QP is the queue pair number; QPKnown is false when the capture does
	// not tell which QP sent the packets (see the package doc).
	QP      uint32
	QPKnown bool
	// Alias is the participant's name in the text form: H<host>Q<qp>, or
	// H<host> when the QP is not known, hosts numbered from 1.
	Alias string
	// Name is what the diagram shows: "198.18.0.1 QP 17" or
	// "198.18.0.1 QP ?".
	Name string
}

// Step is one record of the capture: an arrow from one participant to
// another, or for a malformed frame a note alone.
type Step struct {
	// Record indexes Diagram.Records.
	Record int
	// From and To index Participants; To is -1 for a malformed frame,
	// which has no arrow.
	From, To int
	// Reply is set for responses (ACK, NAK, READ response, atomic ACK)
	// and CM replies, which the text form draws dashed.
	Reply bool
	// Retransmit marks a request whose PSN was sent before, or a READ
	// response whose PSN was answered before.
	Retransmit bool
	// Notes explain the step; they follow its arrow.
	Notes []Note
}

// Note is a remark over one or two participants.
type Note struct {
	// Over holds one or two participant indexes.
	Over []int
	Kind NoteKind
	Text string
}

// NoteKind says what a note is about, for the HTML page's colours.
type NoteKind uint8

// Kinds of note.
const (
	NoteCM         NoteKind = iota // an IB CM message and the connection state it leads to
	NoteNAK                        // a NAK, with the retry it caused
	NoteRNR                        // an RNR NAK, with the wait until the retry
	NoteRetransmit                 // requests sent again (or READ responses resent)
	NoteBadICRC                    // a packet whose ICRC does not verify
	NoteMalformed                  // a frame to port 4791 that does not decode
)

// flowKey names one direction of a connection: the packets from src to
// dst for one destination QP.
type flowKey struct {
	src, dst netip.Addr
	qp       uint32
}

// flow is what the builder knows of one flowKey.
type flow struct {
	key       flowKey
	sport     uint16 // UDP source port of its first packet
	transport bth.Transport
	srcQP     uint32
	srcKnown  bool
	pair      int // the flow back, or -1
}

// builder holds the state of New.
type builder struct {
	d       *Diagram
	hosts   map[netip.Addr]int
	flows   []flow
	flowOf  map[flowKey]int
	partOf  map[partKey]int
	recFlow []int // record index -> flow, or -1
}

type partKey struct {
	host  netip.Addr
	qp    uint32
	known bool
}

// New builds the diagram of records, which must be in capture order. The
// diagram keeps records (it does not copy them): do not modify them after.
func New(records []Record) *Diagram {
	b := &builder{
		d:      &Diagram{Title: "RoCEv2 capture", Records: records, Steps: make([]Step, len(records))},
		hosts:  map[netip.Addr]int{},
		flowOf: map[flowKey]int{},
		partOf: map[partKey]int{},
	}
	b.collectFlows()
	b.pairFromCM()
	b.pairReverse()
	for i := range records {
		b.d.Steps[i] = b.step(i)
	}
	a := newAnalyzer(b)
	a.run()
	b.sortParticipants()
	return b.d
}

// collectFlows numbers the hosts and the flows in order of appearance.
func (b *builder) collectFlows() {
	b.recFlow = make([]int, len(b.d.Records))
	for i := range b.d.Records {
		r := &b.d.Records[i]
		b.recFlow[i] = -1
		for _, h := range [2]netip.Addr{r.Src, r.Dst} {
			if _, ok := b.hosts[h]; !ok && h.IsValid() {
				b.hosts[h] = len(b.hosts) + 1
			}
		}
		if r.Malformed != "" {
			continue
		}
		k := flowKey{src: r.Src, dst: r.Dst, qp: r.BTH.DestQP}
		f, ok := b.flowOf[k]
		if !ok {
			f = len(b.flows)
			b.flowOf[k] = f
			b.flows = append(b.flows, flow{key: k, sport: r.SrcPort, transport: r.BTH.Opcode.Transport(), pair: -1})
		}
		b.recFlow[i] = f
	}
}

// pairFromCM pairs the flows of every connection a REQ and its REP set up:
// the REQ names the active side's QP, the REP the passive side's.
func (b *builder) pairFromCM() {
	type active struct {
		host netip.Addr
		qp   uint32
	}
	reqs := map[uint32]active{} // by the REQ's local comm ID
	for i := range b.d.Records {
		r := &b.d.Records[i]
		if r.MAD == nil || r.MAD.CM == nil {
			continue
		}
		c := r.MAD.CM
		switch r.MAD.AttrID {
		case mad.AttrREQ:
			reqs[c.LocalCommID] = active{r.Src, c.LocalQPN}
		case mad.AttrREP:
			if a, ok := reqs[c.RemoteCommID]; ok && a.host == r.Dst {
				b.pairQPs(a.host, a.qp, r.Src, c.LocalQPN)
			}
		}
	}
}

// pairQPs records that QP qa on host a and QP qb on host b are connected.
func (b *builder) pairQPs(a netip.Addr, qa uint32, bh netip.Addr, qb uint32) {
	ab, okAB := b.flowOf[flowKey{a, bh, qb}]
	ba, okBA := b.flowOf[flowKey{bh, a, qa}]
	if okAB {
		b.flows[ab].srcQP, b.flows[ab].srcKnown = qa, true
	}
	if okBA {
		b.flows[ba].srcQP, b.flows[ba].srcKnown = qb, true
	}
	if okAB && okBA {
		b.flows[ab].pair, b.flows[ba].pair = ba, ab
	}
}

// connected reports whether t is a connected transport, whose flows come
// in pairs.
func connected(t bth.Transport) bool { return t == bth.TransportRC || t == bth.TransportUC }

// pairReverse pairs the connected flows the CM did not: two flows between
// the same hosts in opposite directions are paired when each is the
// other's only candidate, the flow back with the same UDP source port, or
// else the only flow back that is not paired yet. Each pairing may make
// another unique, so it goes on until nothing changes (or maxPairPasses).
func (b *builder) pairReverse() {
	const maxPairPasses = 8
	between := map[[2]netip.Addr][]int{} // connected flows by source and destination
	for i := range b.flows {
		if f := &b.flows[i]; connected(f.transport) {
			k := [2]netip.Addr{f.key.src, f.key.dst}
			between[k] = append(between[k], i)
		}
	}
	for pass, changed := 0, true; changed && pass < maxPairPasses; pass++ {
		changed = false
		for i := range b.flows {
			if j := b.candidate(i, between); j >= 0 && b.candidate(j, between) == i {
				b.pairFlows(i, j)
				changed = true
			}
		}
	}
}

// candidate returns the flow back that flow i would pair with, or -1 when
// it is paired already or there is no single one.
func (b *builder) candidate(i int, between map[[2]netip.Addr][]int) int {
	f := &b.flows[i]
	if f.pair >= 0 || f.srcKnown || !connected(f.transport) {
		return -1
	}
	samePort, free := -1, -1 // the candidates, -2 when there are several
	for _, j := range between[[2]netip.Addr{f.key.dst, f.key.src}] {
		g := &b.flows[j]
		if j == i || g.pair >= 0 || g.srcKnown {
			continue
		}
		free = one(free, j)
		if g.sport == f.sport {
			samePort = one(samePort, j)
		}
	}
	if samePort != -1 {
		return max(samePort, -1)
	}
	return max(free, -1)
}

// one adds candidate j to c: -1 for none, an index for one, -2 for several.
func one(c, j int) int {
	if c == -1 {
		return j
	}
	return -2
}

func (b *builder) pairFlows(i, j int) {
	f, g := &b.flows[i], &b.flows[j]
	f.pair, g.pair = j, i
	f.srcQP, f.srcKnown = g.key.qp, true
	g.srcQP, g.srcKnown = f.key.qp, true
}

// participant returns the index of the participant for QP qp of host h,
// adding it when new.
func (b *builder) participant(h netip.Addr, qp uint32, known bool) int {
	k := partKey{h, qp, known}
	if !known {
		k.qp = 0
	}
	if p, ok := b.partOf[k]; ok {
		return p
	}
	p := len(b.d.Participants)
	b.partOf[k] = p
	pt := Participant{Host: h, QP: qp, QPKnown: known, Alias: "H" + strconv.Itoa(b.hosts[h]), Name: qpName(h, qp, known)}
	if known {
		pt.Alias += "Q" + strconv.FormatUint(uint64(qp), 10)
	}
	b.d.Participants = append(b.d.Participants, pt)
	return p
}

// sender returns the participant that sent record i.
func (b *builder) sender(i int) int {
	r := &b.d.Records[i]
	if r.Malformed == "" && r.BTH.Opcode.Info().Has(bth.HdrDETH) {
		return b.participant(r.Src, r.DETH.SrcQP, true)
	}
	if f := b.recFlow[i]; f >= 0 && b.flows[f].srcKnown {
		return b.participant(r.Src, b.flows[f].srcQP, true)
	}
	return b.participant(r.Src, 0, false)
}

// step makes the step of record i, without its notes.
func (b *builder) step(i int) Step {
	r := &b.d.Records[i]
	s := Step{Record: i, From: b.sender(i), To: -1}
	if r.Malformed != "" {
		return s
	}
	s.To = b.participant(r.Dst, r.BTH.DestQP, true)
	s.Reply = isReply(r)
	return s
}

// isReply reports whether r answers another packet.
func isReply(r *Record) bool {
	switch r.BTH.Opcode.Info().Operation {
	case bth.OpAcknowledge, bth.OpAtomicAcknowledge, bth.OpReadResponse:
		return true
	}
	if r.MAD != nil && r.MAD.Class == mad.ClassCM {
		switch r.MAD.AttrID {
		case mad.AttrREP, mad.AttrREJ, mad.AttrMRA, mad.AttrDREP:
			return true
		}
	}
	return false
}

// sortParticipants orders the participants by host and then by first
// appearance, the last host's mirrored when there are several: with two
// hosts, the QPs of each connection then face each other, nested, and the
// first QP of each host (QP 1 when the capture starts with the CM) is on
// the outside. It renumbers the steps and notes to match.
func (b *builder) sortParticipants() {
	d := b.d
	order := make([]int, len(d.Participants))
	for i := range order {
		order[i] = i
	}
	last := len(b.hosts)
	slices.SortStableFunc(order, func(x, y int) int {
		hx, hy := b.hosts[d.Participants[x].Host], b.hosts[d.Participants[y].Host]
		if hx == hy && hx == last && last > 1 {
			return cmp.Compare(y, x)
		}
		return cmp.Compare(hx, hy)
	})
	newIndex := make([]int, len(order))
	sorted := make([]Participant, len(order))
	for n, old := range order {
		newIndex[old] = n
		sorted[n] = d.Participants[old]
	}
	d.Participants = sorted
	for i := range d.Steps {
		s := &d.Steps[i]
		s.From = newIndex[s.From]
		if s.To >= 0 {
			s.To = newIndex[s.To]
		}
		for j := range s.Notes {
			for k, p := range s.Notes[j].Over {
				s.Notes[j].Over[k] = newIndex[p]
			}
		}
	}
}

// ErrInconsistent means a Diagram's steps refer to records or participants
// it does not have: it was changed after New built it.
var ErrInconsistent = errors.New("diagram: steps refer to records or participants the diagram does not have")

// check reports whether every index of the diagram is in range, so that
// the writers can follow them.
func (d *Diagram) check() error {
	if d == nil {
		return fmt.Errorf("%w: nil *Diagram (build one with New or FromCapture)", ErrInconsistent)
	}
	np := len(d.Participants)
	for i, s := range d.Steps {
		ok := s.Record >= 0 && s.Record < len(d.Records) && s.From >= 0 && s.From < np && s.To >= -1 && s.To < np
		for _, n := range s.Notes {
			ok = ok && len(n.Over) > 0 && len(n.Over) <= 2
			for _, p := range n.Over {
				ok = ok && p >= 0 && p < np
			}
		}
		if !ok {
			return fmt.Errorf("%w: step %d; build the diagram again with New", ErrInconsistent, i)
		}
	}
	return nil
}
