package oob

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/apitest"
)

// TestNilArgs calls every exported function and method of the package
// with nil, zero and out-of-range arguments: none panics, and each error
// says what is wrong and wraps its sentinel.
func TestNilArgs(t *testing.T) {
	ctx := context.Background()
	cfg := &Config{Timeout: time.Second}
	withVersion := &Perftest{role: Client, version: true, hasDest: true} // no connection
	apitest.Run(t, ".", apitest.Table{
		"Dial": func(t *testing.T) {
			_, err := Dial(ctx, "", cfg)
			apitest.Err(t, err, ErrIO, "dial")
		},
		"Accept": func(t *testing.T) {
			_, err := Accept(ctx, nil, nil)
			apitest.Err(t, err, ErrInvalid, "no listener")
			_, err = Accept(ctx, (*net.TCPListener)(nil), nil)
			apitest.Err(t, err, nil, "accept")
		},
		"Error.Error": func(t *testing.T) { want(t, (*Error)(nil).Error(), "<nil>") },
		"Error.Unwrap": func(t *testing.T) {
			if (*Error)(nil).Unwrap() != nil {
				t.Error("a nil Error wraps")
			}
		},
		"Role.String": func(t *testing.T) { want(t, Role(0).String(), "Role(0)") },
		"NewPerftest": func(t *testing.T) {
			p := NewPerftest(nil, Client, nil)
			_, err := p.ExchangeVersions(ctx)
			apitest.Err(t, err, ErrInvalid, "no connection", "Dial or Accept")
		},
		"Perftest.Peer": func(t *testing.T) { want(t, (*Perftest)(nil).Peer(), Compat{}) },
		"Perftest.ExchangeVersions": func(t *testing.T) {
			_, err := NewPerftest(nil, 0, &Config{PerftestVersion: "0123456789abcdef"}).ExchangeVersions(ctx)
			apitest.Err(t, err, ErrInvalid, "not 1 to 15 printable characters")
		},
		"Perftest.CheckSysData": func(t *testing.T) {
			_, err := NewPerftest(nil, Client, nil).CheckSysData(ctx, SysData{})
			apitest.Err(t, err, ErrInvalid, "before ExchangeVersions")
		},
		"Perftest.CheckMTU": func(t *testing.T) {
			_, err := withVersion.CheckMTU(ctx, 0)
			apitest.Err(t, err, ErrInvalid, "not an ibv_mtu value")
		},
		"Perftest.HandShake": func(t *testing.T) {
			_, err := withVersion.HandShake(ctx, PerftestDest{QPN: 1 << 24})
			apitest.Err(t, err, ErrInvalid, "wider than 24 bits")
		},
		"Perftest.ExchangeDests": func(t *testing.T) {
			_, err := withVersion.ExchangeDests(ctx, nil)
			apitest.Err(t, err, ErrInvalid, "no local entries")
		},
		"Perftest.Barrier": func(t *testing.T) {
			apitest.Err(t, NewPerftest(nil, Server, nil).Barrier(ctx), ErrInvalid, "before any HandShake")
		},
		"Perftest.ExchangeBWReports": func(t *testing.T) {
			_, err := withVersion.ExchangeBWReports(ctx, BWReport{})
			apitest.Err(t, err, ErrInvalid, "no connection")
			_, err = (*Perftest)(nil).ExchangeBWReports(ctx, BWReport{})
			apitest.Err(t, err, ErrInvalid, "nil *Perftest", "NewPerftest")
		},
		"Perftest.CloseConnection": func(t *testing.T) {
			apitest.Err(t, withVersion.CloseConnection(ctx), ErrInvalid, "no connection")
		},
		"EncodeVersion": func(t *testing.T) {
			apitest.Err(t, EncodeVersion(nil, "6.06"), ErrInvalid, "need 16")
			apitest.Err(t, EncodeVersion(make([]byte, VersionLen), ""), ErrInvalid, "1 to 15 printable")
		},
		"ParseVersion": func(t *testing.T) {
			_, err := ParseVersion(nil)
			apitest.Err(t, err, ErrFormat, "0 bytes")
		},
		"CompatFor": func(t *testing.T) { want(t, CompatFor("").Number, 0.0) },
		"SysData.Encode": func(t *testing.T) {
			apitest.Err(t, SysData{}.Encode(nil), ErrInvalid, "need 8")
		},
		"ParseSysData": func(t *testing.T) {
			_, err := ParseSysData(nil)
			apitest.Err(t, err, ErrFormat, "0 bytes")
		},
		"SysData.Agree": func(t *testing.T) { want(t, SysData{}.Agree(SysData{CycleBuffer: -1}), SysData{}) },
		"AgreeMTU":      func(t *testing.T) { want(t, AgreeMTU(bth.MTU1024, 0), bth.MTU1024) },
		"EncodeMTU": func(t *testing.T) {
			apitest.Err(t, EncodeMTU(nil, bth.MTU1024), ErrInvalid, "want 2 or 4")
			apitest.Err(t, EncodeMTU(make([]byte, MTULen), 0), ErrInvalid, "not an ibv_mtu value")
		},
		"ParseMTU": func(t *testing.T) {
			_, err := ParseMTU(nil)
			apitest.Err(t, err, ErrFormat, "0 bytes")
		},
		"PerftestDest.Encode": func(t *testing.T) {
			apitest.Err(t, (*PerftestDest)(nil).Encode(make([]byte, PerftestDestLen)), ErrInvalid, "nil *PerftestDest")
			apitest.Err(t, (&PerftestDest{}).Encode(nil), ErrInvalid, "need 108")
		},
		"ParsePerftestDest": func(t *testing.T) {
			_, err := ParsePerftestDest(nil)
			apitest.Err(t, err, ErrFormat, "0 bytes")
		},
		"PerftestDest.EncodeCM": func(t *testing.T) {
			apitest.Err(t, (*PerftestDest)(nil).EncodeCM(nil, 0), ErrInvalid, "nil *PerftestDest")
			apitest.Err(t, (&PerftestDest{}).EncodeCM(nil, -1), ErrInvalid, "need 56")
			apitest.Err(t, (&PerftestDest{PSN: 1 << 24}).EncodeCM(make([]byte, PerftestDestCMLen), 0), ErrInvalid,
				"wider than 24 bits")
		},
		"ParsePerftestDestCM": func(t *testing.T) {
			_, _, err := ParsePerftestDestCM(nil)
			apitest.Err(t, err, ErrFormat, "0 bytes")
		},
		"BWReportFields": func(t *testing.T) { want(t, len(BWReportFields(Compat{}, false)), 5) },
		"BWReportLen":    func(t *testing.T) { want(t, BWReportLen(Compat{}, false), 36) },
		"BWReport.Encode": func(t *testing.T) {
			_, err := (*BWReport)(nil).Encode(nil, Compat{}, false)
			apitest.Err(t, err, ErrInvalid, "nil *BWReport")
			_, err = (&BWReport{}).Encode(nil, Compat{}, true)
			apitest.Err(t, err, ErrInvalid, "need 68")
		},
		"ParseBWReport": func(t *testing.T) {
			_, err := ParseBWReport(nil, Compat{}, false)
			apitest.Err(t, err, ErrFormat, "0 bytes")
		},
		"Dest.Encode": func(t *testing.T) {
			apitest.Err(t, (*Dest)(nil).Encode(make([]byte, DestLen)), ErrInvalid, "nil *Dest")
			apitest.Err(t, (&Dest{QPN: 1 << 24}).Encode(make([]byte, DestLen)), ErrInvalid, "wider than 24 bits")
		},
		"ParseDest": func(t *testing.T) {
			_, err := ParseDest(nil)
			apitest.Err(t, err, ErrFormat, "0 bytes")
		},
		"ParseDone": func(t *testing.T) { apitest.Err(t, ParseDone(nil), ErrFormat, `"done\0"`) },
		"PingpongClient": func(t *testing.T) {
			_, err := PingpongClient(ctx, nil, nil, 1, nil)
			apitest.Err(t, err, ErrInvalid, "no connection")
			_, err = PingpongClient(ctx, nil, nil, 0, nil)
			apitest.Err(t, err, ErrInvalid, "want 1 to 256")
		},
		"NewPingpongServer": func(t *testing.T) {
			_, err := NewPingpongServer(nil, 1, nil).ReadDests(ctx)
			apitest.Err(t, err, ErrInvalid, "no connection")
		},
		"PingpongServer.ReadDests": func(t *testing.T) {
			_, err := NewPingpongServer(nil, 0, nil).ReadDests(ctx)
			apitest.Err(t, err, ErrInvalid, "want 1 to 256")
		},
		"PingpongServer.Reply": func(t *testing.T) {
			apitest.Err(t, NewPingpongServer(nil, 1, nil).Reply(ctx, nil), ErrInvalid, "before ReadDests")
		},
	})
	apitest.NilReceivers(t, ".", (*Error)(nil), (*Perftest)(nil), (*PerftestDest)(nil), (*BWReport)(nil),
		(*Dest)(nil), (*PingpongServer)(nil))
}

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}
