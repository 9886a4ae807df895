package mad

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/apitest"
)

// TestNilArgs calls every exported function and method of the package
// with nil, short and out-of-range arguments: none panics, and each error
// says what is wrong and wraps its sentinel.
func TestNilArgs(t *testing.T) {
	table := apitest.Table{
		"REJ.ARIBytes": func(t *testing.T) {
			if (*REJ)(nil).ARIBytes() != nil || len((&REJ{RejectInfoLength: 255}).ARIBytes()) != REJARILen {
				t.Error("ARI of a nil REJ, or of one that claims 255 bytes")
			}
		},
		"CMAHeader.Marshal": func(t *testing.T) {
			apitest.Err(t, (*CMAHeader)(nil).Marshal(make([]byte, CMAHeaderLen)), ErrNil, "nil *CMAHeader")
			apitest.Err(t, (&CMAHeader{}).Marshal(nil), ErrShort, "0 bytes, and the rdma_cm header takes 36")
			h := CMAHeader{Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("2001:db8::1")}
			apitest.Err(t, h.Marshal(make([]byte, CMAHeaderLen)), ErrAddr, "both IPv4 or both IPv6")
		},
		"CMAHeader.Unmarshal": func(t *testing.T) {
			apitest.Err(t, (*CMAHeader)(nil).Unmarshal(make([]byte, CMAHeaderLen)), ErrNil, "nil *CMAHeader")
			apitest.Err(t, (&CMAHeader{}).Unmarshal(make([]byte, 35)), ErrShort, "35 bytes")
			apitest.Err(t, (&CMAHeader{}).Unmarshal(make([]byte, CMAHeaderLen)), ErrIPVersion, ": 0")
			apitest.Err(t, (&CMAHeader{}).Unmarshal(append([]byte{9}, make([]byte, 35)...)), ErrCMAVersion, ": 9")
		},
		"PortSpace.String": func(t *testing.T) { want(t, PortSpace(0).String(), "PortSpace(0x0000)") },
		"ServiceID":        func(t *testing.T) { want(t, ServiceID(0xFFFF, 0xFFFF), uint64(0xFFFFFFFF)) },
		"ParseServiceID": func(t *testing.T) {
			if _, _, ok := ParseServiceID(1<<64 - 1); ok {
				t.Error("all ones parse")
			}
		},
		"TransportType.String": func(t *testing.T) { want(t, TransportType(0xFF).String() != "", true) },
		"Timeout":              func(t *testing.T) { want(t, Timeout(0xFF), Timeout(MaxTimeout)) },
		"TimeoutExp":           func(t *testing.T) { want(t, TimeoutExp(-time.Hour), uint8(0)) },
		"RejectReason.String":  func(t *testing.T) { want(t, RejectReason(0xFFFF).String() != "", true) },
		"RejectedMsg.String":   func(t *testing.T) { want(t, RejectedMsg(0xFF).String() != "", true) },
		"MRAedMsg.String":      func(t *testing.T) { want(t, MRAedMsg(0xFF).String() != "", true) },
		"SIDRStatus.String":    func(t *testing.T) { want(t, SIDRStatus(0xFF).String() != "", true) },
		"APStatus.String":      func(t *testing.T) { want(t, APStatus(0xFF).String() != "", true) },
		"FieldError.Error":     func(t *testing.T) { want(t, (*FieldError)(nil).Error(), "<nil>") },
		"FieldError.Unwrap": func(t *testing.T) {
			if (*FieldError)(nil).Unwrap() != nil {
				t.Error("a nil FieldError wraps")
			}
		},
		"Method.String": func(t *testing.T) { want(t, Method(0).String(), "Method(0x0)") },
		"AttrName":      func(t *testing.T) { want(t, AttrName(0xFFFF), "Attr(0xffff)") },
		"CMHeader":      func(t *testing.T) { want(t, CMHeader(0, 0).BaseVersion, uint8(BaseVersion)) },
		"Header.Marshal": func(t *testing.T) {
			apitest.Err(t, (*Header)(nil).Marshal(make([]byte, HeaderLen)), ErrNil, "nil *Header")
			apitest.Err(t, (&Header{}).Marshal(nil), ErrShort, "MAD header takes 24")
			apitest.Err(t, (&Header{}).Marshal(make([]byte, HeaderLen)), ErrBaseVersion, "0: set it to BaseVersion")
		},
		"Header.Unmarshal": func(t *testing.T) {
			apitest.Err(t, (*Header)(nil).Unmarshal(make([]byte, HeaderLen)), ErrNil, "nil *Header")
			apitest.Err(t, (&Header{}).Unmarshal(make([]byte, HeaderLen)), ErrBaseVersion, "0, where InfiniBand")
		},
		"NewMessage": func(t *testing.T) {
			if NewMessage(0xFFFF) != nil {
				t.Error("a message for attribute 0xffff")
			}
		},
		"Decode": func(t *testing.T) {
			_, _, err := Decode(nil)
			apitest.Err(t, err, ErrLength, "0 bytes")
			b := make([]byte, Len)
			h := CMHeader(MethodSend, 1)
			h.AttrID = 0x99
			h.MgmtClass = ClassPerf
			must(t, h.Marshal(b))
			_, _, err = Decode(b)
			apitest.Err(t, err, ErrClass, "0x04")
			h.MgmtClass, h.ClassVersion = ClassCM, 9
			must(t, h.Marshal(b))
			_, _, err = Decode(b)
			apitest.Err(t, err, ErrClassVersion, "9")
			h.ClassVersion = CMClassVersion
			must(t, h.Marshal(b))
			_, _, err = Decode(b)
			apitest.Err(t, err, ErrUnknownAttr, "Attr(0x0099)")
		},
		"Encode": func(t *testing.T) {
			apitest.Err(t, Encode(CMHeader(MethodSend, 1), nil, make([]byte, Len)), ErrNil, "needs a Message")
			apitest.Err(t, Encode(CMHeader(MethodSend, 1), (*REQ)(nil), make([]byte, Len)), ErrNil, "nil *REQ")
			apitest.Err(t, Encode(CMHeader(MethodSend, 1), &RTU{}, nil), ErrShort, "MAD takes 256")
			apitest.Err(t, Encode(Header{}, &RTU{}, make([]byte, Len)), ErrBaseVersion)
		},
	}
	// Every CM message: AttrID, and Marshal and Unmarshal refusing a nil
	// message and a short buffer.
	for _, m := range []Message{(*REQ)(nil), (*MRA)(nil), (*REJ)(nil), (*REP)(nil), (*RTU)(nil), (*DREQ)(nil),
		(*DREP)(nil), (*LAP)(nil), (*APR)(nil), (*SIDRREQ)(nil), (*SIDRREP)(nil), (*ClassPortInfo)(nil)} {
		name := reflect.TypeOf(m).Elem().Name()
		zero := NewMessage(m.AttrID())
		table[name+".AttrID"] = func(t *testing.T) {
			if zero == nil || reflect.TypeOf(zero) != reflect.TypeOf(m) {
				t.Errorf("NewMessage(%#x) = %T", m.AttrID(), zero)
			}
		}
		table[name+".Marshal"] = func(t *testing.T) {
			apitest.Err(t, m.Marshal(make([]byte, DataLen)), ErrNil, "nil *"+name)
			apitest.Err(t, zero.Marshal(make([]byte, DataLen-1)), ErrShort, "231 bytes", name+" class data takes 232")
		}
		table[name+".Unmarshal"] = func(t *testing.T) {
			apitest.Err(t, m.Unmarshal(make([]byte, DataLen)), ErrNil, "nil *"+name)
			apitest.Err(t, zero.Unmarshal(nil), ErrShort, "0 bytes", name+" class data")
		}
	}
	apitest.Run(t, ".", table)
	apitest.NilReceivers(t, ".", (*REQ)(nil), (*MRA)(nil), (*REJ)(nil), (*REP)(nil), (*RTU)(nil), (*DREQ)(nil),
		(*DREP)(nil), (*LAP)(nil), (*APR)(nil), (*SIDRREQ)(nil), (*SIDRREP)(nil), (*ClassPortInfo)(nil),
		(*CMAHeader)(nil), (*FieldError)(nil), (*Header)(nil))
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
