package rsocket

import (
	"testing"

	"github.com/goroce/goroce/internal/apitest"
)

// TestNilPointers calls every exported method of the package's types on a
// nil pointer: none panics, and each returns an error naming its type (a
// nil *Dialer and *ListenConfig are their zero values, as documented).
func TestNilPointers(t *testing.T) {
	apitest.NilReceivers(t, ".", (*Conn)(nil), apitest.Zero{P: (*Dialer)(nil)}, (*Listener)(nil), apitest.Zero{P: (*ListenConfig)(nil)}, (*Addr)(nil), (*Options)(nil), (*Stats)(nil), (*PacketConn)(nil), (*PacketStats)(nil))
}
