package roce

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/verbs"
)

// Device is goroce's software RDMA device, as Open returns it: a
// verbs.Device whose PDs, CQs, QPs, ... are those of goroce's engine
// (package qp), over the link Config chose. Beyond the verbs it has the
// device's address, its counters, the link's unreachable notices, the
// busy-poll and linger steps a program ending without a closing exchange
// needs, and a hook for what must go when the device closes.
//
// A traced device (Trace, Config.Trace) is a *Device too: another view
// of the same device, which logs what goes through it; both share the
// engine, the counters and one Close.
//
// A Device is safe for concurrent use. Its methods on a nil *Device, or
// on one Open did not make, return errors wrapping verbs.ErrNil (or zero
// values), never panic.
type Device struct {
	dev *device // shared by every view of the device
	tr  *tracer // nil: not traced
}

// device is what the views of one device share.
type device struct {
	eng    *qp.Device
	link   transport.Transport // the link under the wrappers
	faulty *transport.Faulty   // nil without Config.Faults
	pcap   *os.File
	pw     *pcapfile.Writer
	self   *Device // the untraced view, as Open made it

	mu      sync.Mutex
	closing bool
	hooks   map[*func()]struct{} // OnClose's, until the device closes
}

var _ verbs.Device = (*Device)(nil)

// errNilDevice is what the methods of a nil Device return.
var errNilDevice = fmt.Errorf("roce: %w: nil *Device, or one Open did not make: open one with Open", verbs.ErrNil)

// ok reports whether d was made by Open.
func (d *Device) ok() bool { return d != nil && d.dev != nil }

// Name names the device: goroce:ADDR.
func (d *Device) Name() string {
	if !d.ok() {
		return ""
	}
	return d.dev.eng.Name()
}

// GID returns the RoCEv2 GID of the given index: the device's address
// (verbs.GIDFromAddr), or one of its addresses on a Multi link.
func (d *Device) GID(index int) ([16]byte, error) {
	if !d.ok() {
		return [16]byte{}, errNilDevice
	}
	return d.dev.eng.GID(index)
}

// GIDs returns the device's GID table, as the addresses behind the GIDs:
// its address, or the addresses of its Multi link in order.
func (d *Device) GIDs() []netip.Addr {
	if !d.ok() {
		return nil
	}
	return d.dev.eng.GIDs()
}

// ActiveMTU returns the largest path MTU the link carries.
func (d *Device) ActiveMTU() bth.MTU {
	if !d.ok() {
		return 0
	}
	return d.dev.eng.ActiveMTU()
}

// Caps returns the device's capabilities (verbs.CapsOf): those of
// goroce's engine, qp.Device.Caps; none for a nil Device.
func (d *Device) Caps() verbs.DeviceCap {
	if !d.ok() {
		return 0
	}
	return d.dev.eng.Caps()
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if !d.ok() {
		return nil, errNilDevice
	}
	if d.tr != nil {
		return d.tr.allocPD(d.dev.eng)
	}
	return d.dev.eng.AllocPD()
}

// CreateCQ returns a completion queue of at least cqe entries.
func (d *Device) CreateCQ(cqe int) (verbs.CQ, error) {
	if !d.ok() {
		return nil, errNilDevice
	}
	if d.tr != nil {
		return d.tr.createCQ(d.dev.eng, cqe)
	}
	return d.dev.eng.CreateCQ(cqe)
}

// Events delivers the device's asynchronous events (ibv_get_async_event);
// a nil Device's channel is nil.
func (d *Device) Events() <-chan verbs.Event {
	if !d.ok() {
		return nil
	}
	return d.dev.eng.Events()
}

// Close closes the device, through whichever view: it calls the OnClose
// functions, destroys the queue pairs, closes the link and flushes the
// capture file. Closing it again does nothing.
func (d *Device) Close() error {
	if !d.ok() {
		return errNilDevice
	}
	if d.tr != nil {
		d.tr.logf(StepControl, "close device %s", d.Name())
	}
	return d.dev.close()
}

// close runs the hooks once, then closes the engine and the capture.
func (dc *device) close() error {
	dc.mu.Lock()
	if dc.closing {
		dc.mu.Unlock()
		return nil
	}
	dc.closing = true
	hooks := dc.hooks
	dc.hooks = nil
	dc.mu.Unlock()
	for f := range hooks {
		(*f)()
	}
	err := dc.eng.Close()
	if perr := dc.closePcap(); err == nil {
		err = perr
	}
	return err
}

func (dc *device) closePcap() error {
	if dc.pcap == nil {
		return nil
	}
	err := dc.pw.Flush()
	if cerr := dc.pcap.Close(); err == nil {
		err = cerr
	}
	dc.pcap = nil
	return err
}

