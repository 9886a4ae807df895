package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/roce"
)

// Over rdma_cm the two sides say what the TCP hello says in the private
// data of the REQ (at most 56 bytes) and of the REP (196): the mode, the
// buffer, and the scenario's parameters, as "key=value" words. The QPNs,
// PSNs and GIDs travel in the CM messages themselves. The modes of seed
// programs with a protocol of their own on rdma_cm speak that instead
// (cmSeeds, seeds.go).

// privateData is the private data of a REQ or REP.
func (h *hello) privateData(limit int) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "m=%s a=%x k=%x l=%d", h.mode, h.buf.addr, h.buf.rkey, h.buf.len)
	keys := make([]string, 0, len(h.extra))
	for k := range h.extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, h.extra[k])
	}
	if b.Len() > limit {
		return nil, fmt.Errorf("the connection parameters take %d bytes; rdma_cm's private data holds %d (try --cm tcp)", b.Len(), limit)
	}
	return []byte(b.String()), nil
}

func parsePrivateData(pd []byte) (*hello, error) {
	pd = bytes.TrimRight(pd, "\x00")
	h := &hello{extra: map[string]string{}}
	for _, kv := range strings.Fields(string(pd)) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("the peer's private data is not a goroce session's: %.40q", pd)
		}
		var err error
		switch k {
		case "m":
			h.mode = v
		case "a":
			h.buf.addr, err = strconv.ParseUint(v, 16, 64)
		case "k":
			var n uint64
			n, err = strconv.ParseUint(v, 16, 32)
			h.buf.rkey = uint32(n)
		case "l":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 32)
			h.buf.len = uint32(n)
		default:
			h.extra[k] = v
		}
		if err != nil {
			return nil, fmt.Errorf("the peer's private data: %s=%q: %w", k, v, err)
		}
	}
	if h.mode == "" {
		return nil, fmt.Errorf("the peer's private data is not a goroce session's: %.40q", pd)
	}
	return h, nil
}

func (c *sessionConfig) cmParams(s *session, pd []byte) *cm.Params {
	mtu, _ := bth.MTUAtMost(c.mtu)
	depth := uint8(16)
	if seed := c.cmSeed(); seed != nil && seed.depth != 0 {
		depth = seed.depth // what the seed program offers
	}
	return &cm.Params{QP: s.qp, PrivateData: pd, ResponderResources: depth, InitiatorDepth: depth, PathMTU: mtu}
}

// dialSessionCM is the client's side over rdma_cm.
func dialSessionCM(ctx context.Context, c *sessionConfig, server string, log *slog.Logger) (*session, error) {
	raddr, err := cli.ResolveAddr(server)
	if err != nil {
		return nil, err
	}
	// The device's address: --bind, or the one this host reaches the
	// server from.
	local, err := cli.RouteSource(raddr)
	if err != nil {
		return nil, err
	}
	cfg, err := c.dev.Config(local.String())
	if err != nil {
		return nil, err
	}
	s, err := openSession(c, "client", cfg, log)
	if err != nil {
		return nil, err
	}
	agent, err := cm.NewAgent(roce.Untrace(s.dev), &cm.Config{Logger: log})
	if err != nil {
		s.close()
		return nil, err
	}
	fail := func(err error) (*session, error) { agent.Close(); s.close(); return nil, err }
	pd, err := s.hello(c.mode, c.mtu, c.extra).privateData(56)
	if err != nil {
		return fail(err)
	}
	cli.Step(log, roce.StepControl, "rdma_connect to %v:%d: REQ with the mode and the buffer in its private data", raddr, c.port)
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := agent.Dial(dctx, netip.AddrPortFrom(raddr, uint16(c.port)), c.cmParams(s, pd))
	if err != nil {
		var rej *cm.RejectError
		if errors.As(err, &rej) && len(bytes.TrimRight(rej.PrivateData, "\x00")) > 0 {
			return fail(&peerError{string(bytes.TrimRight(rej.PrivateData, "\x00"))})
		}
		return fail(fmt.Errorf("cannot connect: %w", err))
	}
	if seed := c.cmSeed(); seed != nil {
		// The seed program's protocol: what the REP carries, and what
		// follows the connection, are its own.
		s.done, s.remote = conn.Done(), conn.RemoteAddr().String()
		s.hangup = func() { conn.Close(); agent.Close() }
		ectx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		if err := seed.dialed(ectx, s, c, conn.PrivateData()); err != nil {
			s.close()
			return nil, err
		}
		return s, nil
	}
	theirs, err := parsePrivateData(conn.PrivateData())
	if err != nil {
		conn.Close()
		if sm := seedModes[c.mode]; sm != nil {
			err = fmt.Errorf("%w (if the server is %s, leave --proto goroce out: its protocol is the default)", err, sm.program.name)
		}
		return fail(err)
	}
	cli.Step(log, roce.StepControl, "connected: the server's buffer is %v", theirs.buf)
	s.peer, s.extra = theirs.buf, theirs.extra
	s.done, s.remote = conn.Done(), conn.RemoteAddr().String()
	s.hangup = func() { conn.Close(); agent.Close() }
	return s, nil
}

