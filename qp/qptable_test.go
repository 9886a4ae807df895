package qp

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/transport/mem"
	"github.com/goroce/goroce/verbs"
)

// newTestDevice returns a device on its own in-memory network.
func newTestDevice(t *testing.T, cfg *Config) (*Device, *PD, *CQ) {
	t.Helper()
	n := mem.NewNetwork(nil)
	ep, err := n.Endpoint(addrA)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(ep, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		n.Close()
	})
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	return d, pd.(*PD), cq.(*CQ)
}

// TestQPTablePagesFreed: creating and destroying QPs, each of which takes
// a new QP number, leaves no page of the QP table behind. (Each range of
// 1,024 numbers ever used kept its 8 KiB page.)
func TestQPTablePagesFreed(t *testing.T) {
	d, pd, cq := newTestDevice(t, nil)
	keep, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	for range 5000 {
		q, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	d.qpMu.Lock()
	pages, live := d.qps.pages(), d.qps.live
	d.qpMu.Unlock()
	if pages != 1 || live != 1 {
		t.Fatalf("%d pages for %d live QPs after 5000 QPs came and went; want 1", pages, live)
	}
	if d.qps.get(keep.QPN()) != keep {
		t.Fatal("the QP that stayed is not found")
	}
	keep.Destroy()
	d.qpMu.Lock()
	pages = d.qps.pages()
	d.qpMu.Unlock()
	if pages != 0 {
		t.Fatalf("%d pages with no QP", pages)
	}
}

// TestMaxQPs: a device has at most Config.MaxQPs queue pairs; one more is
// refused with ErrNoQPN, and destroying one makes room.
func TestMaxQPs(t *testing.T) {
	_, pd, cq := newTestDevice(t, &Config{MaxQPs: 3})
	var qps []verbs.QP
	for range 3 {
		q, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, q)
	}
	_, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq})
	if !errors.Is(err, verbs.ErrNoQPN) {
		t.Fatalf("a fourth QP of three: %v", err)
	}
	t.Logf("refused: %v", err)
	qps[1].Destroy()
	if _, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq}); err != nil {
		t.Fatalf("after a destroy: %v", err)
	}
}

// TestMaxMRs: Config.MaxMRs bounds the device's memory regions.
func TestMaxMRs(t *testing.T) {
	_, pd, _ := newTestDevice(t, &Config{MaxMRs: 2})
	for range 2 {
		if _, err := pd.RegMR(make([]byte, 8), verbs.LocalWrite); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pd.RegMR(make([]byte, 8), verbs.LocalWrite); err == nil {
		t.Fatal("a third region of two was registered")
	}
}
