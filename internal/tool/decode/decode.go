// Package decode is roce decode: it prints the RoCEv2 packets of pcap and
// pcapng captures, one line or JSON object each with the ICRC checked, or
// per-flow totals.
package decode

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/diagram"
)

// Cmd is roce decode.
var Cmd = &cli.Command{
	UsageLine: "decode [--json | --flows | --diagram[=html]] [--roce-port PORT] FILE... (- for standard input)",
	Short:     "print the RoCEv2 packets of pcap/pcapng captures, as text, JSON, per-flow totals or a sequence diagram",
	Long: "Reads pcap and pcapng captures (Ethernet, Linux SLL and SLL2, raw IP) and prints\n" +
		"their RoCEv2 packets: those on UDP port 4791, on a port --roce-port names, and on any\n" +
		"other port the capture's own RoCE traffic uses (a datagram whose ICRC verifies shows it),\n" +
		"so that captures of roce demo or of --roce-port runs decode as they are. With --diagram\n" +
		"it draws the exchange as a sequence diagram (a participant per host and QP; notes for the\n" +
		"CM handshake, NAKs, RNR waits, retransmissions) on standard output: text for\n" +
		"sequencediagram.org and PlantUML, or with --diagram=html one self-contained page\n" +
		"(roce decode --diagram=html d.pcap > d.html). Flags:\n",
	Flags: func(fs *cli.FlagSet) cli.Runner {
		var o options
		fs.Bool(&o.flows, false, "print per-flow totals (source, destination, destination QP)", "flows")
		fs.Bool(&o.json, false, "print one JSON object per RoCE packet", "json")
		fs.Var(&o.diagram, "draw the capture as a sequence diagram on standard output: text (sequencediagram.org, "+
			"PlantUML), or --diagram=html a page", "diagram")
		fs.Var(&o.ports, "also take datagrams to this UDP `port` for RoCEv2 (repeat, or a comma-separated list)", "roce-port")
		return o.run
	},
}

// mode selects what roce decode prints.
type mode int

const (
	modeText  mode = iota // one line per RoCE packet
	modeJSON              // one JSON object per RoCE packet
	modeFlows             // totals per flow direction
)

// options are roce decode's flags.
type options struct {
	json, flows bool
	diagram     diagram.Format
	ports       portList
}

// portList is --roce-port: UDP ports, given one per flag or as a
// comma-separated list.
type portList []uint16

func (l *portList) String() string {
	if l == nil || len(*l) == 0 {
		return ""
	}
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

func (l *portList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("want UDP ports of 1 to 65535, not %q", f)
		}
		*l = append(*l, uint16(p))
	}
	return nil
}

// hint tells on stderr what a capture's datagrams that were not taken
// for RoCE may be.
func hint(env *cli.Env, label string, ports *diagram.Ports) {
	if h := ports.Hint(); h != "" {
		fmt.Fprintf(env.Stderr, "roce decode: %s: %s\n", label, h)
	}
}

