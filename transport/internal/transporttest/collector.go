// Package transporttest holds helpers for the transports' tests.
package transporttest

import (
	"sync"
	"time"

	"github.com/goroce/goroce/transport"
)

// Collector gathers what a transport delivers: pass its Handle as the
// handler.
type Collector struct {
	mu   sync.Mutex
	pkts []transport.Packet
	got  chan struct{}
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector { return &Collector{got: make(chan struct{}, 1)} }

// Handle keeps copies of pkts.
func (c *Collector) Handle(pkts []transport.Packet) {
	c.mu.Lock()
	for _, p := range pkts {
		p.Data = append([]byte(nil), p.Data...)
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
