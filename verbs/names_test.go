package verbs

import (
	"testing"
)

func TestNames(t *testing.T) {
	for s, want := range []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"} {
		if got := QPState(s).String(); got != want {
			t.Errorf("state %d: %q, want %q", s, got, want)
		}
	}
	for _, c := range []struct {
		got, want string
	}{
		{RC.String(), "RC"}, {UD.String(), "UD"}, {OpWriteImm.String(), "RDMA_WRITE_WITH_IMM"},
		{RemAccessErr.String(), "REM_ACCESS_ERR"}, {WRFlushErr.String(), "WR_FLUSH_ERR"},
		{WCRecvRDMAWithIm.String(), "RECV_RDMA_WITH_IMM"},
		{(AttrState | AttrSQPSN).String(), "STATE|SQ_PSN"}, {(LocalWrite | RemoteRead).String(), "LOCAL_WRITE|REMOTE_READ"},
		{EventCommEstablished.String(), "COMM_EST"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}
