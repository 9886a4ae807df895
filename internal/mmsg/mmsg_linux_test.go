//go:build linux

package mmsg

import (
	"bytes"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSendRecv moves a batch over a loopback UDP socket and back, and
// checks that an empty non-blocking receive reports EAGAIN.
func TestSendRecv(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(fd, sa); err != nil { // to itself
		t.Fatal(err)
	}

	rx := make([]Msg, 4)
	bufs := Buffers(rx, 64)
	if n, e := Recv(uintptr(fd), rx, 0); n != 0 || e != unix.EAGAIN {
		t.Fatalf("Recv on an empty socket = %d, %v; want 0, EAGAIN", n, e)
	}

	payloads := [][]byte{[]byte("one"), []byte("two two"), []byte("three")}
	tx := make([]Msg, len(payloads))
	iovs := make([]unix.Iovec, len(payloads))
	for i, p := range payloads {
		iovs[i].Base = unsafe.SliceData(p)
		iovs[i].SetLen(len(p))
		tx[i].Hdr.Iov = &iovs[i]
		tx[i].Hdr.SetIovlen(1)
	}
	if n, e := Send(uintptr(fd), tx, 0); n != len(tx) || e != 0 {
		t.Fatalf("Send = %d, %v; want %d, 0", n, e, len(tx))
	}
	n, e := Recv(uintptr(fd), rx, 0)
	if n != len(payloads) || e != 0 {
		t.Fatalf("Recv = %d, %v; want %d, 0", n, e, len(payloads))
	}
	for i, p := range payloads {
		if got := bufs[i][:rx[i].Len]; !bytes.Equal(got, p) {
			t.Errorf("message %d: %q, want %q", i, got, p)
		}
	}
}

// TestSockaddr writes each family's address and reads it back as the
// kernel would leave it, and refuses a family it does not know.
func TestSockaddr(t *testing.T) {
	for _, ap := range []netip.AddrPort{netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("[2001:db8::1]:49152")} {
		var s Sockaddr
		n := s.Set(ap, ap.Addr().Is4())
		want := uint32(unix.SizeofSockaddrInet6)
		if ap.Addr().Is4() {
			want = unix.SizeofSockaddrInet4
		}
		if got, ok := s.Get(); !ok || got != ap || n != want {
			t.Errorf("%v: read back %v (%v), length %d, want %d", ap, got, ok, n, want)
		}
	}
	s := Sockaddr{}
	s.Family = unix.AF_UNIX
	if got, ok := s.Get(); ok {
		t.Errorf("AF_UNIX read as %v", got)
	}
}
