package libgoroce_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

// TestMulticast runs testdata/mcast.c: ibv_attach_mcast and
// ibv_detach_mcast on the device, their errors as the kernel's, the
// device's multicast limits, and one copy of each SEND to the group for
// each QP attached, the sender's included. The group is on loopback.
func TestMulticast(t *testing.T) {
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	exe := devicetest.CC(t, "mcast", []string{"testdata/mcast.c"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := h.Run(ctx, exe); r.Err != nil || !strings.Contains(r.Out, "multicast ok") {
		t.Fatalf("%s", r)
	}
	r := h.Run(ctx, "ibv_devinfo", "-v")
	for _, want := range []string{"max_mcast_grp:\t\t\t8192", "max_mcast_qp_attach:\t\t56", "max_total_mcast_qp_attach:\t458752"} {
		if !strings.Contains(r.Out, want) {
			t.Errorf("ibv_devinfo -v lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("%s", r)
	}
}
