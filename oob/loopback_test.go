package oob

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// runPair runs client and server on the two ends of a loopback TCP
// connection, each with its own deadline, and returns their errors.
func runPair(t *testing.T, client, server func(ctx context.Context, conn net.Conn) error) (cerr, serr error) {
	t.Helper()
	c, s := connPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer s.Close()
		done <- server(ctx, s)
	}()
	cerr = client(ctx, c)
	c.Close()
	select {
	case serr = <-done:
	case <-time.After(testTimeout):
		t.Fatal("server did not finish")
	}
	return cerr, serr
}

func randomDest(r *rand.Rand, ip string) Dest {
	return Dest{
		LID: uint16(r.Uint32()), QPN: r.Uint32() & maxQPN, PSN: r.Uint32() & maxQPN,
		GID: verbs.GIDFromAddr(netip.MustParseAddr(ip)),
	}
}

func TestPingpongLoopback(t *testing.T) {
	for _, tc := range []struct {
		name          string
		entries, used int
	}{
		{"rc", 1, 1},
		{"srq-2", SRQEntries, 2},
		{"srq-255", SRQEntries, 255},
		{"srq-full", SRQEntries, SRQEntries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := rand.Uint64()
			r := rand.New(rand.NewPCG(seed, 1))
			var cl, sv []Dest
			for range tc.used {
				cl = append(cl, randomDest(r, "198.18.0.12"))
				sv = append(sv, randomDest(r, "2001:db8::11"))
			}
			pad := func(d []Dest) []Dest { return append(slices.Clone(d), make([]Dest, tc.entries-len(d))...) }
			var gotByServer []Dest
			cerr, serr := runPair(t, func(ctx context.Context, conn net.Conn) error {
				got, err := PingpongClient(ctx, conn, cl, tc.entries, nil)
				if err == nil && !slices.Equal(got, pad(sv)) {
					t.Errorf("seed %d: client got %v, want %v", seed, got[:tc.used], sv)
				}
				return err
			}, func(ctx context.Context, conn net.Conn) error {
				s := NewPingpongServer(conn, tc.entries, nil)
				got, err := s.ReadDests(ctx)
				if err != nil {
					return err
				}
				gotByServer = got
				return s.Reply(ctx, sv)
			})
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			if !slices.Equal(gotByServer, pad(cl)) {
				t.Errorf("seed %d: server got %v, want %v", seed, gotByServer[:tc.used], cl)
			}
		})
	}
}

