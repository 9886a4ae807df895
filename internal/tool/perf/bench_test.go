package perf

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/internal/perfstat"
)

// BenchmarkPerf runs roce perf's tests, server and client in this process
// over loopback UDP (127.0.0.1 and 127.0.0.2), b.N iterations each, and
// reports perftest's figures: MiB/s and Mpps for the bandwidth tests,
// t_typical for the latency tests, and the client's heap allocations per
// message during the traffic (allocs/msg; b.ReportAllocs counts the
// setup as well). Run with
//
//	go test -run XXX -bench Perf -benchtime 20000x ./cmd/roce
//
// The figures measure the software engine on this machine, both ends
// sharing its cores.
func BenchmarkPerf(b *testing.B) {
	for _, c := range []struct {
		name string
		args []string
		lat  bool
	}{
		{"write_bw/64K", []string{"write"}, false},
		{"write_bw/4K", []string{"write", "-s", "4096"}, false},
		{"write_bw/64", []string{"write", "-s", "64"}, false},
		{"read_bw/64K", []string{"read"}, false},
		{"read_bw/4K", []string{"read", "-s", "4096"}, false},
		{"send_bw/64K", []string{"send"}, false},
		{"send_bw/4K", []string{"send", "-s", "4096"}, false},
		{"atomic_bw", []string{"atomic"}, false},
		{"write_bw/64K_4qps", []string{"write", "-q", "4"}, false},
		{"write_lat/2", []string{"write", "--lat"}, true},
		{"send_lat/2", []string{"send", "--lat"}, true},
		{"read_lat/2", []string{"read", "--lat"}, true},
		{"atomic_lat", []string{"atomic", "--lat"}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := max(b.N, perfstat.MinIters)
			args := append(append([]string(nil), c.args...), "-n", strconv.Itoa(n), "--json")
			b.ReportAllocs()
			b.ResetTimer()
			srv, cl := perfBenchPair(b, args)
			b.StopTimer()
			var js jsonReport
			if cl.Code != cli.ExitOK || srv.Code != cli.ExitOK {
				b.Fatalf("exit %d/%d\n%s%s\n%s%s", srv.Code, cl.Code, srv.Stdout, srv.Stderr, cl.Stdout, cl.Stderr)
			}
			if err := json.Unmarshal([]byte(cl.Stdout), &js); err != nil {
				b.Fatal(err)
			}
			if js.AllocsMsg != nil {
				b.ReportMetric(*js.AllocsMsg, "allocs/msg")
			}
			if c.lat {
				b.ReportMetric(js.Results["t_typical_us"].(float64), "t_typical_us")
				b.ReportMetric(js.Results["t_avg_us"].(float64), "t_avg_us")
				return
			}
			size, _ := js.Results["bytes"].(float64)
			b.SetBytes(int64(size))
			b.ReportMetric(js.Results["bw_avg_mib_s"].(float64), "MiB/s")
			b.ReportMetric(js.Results["msg_rate_mpps"].(float64), "Mpps")
		})
	}
}

// perfBenchPair is perfPair for benchmarks: UDP only, with a longer limit.
func perfBenchPair(b *testing.B, args []string) (srv, cl clitest.Result) {
	tcp, udp := clitest.Ports(b)
	common := append([]string{"-p", strconv.Itoa(tcp), "--roce-port", strconv.Itoa(udp), "--timeout", "60s"}, args...)
	return clitest.RunPair(b, Cmd, "", append([]string{"--bind", "127.0.0.1"}, common...),
		append(append([]string{"--bind", "127.0.0.2"}, common...), "127.0.0.1"), nil, 5*time.Minute)
}
