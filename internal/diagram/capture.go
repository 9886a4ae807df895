package diagram

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
)

// MaxPackets bounds the RoCE packets FromCapture keeps: past it, the
// diagram counts them in Omitted and ends with a note. A record takes
// about 300 bytes, so this is about 300 MB at most.
const MaxPackets = 1 << 20

// Errors about a capture as a whole.
var (
	// ErrNotCapture means the input does not start like a pcap or pcapng
	// file.
	ErrNotCapture = errors.New("diagram: not a pcap or pcapng capture")
	// ErrLinkType means the capture's link type is not one that carries
	// IP the way the reader knows.
	ErrLinkType = errors.New("diagram: unsupported link type")
	// ErrTruncatedFile means the capture ends in the middle of a record.
	ErrTruncatedFile = errors.New("diagram: capture file ends in the middle of a record")
)

// packetReader is what pcapgo's Reader and NgReader offer.
type packetReader interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() gplayers.LinkType
}

// FromCapture reads a pcap or pcapng capture (told apart by its first
// bytes) and returns the diagram of its RoCEv2 packets: those to UDP port
// 4791, or to a port the capture's own RoCE traffic uses (Ports), over
// IPv4 or IPv6, on Ethernet (802.1Q tags too), Linux cooked
// (SLL and SLL2), BSD loopback or raw IP links. Frames of other protocols
// are skipped; one to port 4791 that does not decode is a malformed record.
// Errors wrap ErrNotCapture, ErrLinkType or ErrTruncatedFile, with the
// frame number where it happened.
func FromCapture(r io.Reader) (*Diagram, error) { return FromCapturePorts(r, NewPorts()) }

// FromCapturePorts is FromCapture with the RoCEv2 datagrams told by
// ports: 4791, the ports it was given, and those the capture's own
// traffic shows (Ports). ports.Hint says afterwards what was left out.
func FromCapturePorts(r io.Reader, ports *Ports) (*Diagram, error) {
	recs, omitted, err := readCapture(r, MaxPackets, ports)
	if err != nil {
		return nil, err
	}
	d := New(recs)
	d.Omitted = omitted
	return d, nil
}

// ReadCapture reads the RoCEv2 packets of a pcap or pcapng capture as
// FromCapture does, keeping at most limit of them and counting the others
// in omitted.
func ReadCapture(r io.Reader, limit int) (recs []Record, omitted int, err error) {
	return readCapture(r, limit, NewPorts())
}

func readCapture(r io.Reader, limit int, ports *Ports) (recs []Record, omitted int, err error) {
	if r == nil {
		return nil, 0, fmt.Errorf("%w: no input (nil reader)", ErrNotCapture)
	}
	src, err := openCapture(r)
	if err != nil {
		return nil, 0, err
	}
	dec := frameDecoder{ports: ports}
	var start time.Time
	for frame := 1; ; frame++ {
		data, ci, err := src.ZeroCopyReadPacketData()
		if errors.Is(err, io.EOF) {
			return recs, omitted, nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return recs, omitted, fmt.Errorf("%w (frame %d): is the capture still being written?", ErrTruncatedFile, frame)
			}
			return recs, omitted, fmt.Errorf("diagram: frame %d: %w", frame, err)
		}
		lt := src.LinkType()
		if len(ci.AncillaryData) > 0 {
			if l, ok := ci.AncillaryData[0].(gplayers.LinkType); ok {
				lt = l // pcapng: the interface of this packet
			}
		}
		if frame == 1 {
			start = ci.Timestamp
		}
		var rec Record
		ok, err := dec.decode(data, lt, &rec)
		if err != nil {
			return recs, omitted, fmt.Errorf("frame %d: %w", frame, err)
		}
		if !ok {
			continue
		}
		if len(recs) >= limit {
			omitted++
			continue
		}
		rec.Frame, rec.Time, rec.WireLen = frame, ci.Timestamp.Sub(start), ci.Length
		recs = append(recs, rec)
	}
}

// magicPcapng starts a pcapng file (its section header block type).
const magicPcapng = 0x0a0d0d0a

// openCapture tells pcap from pcapng by the first four bytes.
func openCapture(r io.Reader) (packetReader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(4)
	if len(head) < 4 {
		return nil, fmt.Errorf("%w: only %d bytes", ErrNotCapture, len(head))
	}
	if binary.BigEndian.Uint32(head) == magicPcapng {
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("%w: bad pcapng section header: %v", ErrNotCapture, err)
		}
		return nr, nil
	}
	pr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("%w: it starts with % x (%v)", ErrNotCapture, head, err)
	}
	if _, err := ipOffset(pr.LinkType(), nil); errors.Is(err, ErrLinkType) {
		return nil, err
	}
	return pr, nil
}