func TestPerftestLoopback(t *testing.T) {
	for name, plan := range perftestPlans {
		for _, qps := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/%dqp", name, qps), func(t *testing.T) {
				seed := rand.Uint64()
				r := rand.New(rand.NewPCG(seed, 2))
				mk := func(ip string) decoded {
					d := decoded{
						sys: SysData{CycleBuffer: int32(r.IntN(1 << 20)), CacheLineSize: int32(r.IntN(256))},
						mtu: bth.MTU(1 + r.IntN(5)),
						report: BWReport{Size: r.Uint64(), Iters: r.Uint64(), BWPeak: r.Float64(),
							BWAvg: r.Float64(), MsgRateAvg: r.Float64()},
					}
					for range qps {
						d.dests = append(d.dests, PerftestDest{
							LID: uint16(r.Uint32()), OutReads: uint16(r.Uint32()), QPN: r.Uint32() & maxQPN,
							PSN: r.Uint32() & maxQPN, RKey: r.Uint32(), VAddr: r.Uint64(),
							GID: verbs.GIDFromAddr(netip.MustParseAddr(ip)), SRQN: r.Uint32(),
						})
					}
					return d
				}
				cin, sin := mk("198.18.0.12"), mk("198.18.0.11")
				// The plans exchange one QP; run every QP where they exchange dests.
				run := func(ctx context.Context, conn net.Conn, role Role, in decoded) (planResult, error) {
					p := NewPerftest(conn, role, nil)
					var out planResult
					var err error
					for _, o := range plan {
						if o != opDests {
							var part planResult
							part, err = runPlan(ctx, p, []op{o}, in)
							out.dests = append(out.dests, part.dests...)
							switch o {
							case opVersions:
								out.compat = part.compat
							case opSys:
								out.sys = part.sys
							case opMTU:
								out.mtu = part.mtu
							case opReports:
								out.report, out.reported = part.report, true
							}
						} else {
							var rd []PerftestDest
							rd, err = p.ExchangeDests(ctx, in.dests)
							out.dests = append(out.dests, rd...)
						}
						if err != nil {
							return out, err
						}
					}
					return out, nil
				}
				var cout, sout planResult
				cerr, serr := runPair(t, func(ctx context.Context, conn net.Conn) (err error) {
					cout, err = run(ctx, conn, Client, cin)
					return err
				}, func(ctx context.Context, conn net.Conn) (err error) {
					sout, err = run(ctx, conn, Server, sin)
					return err
				})
				if cerr != nil || serr != nil {
					t.Fatalf("seed %d: client: %v; server: %v", seed, cerr, serr)
				}
				wantSys := SysData{max(cin.sys.CycleBuffer, sin.sys.CycleBuffer), max(cin.sys.CacheLineSize, sin.sys.CacheLineSize)}
				wantMTU := min(cin.mtu, sin.mtu)
				for _, o := range []struct {
					role     Role
					got      planResult
					peer     decoded
					peerDest []PerftestDest
				}{{Client, cout, sin, sin.dests}, {Server, sout, cin, cin.dests}} {
					if o.got.compat.Version != PerftestVersion || o.got.sys != wantSys || o.got.mtu != wantMTU {
						t.Errorf("seed %d %v: version %q sys %+v MTU %v, want %q %+v %v", seed, o.role,
							o.got.compat.Version, o.got.sys, o.got.mtu, PerftestVersion, wantSys, wantMTU)
					}
					// Per-QP exchanges return every QP; handshakes and barriers
					// (not returned) use the first.
					var want []PerftestDest
					for _, op := range plan {
						switch op {
						case opDests:
							want = append(want, o.peerDest...)
						case opHandShake:
							want = append(want, o.peerDest[0])
						}
					}
					if !slices.Equal(o.got.dests, want) {
						t.Errorf("seed %d %v: remote entries %+v, want %+v", seed, o.role, o.got.dests, want)
					}
					if o.got.reported && !sameReport(o.got.report, o.peer.report) {
						t.Errorf("seed %d %v: report %+v, want %+v", seed, o.role, o.got.report, o.peer.report)
					}
					if slices.Contains(plan, opReports) != o.got.reported {
						t.Errorf("%v: reported %v", o.role, o.got.reported)
					}
				}
			})
		}
	}
}

func TestCompatFor(t *testing.T) {
	for _, tc := range []struct {
		version string
		number  float64
		sys     bool
		mtuLen  int
		iters64 bool
	}{
		{"", 0, false, 0, false},
		{"abc", 0, false, 0, false},
		{"5.0", 5.0, false, 0, false},
		// perftest holds the version in a float for the MTU and report
		// checks: float32(5.1) < 5.1, float32(5.31) < 5.31 and
		// float32(5.33) < 5.33, so exactly those versions fall short.
		{"5.1", 5.1, false, 0, false},
		{"5.11", 5.11, false, MTULenOld, false},
		{"5.2", 5.2, false, MTULenOld, false},
		{"5.31", 5.31, false, MTULenOld, false},
		{"5.311", 5.311, false, MTULen, false},
		{"5.32", 5.32, true, MTULen, false},
		{"5.33", 5.33, true, MTULen, false},
		{"5.34", 5.34, true, MTULen, true},
		{"5.70", 5.70, true, MTULen, true},
		{"6.06", 6.06, true, MTULen, true},
		{"6.29", 6.29, true, MTULen, true},
		{" 6.06-beta", 6.06, true, MTULen, true},
		{"+7e0x", 7, true, MTULen, true},
		{"1e400", 0, false, 0, false}, // overflow: +Inf
	} {
		t.Run(tc.version, func(t *testing.T) {
			c := CompatFor(tc.version)
			if tc.version == "1e400" {
				if c.Number <= 1e308 || !c.SysData || !c.Iters64 || c.MTULen != MTULen {
					t.Errorf("%+v, want +Inf and every feature", c)
				}
				return
			}
			if c.Version != tc.version || c.Number != tc.number || c.SysData != tc.sys || c.MTULen != tc.mtuLen || c.Iters64 != tc.iters64 {
				t.Errorf("CompatFor(%q) = %+v, want number %v sys %v mtuLen %d iters64 %v",
					tc.version, c, tc.number, tc.sys, tc.mtuLen, tc.iters64)
			}
		})
	}
}