// run is roce decode [--json|--flows] FILE...
//
// It reads pcap and pcapng files (the format is told by its magic number;
// "-" is standard input) of link type Ethernet (with 802.1Q tags), Linux
// SLL, Linux SLL2 or raw IP, and prints the RoCEv2 packets among their
// frames, numbered as in the file, with the time since its first frame.
// Frames that are not RoCE are skipped (--flows counts them); a RoCE frame
// that does not decode is printed as malformed, with the reason, and
// decoding goes on. A file that is not a capture, ends in the middle of a
// record or has another link type is one error line, and the command
// exits 1 after the other files.
//
// The default output is a line per packet:
//
//	FRAME TIME SRC:PORT -> DST:PORT OPCODE qp=DESTQP psn=PSN FLAGS [pad=N] [headers] [MAD ...] payload=LEN icrc=ok|rxe|BAD|truncated
//
// where FLAGS holds A (AckReq), S (solicited event), M (MigReq), F (FECN)
// and B (BECN), or '.' for each bit not set. The ICRC is computed from the
// frame's IP header and compared with the packet's ("rxe": a FLUSH whose
// ICRC is the one Linux's rxe gives FLUSH, covering its headers twice;
// bth.FlushICRCRXE); "truncated" means the
// capture kept too little of the packet to check it. payload is the real
// payload length, from the UDP length when the capture cut the packet.
//
// --json prints the same as one JSON object per line (numbers, 64-bit ones
// included, as JSON numbers; icrc is the four ICRC bytes read big-endian,
// as Wireshark shows them). --flows prints totals per flow direction
// (source and destination address, destination QP): packets, bytes,
// messages per operation, acknowledgements by kind, retransmitted requests
// (a request PSN seen before, or inside the PSNs of an earlier READ's
// responses), resent READ responses and ICRC failures.
func (o *options) run(_ context.Context, env *cli.Env, files []string) error {
	if len(files) == 0 {
		return cli.Usagef("no capture file given (use - for standard input)")
	}
	if o.json && o.flows {
		return cli.Usagef("--json and --flows cannot be used together")
	}
	if o.diagram != diagram.FormatNone {
		if f, ok := o.formatArg(files); ok {
			// --diagram html, with a space: the format, unless a
			// file of that name is there.
			o.diagram, files = f, files[1:]
		}
		return o.draw(env, files)
	}
	m := modeText
	switch {
	case o.json:
		m = modeJSON
	case o.flows:
		m = modeFlows
	}
	out := bufio.NewWriterSize(env.Stdout, 64<<10)
	failed := false
	for _, name := range files {
		ports := diagram.NewPorts(o.ports...)
		err := decodeFile(name, env.Stdin, m, len(files) > 1, out, ports)
		if ferr := out.Flush(); ferr != nil && err == nil {
			err = ferr
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "roce decode: %v\n", err)
			failed = true
		} else {
			hint(env, fileLabel(name), ports)
		}
	}
	if failed {
		return &cli.ExitError{Code: cli.ExitFailure} // each failure is reported above
	}
	return nil
}

// draw writes the sequence diagram of one capture (--diagram).
func (o *options) draw(env *cli.Env, files []string) error {
	switch {
	case o.json || o.flows:
		return cli.Usagef("--diagram cannot be used with --json or --flows")
	case len(files) == 0:
		return cli.Usagef("--diagram: no capture file given (use - for standard input)")
	case len(files) > 1:
		return cli.Usagef("--diagram draws one capture at a time; give one file (the format goes after =: --diagram=html)")
	}
	r, label := env.Stdin, "<stdin>"
	if files[0] != "-" {
		f, err := os.Open(files[0])
		if err != nil {
			return fmt.Errorf("roce decode: %w", err)
		}
		defer f.Close()
		r, label = f, files[0]
	}
	ports := diagram.NewPorts(o.ports...)
	d, err := diagram.FromCapturePorts(r, ports)
	if err != nil {
		return fmt.Errorf("roce decode: %s: %w", label, err)
	}
	hint(env, label, ports)
	d.Title = filepath.Base(label)
	out := bufio.NewWriterSize(env.Stdout, 64<<10)
	if err := d.Write(out, o.diagram); err != nil {
		return fmt.Errorf("roce decode: %w", err)
	}
	return out.Flush()
}

// decodeFile decodes one capture file (or standard input for "-").
func decodeFile(name string, stdin io.Reader, m mode, many bool, out io.Writer, ports *diagram.Ports) error {
	var r io.Reader
	label := name
	if name == "-" {
		r, label = stdin, "<stdin>"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	var sink recordSink
	fileKey := ""
	if many {
		fileKey = label
	}
	switch m {
	case modeJSON:
		sink = newJSONSink(out, fileKey)
	case modeFlows:
		sink = newFlowSink(out)
	default:
		sink = newTextSink(out)
	}
	if many && m != modeJSON {
		fmt.Fprintf(out, "# %s\n", filepath.Base(label))
	}
	err := decodeCapture(r, sink, ports)
	if ferr := sink.finish(); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	return nil
}

// fileLabel is how messages name a file argument.
func fileLabel(name string) string {
	if name == "-" {
		return "<stdin>"
	}
	return name
}

// formatArg reports whether files starts with a diagram format given
// after a space (--diagram html): a format's name that is no file here.
func (o *options) formatArg(files []string) (diagram.Format, bool) {
	if len(files) < 2 || o.diagram != diagram.FormatText {
		return 0, false
	}
	var f diagram.Format
	if files[0] != "html" && files[0] != "text" || f.Set(files[0]) != nil {
		return 0, false
	}
	if _, err := os.Stat(files[0]); err == nil {
		return 0, false
	}
	return f, true
}

// Errors about the capture file as a whole.
var (
	errNotCapture      = errors.New("not a pcap or pcapng capture")
	errUnsupportedLink = errors.New("unsupported link type")
	errTruncatedFile   = errors.New("capture file ends in the middle of a record")
)

// packetSource is what pcapgo's Reader and NgReader have in common.
type packetSource interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() gplayers.LinkType
}

