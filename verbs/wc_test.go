package verbs

import (
	"errors"
	"strings"
	"testing"
)

func TestWCErr(t *testing.T) {
	ok := WC{ID: 1, Status: Success, Opcode: WCWrite, QPN: 17}
	if err := ok.Err(); err != nil {
		t.Fatalf("successful completion: %v", err)
	}
	for _, c := range []struct {
		wc   WC
		want string
	}{
		{WC{ID: 7, Status: RetryExcErr, Opcode: WCWrite, QPN: 17},
			"verbs: work request 7 on QP 17 completed with RETRY_EXC_ERR (opcode RDMA_WRITE)"},
		{WC{ID: 9, Status: RemAccessErr, Opcode: WCSend, QPN: 18, VendorErr: 0x81},
			"verbs: work request 9 on QP 18 completed with REM_ACCESS_ERR (opcode SEND, vendor error 0x81)"},
		{WC{ID: 3, Status: WRFlushErr, Opcode: WCRecv, QPN: 19},
			"verbs: work request 3 on QP 19 completed with WR_FLUSH_ERR (opcode RECV)"},
	} {
		t.Run(c.wc.Status.String(), func(t *testing.T) {
			err := c.wc.Err()
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != c.want {
				t.Errorf("Error() = %q, want %q", err, c.want)
			}
			if !errors.Is(err, c.wc.Status) {
				t.Errorf("errors.Is(err, %v) = false", c.wc.Status)
			}
			for _, other := range []Status{Success, LocLenErr, RNRRetryExcErr} {
				if errors.Is(err, other) {
					t.Errorf("errors.Is(err, %v) = true", other)
				}
			}
			var st Status
			if !errors.As(err, &st) || st != c.wc.Status {
				t.Errorf("errors.As(err, *Status) = %v", st)
			}
			var we *WCError
			if !errors.As(err, &we) || we.ID != c.wc.ID || we.QPN != c.wc.QPN || we.VendorErr != c.wc.VendorErr {
				t.Errorf("errors.As(err, *WCError) = %+v", we)
			}
		})
	}
}

func TestWCErrNil(t *testing.T) {
	var w *WC
	err := w.Err()
	if err == nil || !strings.Contains(err.Error(), "nil") {
		t.Fatalf("nil *WC: %v", err)
	}
}

func TestStatusError(t *testing.T) {
	var err error = RemOpErr
	if err.Error() != "REM_OP_ERR" || Status(200).Error() != "Status(200)" {
		t.Fatalf("%q %q", err.Error(), Status(200).Error())
	}
}
