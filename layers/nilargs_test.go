package layers

import (
	"errors"
	"testing"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/apitest"
)

// TestNilArgs calls every exported function and method of the package
// with nil, zero and out-of-range arguments: none panics, and each error
// says what is wrong and wraps its sentinel.
func TestNilArgs(t *testing.T) {
	buf := func() gopacket.SerializeBuffer { return gopacket.NewSerializeBuffer() }
	apitest.Run(t, ".", apitest.Table{
		"RegisterMADClassLayerType": func(t *testing.T) {
			RegisterMADClassLayerType(0xFF, gopacket.LayerTypeZero)
			if lt := (&MAD{MgmtClass: 0xFF}).NextLayerType(); lt != gopacket.LayerTypePayload {
				t.Errorf("class 0xFF decodes as %v", lt)
			}
		},
		"MAD.LayerType": func(t *testing.T) { want(t, (*MAD)(nil).LayerType(), LayerTypeMAD) },
		"MAD.CanDecode": func(t *testing.T) { want(t, (*MAD)(nil).CanDecode(), gopacket.LayerClass(LayerTypeMAD)) },
		"MAD.NextLayerType": func(t *testing.T) {
			want(t, (*MAD)(nil).NextLayerType(), gopacket.LayerTypeZero)
		},
		"MAD.Response": func(t *testing.T) { want(t, (*MAD)(nil).Response(), false) },
		"MAD.DecodeFromBytes": func(t *testing.T) {
			apitest.Err(t, (*MAD)(nil).DecodeFromBytes(nil, nil), ErrNil, "nil *MAD")
			apitest.Err(t, (&MAD{}).DecodeFromBytes(nil, nil), ErrMADTruncated)
		},
		"MAD.SerializeTo": func(t *testing.T) {
			apitest.Err(t, (*MAD)(nil).SerializeTo(buf(), gopacket.SerializeOptions{}), ErrNil, "nil *MAD")
			apitest.Err(t, (&MAD{}).SerializeTo(nil, gopacket.SerializeOptions{}), ErrNil, "SerializeBuffer")
		},
		"MADClassName":     func(t *testing.T) { want(t, MADClassName(0xFE), "") },
		"MADMethodName":    func(t *testing.T) { want(t, MADMethodName(0), "") },
		"MADAttributeName": func(t *testing.T) { want(t, MADAttributeName(0, 0), "") },
		"FieldError.Error": func(t *testing.T) {
			want(t, (*FieldError)(nil).Error(), "<nil>")
			want(t, (&FieldError{Field: "BTH.PSN", Value: 1 << 24, Max: 1<<24 - 1}).Error(),
				"layers: BTH.PSN 16777216 does not fit its wire width: at most 16777215")
		},
		"FieldError.Unwrap": func(t *testing.T) {
			if (*FieldError)(nil).Unwrap() != nil {
				t.Error("a nil FieldError wraps")
			}
		},
		"RoCE.LayerType": func(t *testing.T) { want(t, (*RoCE)(nil).LayerType(), LayerTypeRoCE) },
		"RoCE.CanDecode": func(t *testing.T) { want(t, (*RoCE)(nil).CanDecode(), gopacket.LayerClass(LayerTypeRoCE)) },
		"RoCE.Has":       func(t *testing.T) { want(t, (*RoCE)(nil).Has(bth.HdrRETH), false) },
		"RoCE.NextLayerType": func(t *testing.T) {
			want(t, (*RoCE)(nil).NextLayerType(), gopacket.LayerTypeZero)
		},
		"RoCE.DecodeFromBytes": func(t *testing.T) {
			apitest.Err(t, (*RoCE)(nil).DecodeFromBytes(nil, nil), ErrNil, "nil *RoCE")
			if err := (&RoCE{}).DecodeFromBytes(nil, nil); !errors.Is(err, bth.ErrTruncated) {
				t.Errorf("decoding nothing: %v", err)
			}
		},
		"RoCE.SetICRCFlow": func(t *testing.T) { (*RoCE)(nil).SetICRCFlow(bth.Flow{}) },
		"RoCE.SetNetworkLayerForICRC": func(t *testing.T) {
			r := &RoCE{}
			apitest.Err(t, (*RoCE)(nil).SetNetworkLayerForICRC(nil, nil), ErrNil, "nil *RoCE")
			apitest.Err(t, r.SetNetworkLayerForICRC(&gplayers.IPv4{}, nil), ErrNil, "*layers.UDP")
			apitest.Err(t, r.SetNetworkLayerForICRC((*gplayers.IPv4)(nil), &gplayers.UDP{}), ErrNil, "nil *layers.IPv4")
			apitest.Err(t, r.SetNetworkLayerForICRC((*gplayers.IPv6)(nil), &gplayers.UDP{}), ErrNil, "nil *layers.IPv6")
			apitest.Err(t, r.SetNetworkLayerForICRC(nil, &gplayers.UDP{}), ErrICRCNetworkLayer)
			apitest.Err(t, r.SetNetworkLayerForICRC(&gplayers.IPv4{}, &gplayers.UDP{}), ErrICRCNetworkLayer)
		},
		"RoCE.VerifyICRC": func(t *testing.T) {
			want(t, (*RoCE)(nil).VerifyICRC(nil), false)
			want(t, (&RoCE{Packet: bth.Packet{Raw: make([]byte, 16)}}).VerifyICRC(nil), false)
		},
		"RoCE.SerializeTo": func(t *testing.T) {
			opts := gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}
			apitest.Err(t, (*RoCE)(nil).SerializeTo(buf(), opts), ErrNil, "nil *RoCE")
			apitest.Err(t, (&RoCE{}).SerializeTo(nil, opts), ErrNil, "SerializeBuffer")
			apitest.Err(t, (&RoCE{BTH: bth.BTHFields{Opcode: 0xFF}}).SerializeTo(buf(), opts), ErrUndefinedOpcode,
				"0xff", "set BTH.Opcode")
			apitest.Err(t, (&RoCE{BTH: bth.BTHFields{PSN: 1 << 24}}).SerializeTo(buf(), opts), ErrFieldRange,
				"BTH.PSN", "at most 16777215")
			apitest.Err(t, (&RoCE{}).SerializeTo(buf(), opts), ErrNoICRCFlow)
			r := &RoCE{}
			r.SetICRCFlow(bth.Flow{})
			apitest.Err(t, r.SerializeTo(buf(), opts), bth.ErrFlow, "both IPv4 or both IPv6")
		},
	})
	apitest.NilReceivers(t, ".", (*MAD)(nil), (*RoCE)(nil), (*FieldError)(nil))
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}
