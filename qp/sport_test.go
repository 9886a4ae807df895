package qp

import "testing"

// TestUDPSourcePort checks the source ports Linux's rxe (Debian 12, kernel
// 6.1) used in the captures in testdata.
func TestUDPSourcePort(t *testing.T) {
	for _, c := range []struct {
		qpn, dest uint32
		port      uint16
		capture   string
	}{
		{0x11, 0x11, 49441, "rxe_write_bw.pcap"},
		{0x17, 0x17, 49681, "rxe_read_bw.pcap"},
		{0x19, 0x19, 49777, "rxe_atomic.pcap"},
		{0x1c, 0x1c, 49936, "rxe_send_lat.pcap"},
		{0x25, 0x25, 50521, "rxe_rnr_send_bw.pcap"},
		{0x13, 0, 53368, "rxe_ud_pingpong.pcap"},
		{0x20, 0, 52804, "rxe_send_bw_ud.pcap"},
		{1, 0, 55410, "rxe_rping_rdmacm.pcap (QP1)"},
	} {
		if got := udpSourcePort(c.qpn, c.dest, 0); got != c.port {
			t.Errorf("%s: QP %#x to %#x: port %d, rxe used %d", c.capture, c.qpn, c.dest, got, c.port)
		}
	}
}
