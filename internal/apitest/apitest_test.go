package apitest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestEntries(t *testing.T) {
	got := Entries(t, "testdata/sample")
	want := []string{"Func", "G.Get", "T.Ptr", "T.Value", "hidden.Reached"}
	if !slices.Equal(got, want) {
		t.Errorf("Entries = %q, want %q", got, want)
	}
	if got, want := PointerTypes(t, "testdata/sample"), []string{"G", "T"}; !slices.Equal(got, want) {
		t.Errorf("PointerTypes = %q, want %q", got, want)
	}
}

// recorder is a testing.TB that keeps its failures.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestErr(t *testing.T) {
	sentinel := errors.New("sentinel")
	for _, c := range []struct {
		err   error
		words []string
		fails int
	}{
		{fmt.Errorf("%w: bad QP", sentinel), []string{"QP"}, 0},
		{nil, nil, 1},
		{errors.New("bad QP"), []string{"QP"}, 1},
		{fmt.Errorf("%w: bad QP", sentinel), []string{"CQ", "PD"}, 2},
	} {
		r := &recorder{TB: t}
		Err(r, c.err, sentinel, c.words...)
		if len(r.errs) != c.fails {
			t.Errorf("Err(%v, %q) reported %q, want %d failures", c.err, c.words, r.errs, c.fails)
		}
	}
}

func TestNoPanic(t *testing.T) {
	r := &recorder{TB: t}
	NoPanic(r, "f", func() { panic("boom") })
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "f panicked: boom") {
		t.Errorf("NoPanic reported %q", r.errs)
	}
}

type safe struct{}

// Close names the type on a nil receiver.
func (s *safe) Close() error {
	if s == nil {
		return errors.New("nil *safe")
	}
	return nil
}

type fragile struct{ n int }

func (u *fragile) Close() error { u.n++; return nil }
func (u *fragile) Quiet() error { return nil }

func TestNilMethods(t *testing.T) {
	r := &recorder{TB: t}
	nilMethods(r, (*safe)(nil), []string{"Close"}, false)
	if len(r.errs) != 0 {
		t.Errorf("a nil-safe type: %q", r.errs)
	}
	nilMethods(r, (*fragile)(nil), []string{"Close", "Quiet"}, false)
	if len(r.errs) != 2 || !strings.Contains(r.errs[0], "Close panicked") || !strings.Contains(r.errs[1], "Quiet returned no error") {
		t.Errorf("a nil-fragile type: %q", r.errs)
	}
	// A type whose nil pointer is its zero value may return nil, not panic.
	r = &recorder{TB: t}
	nilMethods(r, (*fragile)(nil), []string{"Quiet"}, true)
	if len(r.errs) != 0 {
		t.Errorf("a zero-value type: %q", r.errs)
	}
	nilMethods(r, (*fragile)(nil), []string{"Close"}, true)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "Close panicked") {
		t.Errorf("a zero-value type that panics: %q", r.errs)
	}
}