// Link header lengths.
const (
	sllLen  = 16 // Linux cooked v1: protocol at 14
	sll2Len = 20 // Linux cooked v2: protocol at 0
	nullLen = 4  // BSD loopback: address family in host order
)

// ipOffset returns where the IP header of a frame of link type lt starts,
// or -1 when the frame carries no IP. Ethernet is left to bth.ParseFrame
// (offset 0 means the frame is parsed with its Ethernet header).
func ipOffset(lt gplayers.LinkType, data []byte) (int, error) {
	switch lt {
	case gplayers.LinkTypeEthernet, gplayers.LinkTypeRaw, gplayers.LinkTypeIPv4, gplayers.LinkTypeIPv6:
		return 0, nil
	case gplayers.LinkTypeLinuxSLL:
		if len(data) < sllLen || !ipEtherType(binary.BigEndian.Uint16(data[14:])) {
			return -1, nil
		}
		return sllLen, nil
	case gplayers.LinkTypeLinuxSLL2:
		if len(data) < sll2Len || !ipEtherType(binary.BigEndian.Uint16(data[0:])) {
			return -1, nil
		}
		return sll2Len, nil
	case gplayers.LinkTypeNull:
		if len(data) < nullLen {
			return -1, nil
		}
		return nullLen, nil // the IP version nibble tells the rest
	}
	return -1, fmt.Errorf("%w %d (%v): the diagram reads Ethernet (1), BSD loopback (0), Linux SLL (113), "+
		"Linux SLL2 (276) and raw IP (101, 228, 229); convert the capture with editcap or capture on another interface",
		ErrLinkType, int(lt), lt)
}

func ipEtherType(t uint16) bool { return t == bth.EtherTypeIPv4 || t == bth.EtherTypeIPv6 }

// frameDecoder turns frames into records. It is not safe for concurrent
// use.
type frameDecoder struct {
	fr    bth.Frame
	pkt   bth.Packet
	ports *Ports // which datagrams are RoCE's (nil: those to 4791)
}

// decode fills rec from a frame of link type lt; ok is false for frames
// that are not UDP to one of RoCE's ports (d.ports).
func (d *frameDecoder) decode(data []byte, lt gplayers.LinkType, rec *Record) (ok bool, err error) {
	off, err := ipOffset(lt, data)
	if err != nil || off < 0 {
		return false, err
	}
	link := bth.LinkIP
	if lt == gplayers.LinkTypeEthernet {
		link = bth.LinkEthernet
	}
	fr := &d.fr
	if bth.ParseFrame(fr, data[off:], link) != nil || !d.ports.Take(fr) {
		return false, nil // not IP, not UDP, or not to one of RoCEv2's ports
	}
	rec.Src, rec.Dst, rec.SrcPort, rec.DstPort = fr.Flow.Src, fr.Flow.Dst, fr.Flow.SrcPort, fr.Flow.DstPort
	p := &d.pkt
	if fr.Truncated {
		err = p.ParseTruncated(fr.Payload)
	} else {
		err = p.Parse(fr.Payload)
	}
	if err != nil {
		rec.Malformed = err.Error()
		return true, nil
	}
	fillHeaders(rec, p)
	rec.Truncated = fr.Truncated
	if fr.Truncated {
		rec.PayloadLen = fr.UDP.Length() - bth.UDPLen - p.Info.HeaderLen - p.BTH.PadCount() - bth.ICRCLen
		if rec.PayloadLen < 0 {
			*rec = Record{Src: rec.Src, Dst: rec.Dst, SrcPort: rec.SrcPort, DstPort: rec.DstPort,
				Malformed: "UDP length too short for the " + p.BTH.Opcode().String() + " headers"}
		}
		return true, nil
	}
	rec.PayloadLen = len(p.Payload)
	rec.ICRCOK = bth.FrameICRC(fr.IP) == p.ICRCValue()
	if p.BTH.DestQP() == bth.GSIQPN && p.Info.Transport == bth.TransportUD {
		rec.MAD = DecodeMAD(p.Payload)
	}
	return true, nil
}

// fillHeaders copies the headers of p into rec.
func fillHeaders(rec *Record, p *bth.Packet) {
	rec.BTH = p.BTH.Fields()
	if p.RDETH != nil {
		rec.RDETH = p.RDETH.Fields()
	}
	if p.DETH != nil {
		rec.DETH = p.DETH.Fields()
	}
	if p.FETH != nil {
		rec.FETH = p.FETH.Fields()
	}
	if p.RETH != nil {
		rec.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		rec.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		rec.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		rec.AtomicAckETH = p.AtomicAckETH.Fields()
	}
	if p.ImmDt != nil {
		rec.ImmDt = p.ImmDt.Fields()
	}
	if p.IETH != nil {
		rec.IETH = p.IETH.Fields()
	}
}