// TestPerftestOldPeers runs both sides announcing an old version (as two
// old perftests would talk) and checks what goes on the wire.
func TestPerftestOldPeers(t *testing.T) {
	for _, tc := range []struct {
		version string
		writes  []int // the client's writes: version, sys data, bth.MTU, handshake, report fields, done
	}{
		{"5.0", []int{16, 108, 8, 4, 8, 8, 8, 108, 5}},
		{"5.2", []int{16, 4, 108, 8, 4, 8, 8, 8, 108, 5}},
		{"5.32", []int{16, 4, 4, 2, 108, 8, 4, 8, 8, 8, 108, 5}},
		{"5.34", []int{16, 4, 4, 2, 108, 8, 8, 8, 8, 8, 108, 5}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			cfg := &Config{PerftestVersion: tc.version, MinPeerVersion: -1, ReportPerPort: false}
			rep := BWReport{Size: 65536, Iters: 1<<32 + 7, BWPeak: 1.5, BWAvg: 1.25, MsgRateAvg: 0.02}
			var rec *recordConn
			var sgot BWReport
			var smtu bth.MTU
			side := func(role Role, mtu bth.MTU) func(ctx context.Context, conn net.Conn) error {
				return func(ctx context.Context, conn net.Conn) error {
					if role == Client {
						rec = &recordConn{Conn: conn}
						conn = rec
					}
					p := NewPerftest(conn, role, cfg)
					if _, err := p.ExchangeVersions(ctx); err != nil {
						return err
					}
					if _, err := p.CheckSysData(ctx, DefaultSysData); err != nil {
						return err
					}
					m, err := p.CheckMTU(ctx, mtu)
					if err != nil {
						return err
					}
					if _, err := p.ExchangeDests(ctx, []PerftestDest{{QPN: 1}}); err != nil {
						return err
					}
					r, err := p.ExchangeBWReports(ctx, rep)
					if err != nil {
						return err
					}
					if role == Server {
						sgot, smtu = r, m
					}
					return p.CloseConnection(ctx)
				}
			}
			cerr, serr := runPair(t, side(Client, bth.MTU2048), side(Server, bth.MTU4096))
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", cerr, serr)
			}
			if !slices.Equal(rec.writes, tc.writes) {
				t.Errorf("client writes %v, want %v", rec.writes, tc.writes)
			}
			want := rep
			if !CompatFor(tc.version).Iters64 {
				want.Iters = 7 // 4 bytes on the wire
			}
			if sgot != want {
				t.Errorf("server got report %+v, want %+v", sgot, want)
			}
			wantMTU := bth.MTU2048
			if CompatFor(tc.version).MTULen == 0 {
				wantMTU = bth.MTU4096 // nothing exchanged: the server keeps its own
			}
			if smtu != wantMTU {
				t.Errorf("server MTU %v, want %v", smtu, wantMTU)
			}
		})
	}
}

func TestPerftestReportPerPort(t *testing.T) {
	cfg := &Config{ReportPerPort: true}
	rep := BWReport{Size: 1, Iters: 2, BWPeak: 3, BWAvg: 4, MsgRateAvg: 5, BWAvgP1: 6, MsgRateAvgP1: 7, BWAvgP2: 8, MsgRateAvgP2: 9}
	var got [2]BWReport
	var rec *recordConn
	side := func(role Role) func(ctx context.Context, conn net.Conn) error {
		return func(ctx context.Context, conn net.Conn) error {
			if role == Client {
				rec = &recordConn{Conn: conn}
				conn = rec
			}
			p := NewPerftest(conn, role, cfg)
			if _, err := p.ExchangeVersions(ctx); err != nil {
				return err
			}
			r, err := p.ExchangeBWReports(ctx, rep)
			got[role-1] = r
			return err
		}
	}
	if cerr, serr := runPair(t, side(Client), side(Server)); cerr != nil || serr != nil {
		t.Fatalf("client: %v; server: %v", cerr, serr)
	}
	if got[0] != rep || got[1] != rep {
		t.Errorf("reports %+v, want %+v", got, rep)
	}
	if want := []int{16, 8, 8, 8, 8, 8, 8, 8, 8, 8}; !slices.Equal(rec.writes, want) {
		t.Errorf("writes %v, want %v", rec.writes, want)
	}
}
