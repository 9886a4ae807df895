package libgoroce_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

// TestDeviceGone stops the device under a program that waits on it
// (testdata/gone.c), polling a CQ or blocked on its completion channel:
// the program sees it within seconds, as a NIC's catastrophic error (the
// poll or the channel's read fails, IBV_EVENT_DEVICE_FATAL once, posts
// fail with EIO), tears down and closes the device, and its registered
// memory is its own again.
func TestDeviceGone(t *testing.T) {
	exe := devicetest.CC(t, "gone", []string{"testdata/gone.c"})
	for _, mode := range []string{"poll", "events"} {
		t.Run(mode, func(t *testing.T) {
			h := devicetest.NewHost(t)
			d := h.Start("goroce0", "127.0.0.1")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p := h.Go(ctx, exe, "goroce0", mode)
			defer p.Kill()
			p.WaitFor(t, "ready", 20*time.Second)
			if err := d.Srv.Close(); err != nil {
				t.Fatal(err)
			}
			// The device going must show in seconds, not at the
			// context's minute.
			done := make(chan *devicetest.Result, 1)
			go func() { done <- p.Wait() }()
			select {
			case r := <-done:
				if r.Err != nil || !strings.Contains(r.Out, ", 0 failed") {
					t.Fatalf("gone: %s", r)
				}
				t.Log(strings.TrimSpace(r.Out))
			case <-time.After(15 * time.Second):
				t.Fatalf("the program did not see its device go in 15 s:\n%s", p.Output())
			}
		})
	}
}
