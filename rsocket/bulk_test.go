package rsocket

import (
	"hash/crc64"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goroce/goroce/transport"
)

// TestBulk streams 256 MiB (16 MiB under the race detector or -short)
// over UDP loopback, on a clean link and with 1 % of packets lost each
// way, and an eighth of that over the in-memory network with every kind
// of fault, and compares the CRC-64 of what was written and what was
// read.
// Credits must keep every data message off an RNR NAK.
func TestBulk(t *testing.T) {
	size := int64(256 << 20)
	if raceEnabled || testing.Short() {
		size = 16 << 20
	}
	for _, c := range []struct {
		name   string
		open   func(testing.TB, transport.Faults) *hosts
		faults transport.Faults
		size   int64
	}{
		{"udp/clean", udpHosts, transport.Faults{}, size},
		{"udp/loss", udpHosts, transport.Faults{Drop: 0.01}, size},
		// The in-memory network's seeded faults: loss, duplicates,
		// reordering and corruption (dropped by the ICRC check).
		{"mem/faults", memHosts, transport.Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.005}, size / 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			size := c.size
			h := c.open(t, c.faults)
			// 67 ms: tail losses are still timed out quickly, and eight
			// tries (0.5 s) outlast a peer the scheduler left waiting
			// while other test binaries ran under -race (16 ms ran out
			// of retries once so).
			opts := &Options{ACKTimeout: 14}
			w, r, _ := h.pair(t, opts, opts)
			start := time.Now()
			sent := make(chan uint64, 1)
			go func() {
				sent <- writeRandom(t, w, size)
				w.CloseWrite()
			}()
			sum := crc64.New(crc64.MakeTable(crc64.ECMA))
			n, err := io.CopyBuffer(sum, r, make([]byte, 256<<10))
			if err != nil {
				t.Fatalf("after %d bytes: %v", n, err)
			}
			el := time.Since(start)
			if want := <-sent; n != size || sum.Sum64() != want {
				t.Fatalf("read %d bytes with CRC-64 %#x, wrote %d with %#x", n, sum.Sum64(), size, want)
			}
			sa, sb := h.a.Stats().Engine, h.b.Stats().Engine
			if c.faults.Drop > 0 && sa.Retransmits == 0 {
				t.Error("no retransmission on a lossy link")
			}
			t.Logf("%d MiB in %v (%.0f MB/s); retransmitted packets %d+%d, RNR NAKs sent %d+%d",
				size>>20, el.Round(time.Millisecond), float64(size)/el.Seconds()/1e6, sa.Retransmits, sb.Retransmits,
				sa.SendRNRErr, sb.SendRNRErr)
			if sa.SendRNRErr+sb.SendRNRErr != 0 {
				t.Errorf("RNR NAKs: %d and %d; credits should prevent them", sa.SendRNRErr, sb.SendRNRErr)
			}
		})
	}
}

// writeRandom writes size pseudo-random bytes to w in writes of varied
// sizes and returns their CRC-64.
func writeRandom(t *testing.T, w io.Writer, size int64) uint64 {
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	sum := crc64.New(crc64.MakeTable(crc64.ECMA))
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, 1+rng.Int64N(int64(len(buf))))
		b := buf[:n]
		for i := 0; i < len(b); i += 8 {
			v := rng.Uint64()
			for j := i; j < i+8 && j < len(b); j++ {
				b[j] = byte(v)
				v >>= 8
			}
		}
		sum.Write(b)
		if _, err := w.Write(b); err != nil {
			t.Errorf("write: %v", err)
			return 0
		}
		left -= n
	}
	return sum.Sum64()
}
