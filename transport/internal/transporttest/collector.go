// Package transporttest holds helpers for the transports' tests.
package transporttest

import (
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Collector gathers what a transport delivers: pass its Handle as the
// handler. It fails its test for a delivered packet whose Parsed is not
// the parse of its Data (CheckParsed).
type Collector struct {
	tb   testing.TB
	mu   sync.Mutex
	pkts []transport.Packet
	got  chan struct{}
}

// NewCollector returns an empty Collector that reports to tb (a nil tb:
// it checks nothing).
func NewCollector(tb testing.TB) *Collector { return &Collector{tb: tb, got: make(chan struct{}, 1)} }

// Handle keeps copies of pkts, without their Parsed (which points into
// the transport's buffers).
func (c *Collector) Handle(pkts []transport.Packet) {
	c.mu.Lock()
	for _, p := range pkts {
		if err := CheckParsed(&p); err != nil && c.tb != nil {
			c.tb.Errorf("packet %x...: %v", p.Data[:min(len(p.Data), bth.BTHLen)], err)
		}
		p.Data = append([]byte(nil), p.Data...)
		p.Parsed = nil
		c.pkts = append(c.pkts, p)
	}
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
}

// Wait returns the packets once n have arrived, or what there is after
// the timeout, and forgets them.
func (c *Collector) Wait(n int, timeout time.Duration) []transport.Packet {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if len(c.pkts) >= n {
			p := c.pkts
			c.pkts = nil
			c.mu.Unlock()
			return p
		}
		c.mu.Unlock()
		select {
		case <-c.got:
		case <-deadline.C:
			c.mu.Lock()
			p := c.pkts
			c.pkts = nil
			c.mu.Unlock()
			return p
		}
	}
}