// listenCM makes the listener take clients over rdma_cm.
func (l *sessionListener) listenCM(ctx context.Context, addr netip.Addr) error {
	warn := l.cfg.warn
	if warn == nil {
		warn = io.Discard
	}
	// Each request the agent refuses (another port, say) is told, with
	// what the peer asked for: its rdma_connect fails with ECONNREFUSED,
	// and nothing else would say why.
	onReject := func(r cm.Rejection) { fmt.Fprintf(warn, "roce server: %v\n", r) }
	agent, err := cm.NewAgent(roce.Untrace(l.dev), &cm.Config{Logger: l.log, OnReject: onReject})
	if err != nil {
		return err
	}
	ln, err := agent.Listen(ctx, netip.AddrPortFrom(addr, uint16(l.cfg.port)), &cm.ListenConfig{OnRequest: l.onRequest})
	if err != nil {
		agent.Close()
		return fmt.Errorf("listen: %w", err)
	}
	l.agent, l.cmln = agent, ln
	cli.Step(l.log, roce.StepControl, "rdma_listen on %v:%d; RoCE device %s", addr, l.cfg.port, l.dev.Name())
	return nil
}

// onRequest decides an rdma_cm connection request: the mode must be the
// server's; the session is made, with its receives posted, before the
// REP goes out. A mode that speaks a seed program's protocol takes a
// request without goroce's private data as that program's client.
func (l *sessionListener) onRequest(ctx context.Context, r *cm.Request) (*cm.Params, error) {
	seed := l.cfg.cmSeed()
	theirs, err := parsePrivateData(r.PrivateData)
	if err != nil && seed != nil {
		cli.Step(l.log, roce.StepControl, "a request from %v without goroce's private data: the %s seed's client", r.Remote, l.cfg.mode)
		theirs, err = &hello{mode: l.cfg.mode, extra: map[string]string{}}, nil
	}
	if err != nil {
		l.refused = err
		l.tellRefused(r, err)
		return nil, cm.Reject([]byte(err.Error()))
	}
	if theirs.mode != l.cfg.mode {
		err := fmt.Errorf("mode mismatch: the server runs --mode %s, the client asked for --mode %s", l.cfg.mode, theirs.mode)
		l.refused = err
		l.tellRefused(r, err)
		if l.cancel != nil {
			l.cancel() // a one-client server stops, as over TCP
		}
		return nil, cm.Reject([]byte(err.Error()))
	}
	s, err := l.newSession()
	if err != nil {
		return nil, err
	}
	if l.cfg.prepare != nil {
		l.cfg.prepare(s)
	}
	var pd []byte
	if seed != nil && seed.repData != nil {
		pd = seed.repData(s)
	} else if pd, err = s.hello(l.cfg.mode, l.cfg.mtu, l.cfg.extra).privateData(196); err != nil {
		s.close()
		return nil, err
	}
	s.peer, s.extra = theirs.buf, theirs.extra
	l.pending = s
	return l.cfg.cmParams(s, pd), nil
}

// acceptCM waits for the next client over rdma_cm.
func (l *sessionListener) acceptCM(ctx context.Context) (*session, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if l.oneClient {
		l.cancel = cancel
	}
	l.refused = nil
	conn, err := l.cmln.Accept(actx)
	if err != nil {
		if l.refused != nil && ctx.Err() == nil {
			return nil, &exchangeError{l.refused}
		}
		return nil, err
	}
	s := l.pending
	l.pending = nil
	s.done, s.remote = conn.Done(), conn.RemoteAddr().String()
	s.hangup = func() { conn.Close() }
	if seed := l.cfg.cmSeed(); seed != nil && seed.accepted != nil {
		ectx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
		err := seed.accepted(ectx, s, l.cfg)
		cancel()
		if err != nil {
			s.close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &exchangeError{fmt.Errorf("exchange with %s: %w", s.remote, err)}
		}
	}
	return s, nil
}

// tellRefused says on stderr that the server refused r, and why.
func (l *sessionListener) tellRefused(r *cm.Request, why error) {
	if l.cfg.warn != nil {
		fmt.Fprintf(l.cfg.warn, "roce server: connection request from %v rejected: %v\n", r.Remote, why)
	}
}
