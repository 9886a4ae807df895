package rdmacm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/hwverbs"
)

func TestCheckDial(t *testing.T) {
	peer := netip.MustParseAddrPort("198.18.0.12:7174")
	var nilQP *hwverbs.QP
	var nilCQ *hwverbs.CQ
	tests := []struct {
		name string
		addr netip.AddrPort
		p    Params
		want error
	}{
		{"ok", peer, Params{RetryCount: 7, RNRRetryCount: 7, ACKTimeout: 31, MinRNRTimer: 31,
			PrivateData: make([]byte, MaxREQData)}, nil},
		{"zero address", netip.AddrPort{}, Params{}, cm.ErrAddr},
		{"unspecified", netip.MustParseAddrPort("0.0.0.0:7174"), Params{}, cm.ErrAddr},
		{"port 0", netip.MustParseAddrPort("198.18.0.12:0"), Params{}, cm.ErrAddr},
		{"zone", netip.MustParseAddrPort("[fe80::1%eth0]:7174"), Params{}, cm.ErrAddr},
		{"private data", peer, Params{PrivateData: make([]byte, MaxREQData+1)}, cm.ErrPrivateData},
		{"retry", peer, Params{RetryCount: 8}, cm.ErrInvalid},
		{"rnr retry", peer, Params{RNRRetryCount: 8}, cm.ErrInvalid},
		{"ack timeout", peer, Params{ACKTimeout: 32}, cm.ErrInvalid},
		{"rnr timer", peer, Params{MinRNRTimer: 32}, cm.ErrInvalid},
		{"nil QP pointer", peer, Params{QP: nilQP}, cm.ErrInvalid},
		{"nil CQ pointer", peer, Params{RecvCQ: nilCQ}, cm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkDial(tt.addr, &tt.p)
			if tt.want == nil && err != nil || !errors.Is(err, tt.want) {
				t.Errorf("checkDial: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCheckAccept(t *testing.T) {
	if err := checkAccept(&Params{PrivateData: make([]byte, MaxREPData)}); err != nil {
		t.Errorf("196 bytes: %v", err)
	}
	if err := checkAccept(&Params{PrivateData: make([]byte, MaxREPData+1)}); !errors.Is(err, cm.ErrPrivateData) {
		t.Errorf("197 bytes: %v, want ErrPrivateData", err)
	}
	if err := checkAccept(&Params{RetryCount: 9}); !errors.Is(err, cm.ErrInvalid) {
		t.Errorf("retry count 9: %v, want ErrInvalid", err)
	}
}

func TestListenAddr(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"", "0.0.0.0:0", nil},
		{"198.18.0.11:7174", "198.18.0.11:7174", nil},
		{"[::ffff:198.18.0.11]:7174", "198.18.0.11:7174", nil},
		{"[::]:0", "[::]:0", nil},
		{"[fe80::1%eth0]:7174", "", cm.ErrAddr},
	}
	for _, tt := range tests {
		var in netip.AddrPort
		if tt.in != "" {
			in = netip.MustParseAddrPort(tt.in)
		}
		got, err := listenAddr(in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%q: %v, want %v", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("%q: %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	for v, want := range map[uint8]uint8{0: 1, 1: 1, 16: 16} {
		if got := depth(v); got != want {
			t.Errorf("depth(%d) = %d, want %d", v, got, want)
		}
	}
	for v, want := range map[uint8]uint8{0: 7, 1: 1, 7: 7} {
		if got := count(v); got != want {
			t.Errorf("count(%d) = %d, want %d", v, got, want)
		}
	}
}

// Listen and Dial refuse a nil or zero device with an error that says
// what to give (or, in a build without librdmacm, that it is missing).
func TestNilDevice(t *testing.T) {
	addr := netip.MustParseAddrPort("198.18.0.12:7174")
	want := cm.ErrInvalid
	if !hwverbs.Built {
		want = hwverbs.ErrNotBuilt
	}
	for _, dev := range []*hwverbs.Device{nil, {}} {
		if _, err := Dial(t.Context(), dev, addr, nil); !errors.Is(err, want) {
			t.Errorf("Dial(%v): %v, want %v", dev, err, want)
		}
		if _, err := Listen(t.Context(), dev, addr, nil); !errors.Is(err, want) {
			t.Errorf("Listen(%v): %v, want %v", dev, err, want)
		}
	}
	// Conns and Listeners that Dial, Accept or Listen did not make.
	for _, c := range []*Conn{nil, {}} {
		if err := c.Close(); err == nil {
			t.Errorf("%#v.Close: no error", c)
		}
		if err := c.CloseContext(t.Context()); err == nil {
			t.Errorf("%#v.CloseContext: no error", c)
		}
		if c.QP() != nil || c.PD() != nil || c.PrivateData() != nil || c.Info() != (ConnInfo{}) || c.Err() == nil ||
			c.LocalAddr().IsValid() || c.RemoteAddr().IsValid() {
			t.Errorf("%#v: not empty", c)
		}
		if s, r := c.CQs(); s != nil || r != nil {
			t.Errorf("%#v: CQs", c)
		}
		select {
		case <-c.Done():
		default:
			t.Errorf("%#v: Done is open", c)
		}
	}
	for _, l := range []*Listener{nil, {}} {
		if _, err := l.Accept(t.Context()); err == nil {
			t.Errorf("%#v.Accept: no error", l)
		}
		if err := l.Close(); err == nil {
			t.Errorf("%#v.Close: no error", l)
		}
		if l.Addr().IsValid() {
			t.Errorf("%#v.Addr: %v", l, l.Addr())
		}
	}
}
