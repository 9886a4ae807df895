package mr

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/apitest"
	"github.com/goroce/goroce/verbs"
)

// TestNilArgs calls every exported function and method of the package
// with nil, zero and out-of-range arguments: none panics, and errors name
// what is wrong and what to do.
func TestNilArgs(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	reg := func(t *testing.T) *MR {
		m, err := pd.Register(make([]byte, 16), LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	apitest.Run(t, ".", apitest.Table{
		"NewTable": func(t *testing.T) {
			a, b := NewTable(), NewTable()
			if a == nil || a == b {
				t.Error("NewTable returned nil, or one table twice")
			}
		},
		"NewTableMax": func(t *testing.T) {
			for n, want := range map[int]int{-1: DefaultMaxRegions, 0: DefaultMaxRegions, 5: 5, MaxRegions + 1: MaxRegions} {
				if tab := NewTableMax(n); tab == nil || tab.Limit() != want {
					t.Errorf("NewTableMax(%d): limit %d, want %d", n, tab.Limit(), want)
				}
			}
		},
		"Table.Len": func(t *testing.T) {
			zero(t, (*Table)(nil).Len())
			var z Table
			zero(t, z.Len())
		},
		"Table.Limit": func(t *testing.T) {
			zero(t, (*Table)(nil).Limit())
			var z Table
			if z.Limit() != DefaultMaxRegions {
				t.Errorf("the zero Table's limit is %d", z.Limit())
			}
		},
		"Table.AllocPD": func(t *testing.T) {
			if (*Table)(nil).AllocPD() != nil {
				t.Error("a nil table made a PD")
			}
			// The zero Table works.
			var z Table
			m, err := z.AllocPD().Register(make([]byte, 8), LocalWrite)
			if err != nil || m.LKey() == 0 {
				t.Fatalf("zero Table: key %#x, %v", m.LKey(), err)
			}
			if _, b, err := z.Lookup(m.PD(), 0, m.LKey(), m.Addr(), 8, 0); err != nil || len(b) != 8 {
				t.Errorf("zero Table lookup: %v", err)
			} else {
				m.Release(0)
			}
		},
		"PD.ID": func(t *testing.T) {
			if (*PD)(nil).ID() != 0 || pd.ID() == 0 {
				t.Error("IDs of a nil and a real PD")
			}
		},
		"PD.Hold": func(t *testing.T) {
			(*PD)(nil).Hold()
			p := tab.AllocPD()
			p.Hold()
			apitest.Err(t, p.Dealloc(), ErrPDBusy, "1 memory regions or queue pairs use it", "destroy them first")
			p.Drop()
		},
		"PD.Drop": func(t *testing.T) {
			(*PD)(nil).Drop()
			p := tab.AllocPD()
			p.Hold()
			p.Drop()
			if err := p.Dealloc(); err != nil {
				t.Error(err)
			}
		},
		"PD.Dealloc": func(t *testing.T) {
			apitest.Err(t, (*PD)(nil).Dealloc(), verbs.ErrNil, "nil *PD", "Table.AllocPD")
		},
		"PD.Register": func(t *testing.T) {
			for _, buf := range [][]byte{nil, {}} {
				_, err := pd.Register(buf, LocalWrite)
				apitest.Err(t, err, ErrEmpty, "at least one byte")
				apitest.Err(t, err, verbs.ErrInvalidAttr)
			}
			_, err := (*PD)(nil).Register(make([]byte, 1), 0)
			apitest.Err(t, err, verbs.ErrNil, "nil *PD")
			_, err = (&PD{}).Register(make([]byte, 1), 0)
			apitest.Err(t, err, verbs.ErrNil, "Table.AllocPD")
			_, err = pd.Register(make([]byte, 1), RemoteWrite)
			apitest.Err(t, err, ErrInvalidAccess, "REMOTE_WRITE", "add LocalWrite")
			apitest.Err(t, err, verbs.ErrInvalidAttr)
			_, err = pd.Register(make([]byte, 1), 1<<11)
			apitest.Err(t, err, ErrInvalidAccess, "unknown flags")
			_, err = pd.Register(make([]byte, 1), verbs.FlushPersistent)
			apitest.Err(t, err, ErrInvalidAccess, "FLUSH_PERSISTENT", "goroce's is not", "use FlushGlobal")
			_, err = pd.Register(make([]byte, 1), verbs.ZeroBased)
			apitest.Err(t, err, ErrInvalidAccess, "ZERO_BASED", "RegisterIOVA at address 0")
			if m, err := pd.Register(make([]byte, 1), LocalWrite|verbs.MWBind); err != nil || m.Access() != LocalWrite|verbs.MWBind {
				t.Errorf("a region that allows windows: %v", err)
			}
		},
		"PD.RegisterIOVA": func(t *testing.T) {
			_, err := pd.RegisterIOVA(make([]byte, 2), 1<<64-1, LocalWrite)
			apitest.Err(t, err, ErrBounds, "wrap around", "lower address")
			apitest.Err(t, err, verbs.ErrInvalidAttr)
			_, err = pd.RegisterIOVA(nil, 0, LocalWrite)
			apitest.Err(t, err, ErrEmpty)
		},
		"MR.Dereg": func(t *testing.T) {
			apitest.Err(t, (*MR)(nil).Dereg(), verbs.ErrNil, "nil *MR")
			apitest.Err(t, (&MR{}).Dereg(), verbs.ErrNil, "PD.Register")
			m := reg(t)
			if err := m.Dereg(); err != nil {
				t.Fatal(err)
			}
			apitest.Err(t, m.Dereg(), ErrDeregistered, "twice")
		},
		"MR.Invalidate": func(t *testing.T) {
			(*MR)(nil).Invalidate()
			m := reg(t)
			m.Invalidate()
			if _, err := tab.Find(pd, m.LKey()); err != nil {
				t.Errorf("Find an invalidated region: %v", err)
			}
			if _, _, err := tab.Lookup(pd, 0, m.LKey(), m.Addr(), 1, 0); !errors.Is(err, ErrKey) {
				t.Errorf("Lookup an invalidated region: %v", err)
			}
		},
		"MR.Rekey": func(t *testing.T) {
			_, err := (*MR)(nil).Rekey()
			apitest.Err(t, err, verbs.ErrNil, "nil *MR")
			m := reg(t)
			m.Dereg()
			_, err = m.Rekey()
			apitest.Err(t, err, ErrDeregistered, "register the memory again")
		},
		"MR.Sync":  func(t *testing.T) { (*MR)(nil).Sync() },
		"MR.LKey":  func(t *testing.T) { zero(t, (*MR)(nil).LKey()) },
		"MR.RKey":  func(t *testing.T) { zero(t, (*MR)(nil).RKey()) },
		"MR.Addr":  func(t *testing.T) { zero(t, (*MR)(nil).Addr()) },
		"MR.Len":   func(t *testing.T) { zero(t, (*MR)(nil).Len()) },
		"MR.Bytes": func(t *testing.T) { zero(t, len((*MR)(nil).Bytes())) },
		"MR.Access": func(t *testing.T) {
			zero(t, (*MR)(nil).Access())
		},
		"MR.PD": func(t *testing.T) {
			if (*MR)(nil).PD() != nil {
				t.Error("a nil MR has a PD")
			}
		},
		"Table.Lookup": func(t *testing.T) {
			_, _, err := (*Table)(nil).Lookup(nil, 0, 0, 0, 0, 0)
			apitest.Err(t, err, verbs.ErrNil, "nil *Table")
			for _, key := range []uint32{0, 1<<32 - 1} {
				if _, _, err := tab.Lookup(nil, 0, key, 0, 0, 0); !errors.Is(err, ErrKey) {
					t.Errorf("key %#x: %v", key, err)
				}
			}
			m := reg(t)
			if _, _, err := tab.Lookup(nil, 0, m.LKey(), m.Addr(), 1, 0); !errors.Is(err, ErrPD) {
				t.Errorf("nil PD: %v", err)
			}
		},
		"Table.SetSpread": func(t *testing.T) {
			apitest.Err(t, (*Table)(nil).SetSpread(0), verbs.ErrNil, "nil *Table")
			if err := NewTable().SetSpread(0); !errors.Is(err, ErrBounds) {
				t.Errorf("SetSpread(0): %v", err)
			}
		},
		"MR.Release": func(t *testing.T) { (*MR)(nil).Release(0) },
		"MR.Pin":     func(t *testing.T) { (*MR)(nil).Pin(0) },
		"MR.Unpin":   func(t *testing.T) { (*MR)(nil).Unpin(0) },
		"argError.Error": func(t *testing.T) {
			if got := (*argError)(nil).Error(); got != "<nil>" {
				t.Errorf("nil argError: %q", got)
			}
		},
		"argError.Unwrap": func(t *testing.T) {
			if (*argError)(nil).Unwrap() != nil {
				t.Error("a nil argError wraps")
			}
		},
		"Table.Find": func(t *testing.T) {
			_, err := (*Table)(nil).Find(nil, 0)
			apitest.Err(t, err, verbs.ErrNil, "nil *Table")
			if _, err := tab.Find(nil, 1<<32-1); !errors.Is(err, ErrKey) {
				t.Errorf("Find(nil, all ones): %v", err)
			}
		},
		"PD.AllocMW": func(t *testing.T) {
			_, err := (*PD)(nil).AllocMW(verbs.MWType1)
			apitest.Err(t, err, verbs.ErrNil, "nil *PD")
			for _, typ := range []verbs.MWType{0, 3} {
				_, err = pd.AllocMW(typ)
				apitest.Err(t, err, verbs.ErrInvalidAttr, "MWType1 or verbs.MWType2")
			}
		},
		"MW.RKey": func(t *testing.T) { zero(t, (*MW)(nil).RKey()); zero(t, (&MW{}).RKey()) },
		"MW.Type": func(t *testing.T) { zero(t, (*MW)(nil).Type()) },
		"MW.PD": func(t *testing.T) {
			if (*MW)(nil).PD() != nil {
				t.Error("a nil MW has a PD")
			}
		},
		"MW.Bound": func(t *testing.T) {
			if _, _, _, _, ok := (&MW{}).Bound(); ok {
				t.Error("a zero MW is bound")
			}
		},
		"MW.Dealloc": func(t *testing.T) {
			apitest.Err(t, (*MW)(nil).Dealloc(), verbs.ErrNil, "nil *MW", "PD.AllocMW")
			w, err := pd.AllocMW(verbs.MWType2)
			must(t, err)
			must(t, w.Dealloc())
			apitest.Err(t, w.Dealloc(), verbs.ErrDestroyed, "twice")
		},
		"MW.Bind": func(t *testing.T) {
			apitest.Err(t, (&MW{}).Bind(&Bind{}), verbs.ErrNil, "nil *MW")
			w, err := pd.AllocMW(verbs.MWType1)
			must(t, err)
			apitest.Err(t, w.Bind(nil), verbs.ErrNil, "nil *Bind")
		},
		"Table.LookupRemote": func(t *testing.T) {
			_, _, err := (*Table)(nil).LookupRemote(nil, 0, 0, 0, 0, 0)
			apitest.Err(t, err, verbs.ErrNil, "nil *Table")
			for _, key := range []uint32{0, 1<<32 - 1} {
				if _, _, err := tab.LookupRemote(nil, 0, key, 0, 0, 0); !errors.Is(err, ErrKey) {
					t.Errorf("key %#x: %v", key, err)
				}
			}
		},
		"Table.LookupRemoteRegion": func(t *testing.T) {
			_, err := (*Table)(nil).LookupRemoteRegion(nil, 0, 0, 0)
			apitest.Err(t, err, verbs.ErrNil, "nil *Table")
			for _, key := range []uint32{0, 1<<32 - 1} {
				if _, err := tab.LookupRemoteRegion(nil, 0, key, 0); !errors.Is(err, ErrKey) {
					t.Errorf("key %#x: %v", key, err)
				}
			}
		},
		"Table.Invalidate": func(t *testing.T) {
			apitest.Err(t, (*Table)(nil).Invalidate(nil, 0, 0), verbs.ErrNil, "nil *Table")
			if err := tab.Invalidate(nil, 1<<32-1, 0); !errors.Is(err, ErrKey) {
				t.Errorf("Invalidate(nil, all ones): %v", err)
			}
		},
	})
	apitest.NilReceivers(t, ".", (*Table)(nil), (*PD)(nil), (*MR)(nil), (*MW)(nil), (*argError)(nil))
}

func zero[T comparable](t *testing.T, v T) {
	t.Helper()
	var z T
	if v != z {
		t.Errorf("got %v, want %v", v, z)
	}
}
