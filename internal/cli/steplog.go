package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// StepLogger returns a logger that prints each record as the minimal RDMA
// sample's logs look, "[time #step who] KIND  message", numbering every
// record it prints: roce.Trace's records of each verb, work request and
// completion, and the commands' own steps (Step). It is safe for
// concurrent use.
func StepLogger(w io.Writer) *slog.Logger {
	if w == nil {
		w = io.Discard
	}
	return slog.New(&stepHandler{mu: new(sync.Mutex), w: w, step: new(atomic.Uint64)})
}

// TraceLogger returns a StepLogger on w when --trace is on, else nil.
func (d *DeviceFlags) TraceLogger(w io.Writer) *slog.Logger {
	if !d.Trace {
		return nil
	}
	return StepLogger(w)
}

// Step logs one of a command's own steps through log (nil: nowhere), of
// kind roce.StepControl (SLOW), roce.StepData (DATA) or another.
func Step(log *slog.Logger, kind, format string, args ...any) {
	if log != nil {
		log.Info(fmt.Sprintf(format, args...), "kind", kind)
	}
}

// stepHandler is the slog.Handler of StepLogger. Control-path steps are
// SLOW, data-path steps DATA, details INFO.
type stepHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	step  *atomic.Uint64
	attrs []slog.Attr
}

// Enabled reports true: a step logger prints every record.
func (h *stepHandler) Enabled(context.Context, slog.Level) bool { return true }

// Handle prints r as a numbered step.
func (h *stepHandler) Handle(_ context.Context, r slog.Record) error {
	kind, who := "INFO", ""
	var extra []string
	each := func(a slog.Attr) bool {
		switch a.Key {
		case "kind":
			kind = a.Value.String()
		case "step":
		case "who":
			who = " " + a.Value.String()
		default:
			extra = append(extra, a.Key+"="+a.Value.String())
		}
		return true
	}
	for _, a := range h.attrs {
		each(a)
	}
	r.Attrs(each)
	msg := r.Message
	if len(extra) > 0 {
		msg += " " + strings.Join(extra, " ")
	}
	n := h.step.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := fmt.Fprintf(h.w, "[%s #%04d%s] %-5s %s\n", r.Time.Format("15:04:05.000"), n, who, kind, msg)
	return err
}

// WithAttrs returns a handler that adds as to every record ("who" names
// the side).
func (h *stepHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

// WithGroup returns h: steps have no groups.
func (h *stepHandler) WithGroup(string) slog.Handler { return h }
