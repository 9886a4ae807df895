package rocetest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/verbs"
)

// recorder is a testing.TB whose Fatal records the message and ends the
// goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// fails runs f with a recorder on its own goroutine and checks that it
// fails the test with a message that contains want.
func fails(t *testing.T, want string, f func(tb testing.TB)) {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		apitest.NoPanic(t, want, func() { f(r) })
	}()
	<-done
	if !strings.Contains(r.fatal, want) {
		t.Errorf("failed with %q, want %q", r.fatal, want)
	}
}

// benchFails checks that a benchmark body fails rather than panics.
func benchFails(t *testing.T, f func(b *testing.B)) {
	t.Helper()
	if r := testing.Benchmark(f); r.N != 0 {
		t.Errorf("the benchmark ran %d times", r.N)
	}
}

// TestNilArgs gives each helper nil devices, CQs and sides: each fails
// its test with a message, none panics.
func TestNilArgs(t *testing.T) {
	apitest.Run(t, ".", apitest.Table{
		"NewSide": func(t *testing.T) {
			fails(t, "NewSide needs a device", func(tb testing.TB) { NewSide(tb, nil, verbs.RC) })
		},
		"Side.Remote": func(t *testing.T) {
			fails(t, "nil *Side", func(tb testing.TB) { (*Side)(nil).Remote(tb, 0) })
		},
		"Wait": func(t *testing.T) {
			fails(t, "Wait needs a CQ", func(tb testing.TB) { Wait(tb, nil) })
		},
		"EveryOperation": func(t *testing.T) {
			fails(t, "needs a device", func(tb testing.TB) { EveryOperation(tb, nil, nil) })
		},
		"EveryOperationGID": func(t *testing.T) {
			fails(t, "needs a device", func(tb testing.TB) { EveryOperationGID(tb, nil, nil, 0, 0) })
		},
		"Side.RemoteGID": func(t *testing.T) {
			fails(t, "nil *Side", func(tb testing.TB) { (*Side)(nil).RemoteGID(tb, 0, 1) })
		},
		"Stream": func(t *testing.T) {
			benchFails(t, func(b *testing.B) { Stream(b, nil, nil, verbs.OpWrite, 0, 0) })
			benchFails(t, func(b *testing.B) { Stream(b, nil, nil, verbs.OpWrite, 1, 1) })
		},
		"Transfer": func(t *testing.T) {
			fails(t, "needs a device", func(tb testing.TB) { Transfer(tb, nil, nil, 1) })
		},
		"Sync": func(t *testing.T) { Sync(nil) },
		"PingPong": func(t *testing.T) {
			benchFails(t, func(b *testing.B) { PingPong(b, nil, nil, -1) })
			benchFails(t, func(b *testing.B) { PingPong(b, nil, nil, 2) })
		},
	})
	apitest.NilReceivers(t, ".", (*Side)(nil))
}
