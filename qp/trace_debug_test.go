package qp

import (
	"fmt"
	"os"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// traceTransport prints every packet sent, for debugging a test.
type traceTransport struct {
	transport.Transport
	name string
}

func (t traceTransport) Send(pkts []transport.Packet) error {
	for _, p := range pkts {
		var bp bth.Packet
		bp.Parse(p.Data)
		extra := ""
		if bp.AETH != nil {
			extra = bp.AETH.Syndrome().String()
		}
		if bp.RETH != nil {
			extra += fmt.Sprintf(" len=%d", bp.RETH.DMALen())
		}
		fmt.Fprintf(os.Stderr, "%s %-28v psn=%d %s\n", t.name, bp.BTH.Opcode(), bp.BTH.PSN(), extra)
	}
	return t.Transport.Send(pkts)
}
