package cm

import (
	"context"
	"net/netip"
	"reflect"
	"sync"

	"github.com/goroce/goroce/verbs"
)

// Listen and Dial are Agent.Listen and Agent.Dial on the device's shared
// agent, shaped like net.Listen and net.Dial: the first of them on a
// device starts its agent (with the default Config), and the last
// listener or connection they made to be closed stops it. A program that
// sets the agent's Config makes its own with NewAgent instead; a device
// has one agent either way.

// sharedAgents are the agents Listen and Dial started, by device.
var sharedAgents struct {
	mu sync.Mutex
	m  map[verbs.Device]*sharedAgent
}

// sharedAgent counts the open listeners and connections of one agent.
type sharedAgent struct {
	dev  verbs.Device
	a    *Agent
	refs int // under sharedAgents.mu
}

// acquireAgent returns dev's shared agent, started if need be, with a
// reference taken.
func acquireAgent(dev verbs.Device) (*sharedAgent, error) {
	if _, err := checkDevice(dev); err != nil {
		return nil, err
	}
	if !reflect.TypeOf(dev).Comparable() {
		return nil, invalid("a device of type %T cannot key the shared agents; use NewAgent", dev)
	}
	sharedAgents.mu.Lock()
	defer sharedAgents.mu.Unlock()
	s := sharedAgents.m[dev]
	if s == nil {
		a, err := NewAgent(dev, nil)
		if err != nil {
			return nil, err
		}
		s = &sharedAgent{dev: dev, a: a}
		if sharedAgents.m == nil {
			sharedAgents.m = make(map[verbs.Device]*sharedAgent)
		}
		sharedAgents.m[dev] = s
	}
	s.refs++
	return s, nil
}

// ref takes one more reference and returns the function that gives it
// back; it must be called while another reference is held.
func (s *sharedAgent) ref() func() {
	sharedAgents.mu.Lock()
	s.refs++
	sharedAgents.mu.Unlock()
	return s.unref()
}

// unref returns the function that gives back one reference, once; the
// last one closes the agent.
func (s *sharedAgent) unref() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			sharedAgents.mu.Lock()
			s.refs--
			last := s.refs == 0
			if last && sharedAgents.m[s.dev] == s {
				delete(sharedAgents.m, s.dev)
			}
			sharedAgents.mu.Unlock()
			if last {
				s.a.Close()
			}
		})
	}
}

// Listen starts accepting connection requests for addr on dev (see
// Agent.Listen), through dev's shared agent. The connections it accepts
// keep the agent running after the listener is closed, until they are
// closed in turn.
func Listen(ctx context.Context, dev verbs.Device, addr netip.AddrPort, cfg *ListenConfig) (*Listener, error) {
	s, err := acquireAgent(dev)
	if err != nil {
		return nil, err
	}
	l, err := s.a.Listen(ctx, addr, cfg)
	if err != nil {
		s.unref()()
		return nil, err
	}
	l.shared, l.release = s, s.unref()
	return l, nil
}

// Dial connects to a listener at addr from dev (see Agent.Dial), through
// dev's shared agent.
func Dial(ctx context.Context, dev verbs.Device, addr netip.AddrPort, p *Params) (*Conn, error) {
	s, err := acquireAgent(dev)
	if err != nil {
		return nil, err
	}
	c, err := s.a.Dial(ctx, addr, p)
	if err != nil {
		s.unref()()
		return nil, err
	}
	c.unshare = s.unref()
	return c, nil
}
