//go:build hwverbs && cgo && linux

package hwverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
)

// run is the event goroutine: completion events to the CQs' channels,
// asynchronous events to Events. Each poll waits at most a second, and
// Close wakes it at once through the eventfd.
func (d *Device) run() {
	defer d.wg.Done()
	fds := []unix.PollFd{
		{Fd: int32(C.gr_channel_fd(d.ch)), Events: unix.POLLIN},
		{Fd: int32(C.gr_async_fd(d.ctx)), Events: unix.POLLIN},
		{Fd: int32(d.wake), Events: unix.POLLIN},
	}
	for !d.stop.Load() {
		_, err := unix.Poll(fds, 1000)
		if d.stop.Load() {
			return
		}
		if err != nil {
			if err != unix.EINTR {
				d.log.Warn("event poll failed", "device", d.name, "err", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		for i, what := range [2]string{"completion channel", "async events"} {
			if fds[i].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
				// The device is gone or broken: stop polling this
				// descriptor rather than spin on it.
				d.log.Warn("event descriptor failed; no more events from it", "device", d.name,
					"fd", what, "revents", fds[i].Revents)
				fds[i].Fd = -1
				continue
			}
			if fds[i].Revents == 0 {
				continue
			}
			if i == 0 {
				d.cqEvents()
			} else {
				d.asyncEvents()
			}
		}
	}
}

func (d *Device) cqEvents() {
	for range eventBatch {
		id := int64(C.gr_cq_event(d.ch))
		if id == 0 {
			return
		}
		if id < 0 {
			d.log.Warn("ibv_get_cq_event failed", "device", d.name, "err", syscall.Errno(-id))
			return
		}
		d.mu.RLock()
		cq := d.cqs[uint64(id)]
		d.mu.RUnlock()
		if cq != nil {
			select {
			case cq.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (d *Device) asyncEvents() {
	for range eventBatch {
		rc := C.gr_async_event(d.ctx, d.aev)
		if rc == C.EAGAIN || rc == C.EWOULDBLOCK {
			return
		}
		if rc != 0 {
			d.log.Warn("ibv_get_async_event failed", "device", d.name, "err", syscall.Errno(rc))
			return
		}
		a := *d.aev
		t, ok := eventType(int(a.ev_type))
		if !ok {
			d.log.Debug("async event", "device", d.name, "type", int(a.ev_type), "port", int(a.port))
			continue
		}
		ev := verbs.Event{Type: t, QPN: uint32(a.qpn)}
		d.mu.RLock()
		switch t {
		case verbs.EventCQErr:
			if cq := d.cqs[uint64(a.ctx)]; cq != nil {
				ev.CQ = cq
			}
		case verbs.EventSRQLimitReached:
			if s := d.srqs[uint64(a.ctx)]; s != nil {
				ev.SRQ = s
			}
		}
		d.mu.RUnlock()
		d.log.Debug("async event", "device", d.name, "type", t, "qpn", ev.QPN)
		select {
		case d.events <- ev:
		default:
			d.dropped.Add(1)
			d.log.Warn("async event dropped: Events() is full", "device", d.name, "type", t)
		}
	}
}
