package stats

import (
	"testing"

	"github.com/goroce/goroce/transport"
)

func TestCounters(t *testing.T) {
	var c Counters
	c.AddTx(2, 100, 0)
	c.AddTx(0, 0, 3)
	c.AddRx(4, 200, 1, 0)
	c.AddRx(0, 0, 0, 5)
	want := transport.Stats{TxPackets: 2, TxBytes: 100, TxErrors: 3, RxPackets: 4, RxBytes: 200, RxICRCErrors: 1, RxMalformed: 5}
	if got := c.Snapshot(); got != want {
		t.Errorf("Snapshot() = %+v, want %+v", got, want)
	}
}
