package mad_test

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// A REQ as rdma_cm sends it to connect to port 7174 (rping's), decoded
// again by the passive side.
func Example() {
	req := &mad.REQ{
		LocalCommID:             0x792718f2,
		ServiceID:               mad.ServiceID(mad.PortSpaceTCP, 7174),
		LocalQPN:                0x1e,
		StartingPSN:             0x4b9fea, // the PSN this side expects to receive first
		RemoteCMResponseTimeout: 20,
		LocalCMResponseTimeout:  20,
		RetryCount:              7,
		RNRRetryCount:           7,
		MaxCMRetries:            15,
		PKey:                    0xFFFF,
		PathMTU:                 bth.MTU1024,
	}
	cma := mad.CMAHeader{
		SrcPort: 50069,
		Src:     netip.MustParseAddr("198.18.0.12"),
		Dst:     netip.MustParseAddr("198.18.0.11"),
	}
	if err := cma.Marshal(req.PrivateData[:]); err != nil {
		panic(err)
	}
	copy(req.PrivateData[mad.CMAHeaderLen:], "hello")

	var b [mad.Len]byte
	if err := mad.Encode(mad.CMHeader(mad.MethodSend, 0x2f2182779), req, b[:]); err != nil {
		panic(err)
	}

	h, m, err := mad.Decode(b[:])
	if err != nil {
		panic(err)
	}
	got := m.(*mad.REQ)
	ps, port, _ := mad.ParseServiceID(got.ServiceID)
	var hdr mad.CMAHeader
	if err := hdr.Unmarshal(got.PrivateData[:]); err != nil {
		panic(err)
	}
	fmt.Println(mad.AttrName(h.AttrID), h.Method, ps, port)
	fmt.Printf("QPN %#x PSN %#x MTU %v CM timeout %v\n", got.LocalQPN, got.StartingPSN, got.PathMTU, mad.Timeout(got.RemoteCMResponseTimeout))
	fmt.Println(hdr.Src, "->", hdr.Dst, string(got.PrivateData[mad.CMAHeaderLen:mad.CMAHeaderLen+5]))
	// Output:
	// REQ Send TCP 7174
	// QPN 0x1e PSN 0x4b9fea MTU 1024 CM timeout 4.294967296s
	// 198.18.0.12 -> 198.18.0.11 hello
}

func ExampleServiceID() {
	id := mad.ServiceID(mad.PortSpaceTCP, 7174)
	fmt.Printf("%#016x\n", id)
	ps, port, ok := mad.ParseServiceID(id)
	fmt.Println(ps, port, ok)
	// Output:
	// 0x0000000001061c06
	// TCP 7174 true
}

func ExampleREJ() {
	rej := &mad.REJ{LocalCommID: 1, RemoteCommID: 2, MessageRejected: mad.RejectedREQ, Reason: mad.RejInvalidServiceID}
	var b [mad.Len]byte
	if err := mad.Encode(mad.CMHeader(mad.MethodSend, 7), rej, b[:]); err != nil {
		panic(err)
	}
	_, m, _ := mad.Decode(b[:])
	fmt.Println(m.(*mad.REJ).MessageRejected, m.(*mad.REJ).Reason)
	// Output: REQ invalid service ID
}

func ExampleFieldError() {
	err := mad.Encode(mad.CMHeader(mad.MethodSend, 1), &mad.DREQ{RemoteQPN: 1 << 24}, make([]byte, mad.Len))
	fmt.Println(err)
	// Output: mad: DREQ.RemoteQPN = 16777216 does not fit in 24 bits (at most 16777215)
}
