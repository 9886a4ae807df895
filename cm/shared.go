package cm

import (
	"context"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// A device has one agent, however its program reaches the device: the
// agents registry keys each agent by the device as roce.Open made it, so
// that the device and every traced view of it (roce.Trace) find the same
// one, whether NewAgent made it or the package-level Listen or Dial
// started it. An agent leaves the registry when it closes, which it does
// when its device closes.

// agents are the devices' agents.
var agents struct {
	mu sync.Mutex
	m  map[*roce.Device]*deviceAgent
}

// deviceAgent is a device's agent and the holds Listen and Dial have on
// it.
type deviceAgent struct {
	a     *Agent
	owned bool // made by NewAgent: the program closes it, not the last hold
	refs  int  // listeners and connections Listen and Dial made, under agents.mu
	// gone, once the last hold is given back, is closed when the agent
	// has closed and given up the device's QP 1: a Listen or Dial in
	// between waits for it and starts the next agent (it would find
	// this one closed, or QP 1 still taken).
	gone chan struct{}
}

// register records a as the agent of sd; the caller holds agents.mu.
func register(sd *roce.Device, a *Agent, owned bool) *deviceAgent {
	e := &deviceAgent{a: a, owned: owned}
	if agents.m == nil {
		agents.m = make(map[*roce.Device]*deviceAgent)
	}
	agents.m[sd] = e
	return e
}

// unregister forgets a, which is closing, unless its last hold closes it:
// then the entry stays until a has given up QP 1 (deviceAgent.gone).
func unregister(a *Agent) {
	agents.mu.Lock()
	defer agents.mu.Unlock()
	if e := agents.m[a.key]; e != nil && e.a == a && e.gone == nil {
		delete(agents.m, a.key)
	}
}

// acquireAgent returns dev's agent, started if need be, with a hold taken.
func acquireAgent(dev verbs.Device) (*deviceAgent, error) {
	sd, err := checkDevice(dev)
	if err != nil {
		return nil, err
	}
	agents.mu.Lock()
	defer agents.mu.Unlock()
	e := agents.m[sd]
	for e != nil && e.gone != nil {
		gone := e.gone
		agents.mu.Unlock()
		<-gone
		agents.mu.Lock()
		e = agents.m[sd]
	}
	if e == nil {
		a, err := newAgent(dev, sd, nil)
		if err != nil {
			return nil, err
		}
		e = register(sd, a, false)
	}
	e.refs++
	return e, nil
}

// ref takes one more hold and returns the function that gives it back; it
// must be called while another hold is taken.
func (e *deviceAgent) ref() func() {
	agents.mu.Lock()
	e.refs++
	agents.mu.Unlock()
	return e.unref()
}

// unref returns the function that gives back one hold, once; the last one
// closes an agent Listen or Dial started.
func (e *deviceAgent) unref() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			agents.mu.Lock()
			e.refs--
			last := e.refs == 0 && !e.owned
			if last {
				e.gone = make(chan struct{})
			}
			agents.mu.Unlock()
			if last {
				e.a.Close()
				agents.mu.Lock()
				if agents.m[e.a.key] == e {
					delete(agents.m, e.a.key)
				}
				agents.mu.Unlock()
				close(e.gone)
			}
		})
	}
}

// Listen starts accepting connection requests for addr on dev (see
// Agent.Listen), through dev's agent: the one the program made with
// NewAgent, or else one Listen starts. An agent Listen or Dial started
// stops when the last listener or connection they made on it is closed;
// the connections a listener accepted keep it running after the listener
// is closed. Any agent stops when its device closes.
func Listen(ctx context.Context, dev verbs.Device, addr netip.AddrPort, cfg *ListenConfig) (*Listener, error) {
	e, err := acquireAgent(dev)
	if err != nil {
		return nil, err
	}
	l, err := e.a.Listen(ctx, addr, cfg)
	if err != nil {
		e.unref()()
		return nil, err
	}
	l.shared, l.release = e, e.unref()
	return l, nil
}

// Dial connects to a listener at addr from dev (see Agent.Dial), through
// dev's agent, as Listen finds or starts it.
func Dial(ctx context.Context, dev verbs.Device, addr netip.AddrPort, p *Params) (*Conn, error) {
	e, err := acquireAgent(dev)
	if err != nil {
		return nil, err
	}
	c, err := e.a.Dial(ctx, addr, p)
	if err != nil {
		e.unref()()
		return nil, err
	}
	c.unshare = e.unref()
	return c, nil
}
