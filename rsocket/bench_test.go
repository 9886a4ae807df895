package rsocket

import (
	"io"
	"net"
	"testing"
	"time"
)

// benchPair returns a connected pair of the kind named: rsocket over UDP
// loopback or the in-memory link, or kernel TCP over loopback for
// comparison.
func benchPair(b *testing.B, kind string, opts *Options) (c, s net.Conn) {
	b.Helper()
	switch kind {
	case "tcp":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Skip(err)
		}
		defer ln.Close()
		ch := make(chan net.Conn, 1)
		go func() {
			s, err := ln.Accept()
			if err != nil {
				b.Error(err)
			}
			ch <- s
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s := <-ch
		b.Cleanup(func() {
			c.Close()
			s.Close()
		})
		return c, s
	case "rsocket-mem":
		cc, sc, _ := memHosts(b, transportNoFaults).pair(b, opts, opts)
		return cc, sc
	case "rsocket-udp-busypoll":
		o := Options{Spin: 2 * time.Millisecond}
		if opts != nil {
			o = *opts
			o.Spin = 2 * time.Millisecond
		}
		cc, sc, _ := udpHostsBusy(b, transportNoFaults, time.Microsecond).pair(b, &o, &o)
		return cc, sc
	case "rsocket-udp-1MiB":
		o := Options{SendBuffer: 1 << 20, RecvBuffer: 1 << 20, MaxMessage: 256 << 10}
		cc, sc, _ := udpHosts(b, transportNoFaults).pair(b, &o, &o)
		return cc, sc
	}
	cc, sc, _ := udpHosts(b, transportNoFaults).pair(b, opts, opts)
	return cc, sc
}

// The kinds of connection benchmarked: rsocket with the default options
// over UDP loopback and over the in-memory link; over UDP with 1 MiB
// buffers and 256 KiB messages (stream), or with the devices in
// busy-poll mode and calls spinning 50 µs (request/response); and kernel
// TCP over loopback.
var (
	streamKinds = []string{"rsocket-udp", "rsocket-udp-1MiB", "rsocket-mem", "tcp"}
	rpcKinds    = []string{"rsocket-udp", "rsocket-udp-busypoll", "rsocket-mem", "tcp"}
)

// BenchmarkStream is a one-way stream of 64 KiB writes, read into a
// 64 KiB buffer on the other side.
func BenchmarkStream(b *testing.B) {
	for _, kind := range streamKinds {
		b.Run(kind, func(b *testing.B) {
			c, s := benchPair(b, kind, nil)
			const size = 64 << 10
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, size)
				want := int64(b.N) * size
				var got int64
				for got < want {
					n, err := s.Read(buf)
					if err != nil {
						done <- err
						return
					}
					got += int64(n)
				}
				done <- nil
			}()
			buf := make([]byte, size)
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			reportSleeps(b, c, s)
		})
	}
}

// reportSleeps reports how often the two ends of an rsocket connection
// went to sleep per operation: each sleep is a goroutine wake-up.
func reportSleeps(b *testing.B, conns ...net.Conn) {
	var sleeps uint64
	for _, c := range conns {
		rc, ok := c.(*Conn)
		if !ok {
			return
		}
		sleeps += rc.Stats().Sleeps
	}
	b.ReportMetric(float64(sleeps)/float64(b.N), "sleeps/op")
}

// BenchmarkRequestResponse is a 64-byte request answered by a 64-byte
// response, one at a time: the round trip's latency.
func BenchmarkRequestResponse(b *testing.B) {
	for _, kind := range rpcKinds {
		b.Run(kind, func(b *testing.B) {
			c, s := benchPair(b, kind, nil)
			const size = 64
			go func() {
				buf := make([]byte, size)
				for {
					if _, err := io.ReadFull(s, buf); err != nil {
						return
					}
					if _, err := s.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, size)
			b.SetBytes(2 * size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
			reportSleeps(b, c, s)
		})
	}
}