// Magic numbers at the start of capture files.
const (
	magicPcapMicro = 0xa1b2c3d4
	magicPcapNano  = 0xa1b23c4d
	magicPcapng    = 0x0a0d0d0a // section header block type
	magicGzip      = 0x1f8b
)

// openCapture detects the format of r by its magic number and returns a
// reader for it.
func openCapture(r io.Reader) (packetSource, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(4)
	if len(head) < 4 {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: only %d bytes", errNotCapture, len(head))
		}
		return nil, err
	}
	le, be := binary.LittleEndian.Uint32(head), binary.BigEndian.Uint32(head)
	switch {
	case le == magicPcapMicro || be == magicPcapMicro || le == magicPcapNano || be == magicPcapNano ||
		binary.BigEndian.Uint16(head) == magicGzip:
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("bad pcap file header: %w", readErr(err))
		}
		return pr, nil
	case be == magicPcapng:
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("bad pcapng file: %w", readErr(err))
		}
		return nr, nil
	}
	return nil, fmt.Errorf("%w: it starts with % x", errNotCapture, head)
}

// readErr turns the end of input in the middle of a structure into
// errTruncatedFile.
func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errTruncatedFile
	}
	return err
}

// linkLayer returns the gopacket layer type that a frame of link type lt
// starts with; raw IP (101) is told apart by the IP version.
func linkLayer(lt gplayers.LinkType, data []byte) (gopacket.LayerType, error) {
	switch lt {
	case gplayers.LinkTypeEthernet:
		return gplayers.LayerTypeEthernet, nil
	case gplayers.LinkTypeLinuxSLL:
		return gplayers.LayerTypeLinuxSLL, nil
	case gplayers.LinkTypeLinuxSLL2:
		return gplayers.LayerTypeLinuxSLL2, nil
	case gplayers.LinkTypeIPv4:
		return gplayers.LayerTypeIPv4, nil
	case gplayers.LinkTypeIPv6:
		return gplayers.LayerTypeIPv6, nil
	case gplayers.LinkTypeRaw:
		if len(data) > 0 && data[0]>>4 == 6 {
			return gplayers.LayerTypeIPv6, nil
		}
		return gplayers.LayerTypeIPv4, nil
	}
	return gopacket.LayerTypeZero, fmt.Errorf("%w %d (%v); roce decode reads Ethernet (1), Linux SLL (113), "+
		"Linux SLL2 (276) and raw IP (101, 228, 229)", errUnsupportedLink, int(lt), lt)
}

// maxFrames bounds the frames read from one capture.
const maxFrames = 1<<31 - 1

// decodeCapture reads every frame of the capture in r and hands what it
// decodes to sink, with the RoCE datagrams told by ports (nil: those on
// port 4791).
func decodeCapture(r io.Reader, sink recordSink, ports *diagram.Ports) error {
	src, err := openCapture(r)
	if err != nil {
		return err
	}
	// A pcap file has one link type, checked here; a pcapng file gives
	// one per interface, with each packet.
	if _, ok := src.(*pcapgo.Reader); ok {
		if _, err := linkLayer(src.LinkType(), nil); err != nil {
			return err
		}
	}
	dec := newPacketDecoder(ports)
	var start time.Time
	var rec packetRecord
	for frame := 1; frame <= maxFrames; frame++ {
		data, ci, err := src.ZeroCopyReadPacketData()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if errors.Is(readErr(err), errTruncatedFile) {
				return fmt.Errorf("%w (after frame %d)", errTruncatedFile, frame-1)
			}
			return fmt.Errorf("frame %d: %w", frame, err)
		}
		lt := src.LinkType()
		if len(ci.AncillaryData) > 0 {
			if l, ok := ci.AncillaryData[0].(gplayers.LinkType); ok {
				lt = l
			}
		}
		layer, err := linkLayer(lt, data)
		if err != nil {
			return fmt.Errorf("frame %d: %w", frame, err)
		}
		if frame == 1 {
			start = ci.Timestamp
		}
		rec = packetRecord{frame: frame, time: ci.Timestamp.Sub(start).Seconds(), wireLen: ci.Length}
		dec.decode(data, layer, &rec)
		sink.add(&rec)
	}
	return nil
}
