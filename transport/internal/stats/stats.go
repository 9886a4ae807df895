// Package stats holds the counters behind transport.Stats that the socket
// transports keep.
package stats

import (
	"sync/atomic"

	"github.com/goroce/goroce/transport"
)

// Counters are a transport's statistics, updated once per batch. They are
// safe for concurrent use.
type Counters struct {
	txPackets, txBytes, txErrors atomic.Uint64
	rxPackets, rxBytes           atomic.Uint64
	rxICRCErrors, rxMalformed    atomic.Uint64
	rxDropped                    atomic.Uint64
}

// Snapshot returns the counts so far.
func (c *Counters) Snapshot() transport.Stats {
	return transport.Stats{
		TxPackets:    c.txPackets.Load(),
		TxBytes:      c.txBytes.Load(),
		RxPackets:    c.rxPackets.Load(),
		RxBytes:      c.rxBytes.Load(),
		TxErrors:     c.txErrors.Load(),
		RxICRCErrors: c.rxICRCErrors.Load(),
		RxMalformed:  c.rxMalformed.Load(),
		RxDropped:    c.rxDropped.Load(),
	}
}

// AddTx adds what a Send sent and failed to send. Counts that are zero
// leave their counter alone: no shared cache line is written for nothing.
func (c *Counters) AddTx(packets, bytes, errs uint64) {
	if packets != 0 {
		c.txPackets.Add(packets)
		c.txBytes.Add(bytes)
	}
	if errs != 0 {
		c.txErrors.Add(errs)
	}
}

// AddRxDropped adds n datagrams the kernel dropped before the transport
// read them.
func (c *Counters) AddRxDropped(n uint64) { c.rxDropped.Add(n) }

// AddRx adds what a receive batch delivered and dropped, as AddTx does.
func (c *Counters) AddRx(packets, bytes, icrcErrors, malformed uint64) {
	if packets != 0 {
		c.rxPackets.Add(packets)
		c.rxBytes.Add(bytes)
	}
	if icrcErrors != 0 {
		c.rxICRCErrors.Add(icrcErrors)
	}
	if malformed != 0 {
		c.rxMalformed.Add(malformed)
	}
}
