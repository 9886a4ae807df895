package libgoroce_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

// TestVerbs runs testdata/verbs.c, a C program built against the
// system's <infiniband/verbs.h>, on the device: every verb's success and
// error returns, as libibverbs' man pages and kernel rxe give them.
func TestVerbs(t *testing.T) {
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	exe := devicetest.CC(t, "verbs", []string{"testdata/verbs.c"}, "-ldl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := h.Run(ctx, exe, "goroce0")
	if r.Err != nil || !strings.Contains(r.Out, ", 0 failed") {
		t.Fatalf("verbs: %s", r)
	}
	t.Log(strings.TrimSpace(r.Out))
}
