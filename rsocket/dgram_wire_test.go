package rsocket

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"
)

// The headers as librdmacm lays them out (struct ds_header and struct
// ds_udp_header, rsocket.c), bytes written by hand from the structs.
func TestDSHeaderBytes(t *testing.T) {
	for _, tc := range []struct {
		from netip.AddrPort
		hex  string
	}{
		{netip.MustParseAddrPort("198.18.0.1:7174"), "0408" + "1c06" + "c6120001"},
		{netip.MustParseAddrPort("[2001:db8::1]:7174"), "0618" + "1c06" + "00000000" + "20010db8000000000000000000000001"},
	} {
		b := make([]byte, dsHdrLen6)
		n := putDSHeader(b, tc.from)
		if got := hex.EncodeToString(b[:n]); got != tc.hex {
			t.Errorf("ds_header of %v: %s, want %s", tc.from, got, tc.hex)
		}
		from, m, ok := parseDSHeader(b[:n])
		if !ok || m != n || from != tc.from {
			t.Errorf("parse %s: %v %d %v, want %v %d", tc.hex, from, m, ok, tc.from, n)
		}
	}
}

func TestUDPHeaderBytes(t *testing.T) {
	for _, tc := range []struct {
		h   udpHeader
		hex string
	}{
		{udpHeader{op: opData, qpn: 0x000123, addr: netip.MustParseAddr("198.18.0.1")},
			"55555555" + "04" + "00" + "10" + "00" + "00000123" + "c6120001"},
		{udpHeader{op: opCtrl, qpn: 0xABCDEF, addr: netip.MustParseAddr("2001:db8::2")},
			"55555555" + "06" + "07" + "1c" + "00" + "00abcdef" + "20010db8000000000000000000000002"},
	} {
		b := make([]byte, dsUDPHdrLen6)
		n := tc.h.put(b)
		if got := hex.EncodeToString(b[:n]); got != tc.hex {
			t.Errorf("ds_udp_header %+v: %s, want %s", tc.h, got, tc.hex)
		}
		h, m, ok := parseUDPHeader(b[:n], tc.h.addr.Is4())
		if !ok || m != n || h != tc.h {
			t.Errorf("parse %s: %+v %d %v, want %+v", tc.hex, h, m, ok, tc.h)
		}
	}
}

// TestHeadersRefused: what ds_valid_recv and udp_svc_valid_udp_hdr
// refuse, the parsers refuse.
func TestHeadersRefused(t *testing.T) {
	good4 := "55555555" + "04" + "00" + "10" + "00" + "00000123" + "c6120001"
	for name, tc := range map[string]struct {
		hex string
		v4  bool
	}{
		"empty":             {"", true},
		"short":             {good4[:30], true},
		"bad tag":           {"55555554" + good4[8:], true},
		"version 5":         {"5555555505" + good4[10:], true},
		"wrong length":      {"555555550400" + "1c" + good4[14:], true},
		"v4 from v6 source": {good4, false},
		"v6 cut short":      {"55555555" + "06" + "00" + "1c" + "00" + "00000123" + "20010db8", false},
	} {
		b, _ := hex.DecodeString(tc.hex)
		if _, _, ok := parseUDPHeader(b, tc.v4); ok {
			t.Errorf("ds_udp_header %s (%s) accepted", name, tc.hex)
		}
	}
	for name, h := range map[string]string{
		"empty":        "",
		"short":        "04081c06c612",
		"version 5":    "05081c06c6120001",
		"v4 length 24": "04181c06c6120001",
		"v6 length 8":  "06081c06c6120001",
		"v6 cut short": "06181c0600000000c6120001",
	} {
		b, _ := hex.DecodeString(h)
		if _, _, ok := parseDSHeader(b); ok {
			t.Errorf("ds_header %s (%s) accepted", name, h)
		}
	}
}

// FuzzDatagramHeaders: the parsers never panic, and what they accept
// encodes back to the same bytes.
func FuzzDatagramHeaders(f *testing.F) {
	for _, h := range []string{"04081c06c6120001", "5555555504001000" + "00000123c6120001",
		"0618" + "1c06" + "00000000" + "20010db8000000000000000000000001"} {
		b, _ := hex.DecodeString(h)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if from, n, ok := parseDSHeader(b); ok {
			out := make([]byte, dsHdrLen6)
			if m := putDSHeader(out, from); m != n || (!bytes.Equal(out[:m], b[:n]) && b[0] == 4) {
				t.Fatalf("ds_header %x: re-encoded %x", b[:n], out[:m])
			}
		}
		for _, v4 := range []bool{true, false} {
			if h, n, ok := parseUDPHeader(b, v4); ok {
				out := make([]byte, dsUDPHdrLen6)
				if m := h.put(out); m != n || !bytes.Equal(out[8:m], b[8:n]) && b[8] == 0 {
					t.Fatalf("ds_udp_header %x: re-encoded %x", b[:n], out[:m])
				}
			}
		}
	})
}