// OnClose arranges for f to be called once when the device closes, on
// the goroutine that closes it, before its queue pairs are destroyed and
// its link is closed, so that f may still use the device (package cm
// closes the device's connection manager so, which tells its peers); Close
// returns once each such f has. On a device that is closing or closed
// already, f is called at once, in its own goroutine, as
// context.AfterFunc does for a context that is done. stop cancels the call
// and reports whether it did: false once f has been started. A nil f is
// never called.
func (d *Device) OnClose(f func()) (stop func() bool) {
	if !d.ok() || f == nil {
		return func() bool { return false }
	}
	dc := d.dev
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.closing {
		go f()
		return func() bool { return false }
	}
	if dc.hooks == nil {
		dc.hooks = make(map[*func()]struct{})
	}
	key := &f
	dc.hooks[key] = struct{}{}
	return func() bool {
		dc.mu.Lock()
		defer dc.mu.Unlock()
		_, ok := dc.hooks[key]
		delete(dc.hooks, key)
		return ok
	}
}

// Addr returns the device's IP address: the source of its packets, and
// its GID.
func (d *Device) Addr() netip.Addr {
	if !d.ok() {
		return netip.Addr{}
	}
	return d.dev.eng.Addr()
}

// Clock returns the clock the device's timers run on: Config.Clock, or
// the system's. A package that times a protocol next to the device's
// (cm's retransmissions) uses it, so that one manual clock drives both.
func (d *Device) Clock() clock.Clock {
	if !d.ok() {
		return clock.Real{}
	}
	return d.dev.eng.Clock()
}

// Stats are a device's counters. All are cumulative; a Stats is a copy,
// owned by the caller.
type Stats struct {
	// Engine are the RDMA engine's: the protocol counters of the
	// device's queue pairs, alive and destroyed, summed (named after
	// rxe's hardware counters: retransmissions, NAKs, RNR retries, drops
	// by reason), and the packets dropped before reaching any QP.
	Engine qp.Stats
	// Link are the link's: packets and bytes each way, and what it
	// dropped (ICRC errors among them).
	Link transport.Stats
	// Faults are what Config.Faults did to the packets sent; zero
	// without them.
	Faults transport.FaultStats
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	if !d.ok() {
		return Stats{}
	}
	s := Stats{Engine: d.dev.eng.Stats(), Link: d.dev.eng.Transport().Stats()}
	if d.dev.faulty != nil {
		s.Faults = d.dev.faulty.FaultStats()
	}
	return s
}

// NotifyUnreachable calls f with every notice the device's link gives
// that a destination is unreachable, from a goroutine of the link's, until
// stop is called or the device closes; f must return quickly. The UDP
// link learns of them from ICMP errors, the in-memory network from
// addresses without an endpoint; AFPacket, or a Config.Transport that is
// no transport.UnreachableNotifier (or a nil Device), never calls f.
func (d *Device) NotifyUnreachable(f func(transport.Unreachable)) (stop func()) {
	if !d.ok() || f == nil {
		return func() {}
	}
	if n, ok := d.dev.link.(transport.UnreachableNotifier); ok {
		return n.NotifyUnreachable(f)
	}
	return func() {}
}

// Progress receives and handles, on the caller's goroutine, what waits on
// the link, and reports how many packets (or datagrams) it took. It works
// in busy-poll mode only (Config.BusyPoll) and returns 0 otherwise. An
// empty CQ.Poll does the same; Progress is for programs that spin on
// memory an RDMA WRITE fills rather than on a CQ (perftest's write
// latency test), so that their spinning goroutine drives the receive
// path.
func (d *Device) Progress() int {
	if !d.ok() {
		return 0
	}
	return d.dev.eng.Progress()
}

// PollLink receives and handles, on the caller's goroutine, what waits on
// the link, in any mode, and reports how many packets it took (0 also
// when the link's own goroutine was receiving, or the link cannot be
// polled): for a goroutine that spins while the link's receive goroutine
// cannot run, as in a process with GOMAXPROCS=1.
func (d *Device) PollLink() int {
	if !d.ok() {
		return 0
	}
	return d.dev.eng.PollLink()
}

// ProgressWait receives and handles, on the caller's goroutine, what
// comes from the link, as Progress does, but in any mode, and blocks
// (after a short adaptive spin) until something has come: it reports how
// many packets (or datagrams) it handled, or 0 once deadline (the zero
// Time: none) has passed or ctx has ended (with ctx's error). It is for
// programs that wait for memory an RDMA WRITE fills rather than for a
// completion. Over a link other than UDP, or while another goroutine
// waits for the link, it yields the processor and returns 0: the caller
// looks at its memory and calls again.
func (d *Device) ProgressWait(ctx context.Context, deadline time.Time) (int, error) {
	if !d.ok() {
		return 0, errNilDevice
	}
	return d.dev.eng.ProgressWait(ctx, deadline)
}

// Linger keeps the device answering until its link has been quiet (no
// packet received) for quiet, or until ctx ends; it measures real time.
// A program calls it after its last completion and before Close when it
// ends without a closing exchange: the peer may not yet have the ACK of
// the last request it sent, and sends that request again until it does,
// which a closed device would leave unanswered. TCP's TIME_WAIT does the
// same for the last segment's ACK.
func (d *Device) Linger(ctx context.Context, quiet time.Duration) error {
	if !d.ok() {
		return errNilDevice
	}
	return d.dev.eng.Linger(ctx, quiet)
}

// traced returns a view of d's device that logs to log.
func (d *Device) traced(log *slog.Logger) *Device {
	return &Device{dev: d.dev, tr: newTracer(log)}
}
