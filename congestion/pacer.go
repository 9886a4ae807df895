package congestion

import "time"

// Pacer spaces a flow's packets at a rate, as a token bucket whose tokens
// are nanoseconds (gVisor's tbf qdisc keeps them so): it holds the time at
// which the flow's packets sent so far have left at the rate, and a packet
// may go once that time is not ahead of now. A flow idle for a while may
// send Burst's worth at once, no more. The zero Pacer lets everything go.
// It is plain data: not safe for concurrent use.
type Pacer struct {
	next time.Time
}

// Ready reports whether a packet may go at now.
func (p *Pacer) Ready(now time.Time) bool { return !p.next.After(now) }

// Next returns when the next packet may go.
func (p *Pacer) Next() time.Time { return p.next }

// Sent charges n bytes sent at now at rate bits per second; burst bounds
// what a flow idle since before now-burst may send at once.
func (p *Pacer) Sent(n int, rate float64, now time.Time, burst time.Duration) {
	if rate <= 0 {
		return
	}
	if floor := now.Add(-burst); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(time.Duration(float64(n) * 8 / rate * float64(time.Second)))
}

// Reset forgets what was charged: the next packet may go at once.
func (p *Pacer) Reset() { p.next = time.Time{} }
