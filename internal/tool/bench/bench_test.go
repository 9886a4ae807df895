package bench

import (
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
)

// fakeRoce is a stand-in for the roce binary: its servers say they listen
// and end, its clients print fixed figures, so the bench's runs, medians,
// ratios and targets can be checked without measuring anything.
const fakeRoce = `#!/bin/sh
case "$*" in
*rawudp*--lat*--ack\ --calls\ --busy-poll*) echo '{"results":{"t_typical_us":3,"t_avg_us":3.5,"p99_us":6},"cpu_us":500,"peer_cpu_us":300}' ;;
*rawudp*--lat*--ack\ --calls*) echo '{"results":{"t_typical_us":4.9,"t_avg_us":5.5,"p99_us":9},"cpu_us":1000,"peer_cpu_us":600}' ;;
*rawudp*--lat*--ack\ --busy-poll*) echo '{"results":{"t_typical_us":2.5,"t_avg_us":3,"p99_us":5},"cpu_us":500,"peer_cpu_us":300}' ;;
*rawudp*--lat*--ack*) echo '{"results":{"t_typical_us":4.2,"t_avg_us":5,"p99_us":8},"cpu_us":1000,"peer_cpu_us":600}' ;;
*rawudp*--lat*--busy-poll*) echo '{"results":{"t_typical_us":2,"t_avg_us":2.5,"p99_us":5},"cpu_us":500,"peer_cpu_us":300}' ;;
*rawudp*--lat*--json*) echo '{"results":{"t_typical_us":3.5,"t_avg_us":4,"p99_us":7},"cpu_us":1000,"peer_cpu_us":600}' ;;
*rawudp*--first\ 4128\ --work*) echo '{"gb_per_sec":1.75,"datagrams":90,"sent_datagrams":100}' ;;
*rawudp*--gso\ 15\ *--first*) echo '{"gb_per_sec":2.5,"datagrams":90,"sent_datagrams":100}' ;;
*rawudp*--json*) echo '{"gb_per_sec":2.0,"datagrams":100,"sent_datagrams":100}' ;;
*rawudp*) echo 'rawudp server on 127.0.0.1:1' ;;
*perf\ read*--lat*) echo '{"results":{"t_typical_us":5,"t_avg_us":6,"p99_us":30},"cpu_user_us":300,"cpu_sys_us":100}' ;;
*perf*--lat*--busy-poll\ 0*) echo '{"results":{"t_typical_us":4,"t_avg_us":4.5,"p99_us":9},"cpu_user_us":300,"cpu_sys_us":100}' ;;
*perf*--lat*) echo '{"results":{"t_typical_us":12.5,"t_avg_us":13,"p99_us":30},"cpu_user_us":300,"cpu_sys_us":100}' ;;
*perf*--json*) echo '{"results":{"bw_avg_mib_s":1907.3486328125},"allocs_per_msg":0.25}' ;;
*perf*) echo 'Waiting for client to connect...' ;;
*rstream*-S\ 64\ *-T\ s*-s\ 127.0.0.1*) echo 'custom    64      1       100     12k         0.00s      0.12       4.00' ;;
*rstream*-S\ 64\ *--busy-poll*-s\ 127.0.0.1*) echo 'custom    64      1       100     12k         0.00s      0.12       6.50' ;;
*rstream*-S\ 64\ *-s\ 127.0.0.1*) echo 'custom    64      1       100     12k         0.00s      0.02      13.00' ;;
*rstream*-T\ s*-s\ 127.0.0.1*) echo 'custom    64k     4k      1       500m        0.10s     40.00      10.00' ;;
*rstream*-s\ 127.0.0.1*) echo 'custom    64k     4k      1       500m        0.10s     12.80      40.00' ;;
*rstream*) echo 'name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer' ;;
*device\ --lib*) echo /nonexistent/libgoroce.so ;;
*device\ --bind*) echo "roce device: $5 on $3, UDP port 47932, socket $7/$5.sock"; exec sleep 30 ;;
rping\ *) ;;
*) echo "fake roce: $*" >&2; exit 2 ;;
esac
`

// fakeTools are stand-ins for perftest's and librdmacm's programs, which
// the device cases run: servers say they listen and end, clients print
// perftest 4.5's tables with fixed figures.
var fakeTools = map[string]string{
	"ib_write_bw": `#!/bin/sh
case "$*" in
*127.0.0.1*-R*|*-R*127.0.0.1*) bw=1716.62 ;;
*127.0.0.1*) bw=1907.35 ;;
*-R*) echo ' * Waiting for client to connect... *'; exit 0 ;;
*) echo ' * Waiting for client to connect... *'; BENCH_FAKE_LISTEN=18631 exec "$BENCH_TEST_BIN" ;;
esac
echo ' #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]'
echo " 65536      12345          0.00               $bw              0.030518"
`,
	"ib_send_lat":  fakeLat("6.00", "6.50", "12.00"),
	"ib_write_lat": fakeLat("20.00", "21.00", "40.00"),
	"rping":        "#!/bin/sh\nexit 0\n",
	"rstream": `#!/bin/sh
case "$*" in
*-S\ 64\ *-s\ 127.0.0.1*) echo 'custom    64      1       100     12k         0.00s      0.02      15.60' ;;
*-s\ 127.0.0.1*) echo 'custom    64k     4k      1       500m        0.10s     12.00      43.69' ;;
*) echo 'name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer' ;;
esac
`,
}

// TestMain is also a fake perftest server (BENCH_FAKE_LISTEN): it
// listens on the port a moment, as a server waiting for its client,
// which the bench sees in /proc/net/tcp.
func TestMain(m *testing.M) {
	if port := os.Getenv("BENCH_FAKE_LISTEN"); port != "" {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			os.Exit(1)
		}
		time.Sleep(300 * time.Millisecond)
		l.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func fakeLat(typ, avg, p99 string) string {
	return `#!/bin/sh
case "$*" in
*127.0.0.1*) ;;
*) echo ' * Waiting for client to connect... *'; BENCH_FAKE_LISTEN=18631 exec "$BENCH_TEST_BIN" ;;
esac
echo ' #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] '
echo ' 2       100          5.00           50.00        ` + typ + `               ` + avg + `           1.00            ` + p99 + `                   40.00'
`
}

func TestBench(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake roce is a shell script")
	}
	dir := t.TempDir()
	roce := filepath.Join(dir, "roce")
	if err := os.WriteFile(roce, []byte(fakeRoce), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, script := range fakeTools {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("BENCH_TEST_BIN", os.Args[0])
	js := filepath.Join(dir, "bench.json")
	out, errs := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, out, errs, "-roce", roce, "-D", "1", "-runs", "2", "-n", "100", "-json", js); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errs.String())
	}
	for _, want := range []string{
		"raw UDP, a WRITE's framing (1 + GSO 15)          2.500 GB/s                          (baseline)",
		"(90 of 100 datagrams arrived; runs 2.500 2.500)",
		"raw UDP, the same, with ICRC and placement       1.750 GB/s   0.70 of raw UDP        \n",
		// 1907.35 MiB/s is 2.0 GB/s: 0.80 of the framing's 2.5, its target.
		"WRITE 64 KiB, MTU 4096, 1 QP                     2.000 GB/s   0.80 of raw UDP        >= 2.0 GB/s and >= 0.85 of raw UDP  NOT MET",
		"READ 64 KiB, MTU 4096, 1 QP                      2.000 GB/s   1.00 of WRITE          >= 0.80 of WRITE  met",
		"WRITE 64 KiB, MTU 4096, 1024 QPs                 2.000 GB/s   1.00 of 1 QP           >= 0.90 of 1 QP  met",
		"(0.250 allocs/msg; runs 2.000 2.000)",
		"WRITE 64 KiB, 64 QPs, 2 paths                    2.000 GB/s   1.00 of 1 path         \n",
		// CPU per message: both processes' time over two messages per
		// round trip of the 100: (1000+600)/200, (300+100)*2/200.
		"raw UDP 36 B ping-pong, blocking               3.50 us   7.00 us   8.00 us                              p99 <= 3x typical  met",
		"raw UDP 36 B + 20 B ACK, blocking              4.20 us   8.00 us   8.00 us   1.20 of UDP blocking       p99 <= 3x typical  met",
		"raw UDP 36 B + 20 B ACK, busy poll             2.50 us   5.00 us   4.00 us   1.25 of UDP busy poll      p99 <= 3x typical  met",
		"raw UDP + ACK, goroce's syscalls, blocking     4.90 us   9.00 us   8.00 us   1.40 of UDP blocking       p99 <= 3x typical  met",
		"raw UDP + ACK, goroce's syscalls, busy poll    3.00 us   6.00 us   4.00 us   1.50 of UDP busy poll      p99 <= 3x typical  met",
		"WRITE 2 B latency, no busy poll                4.00 us   9.00 us   4.00 us   1.14 of UDP blocking       <= 1.5 of UDP blocking, p99 <= 3x typical  met",
		// A READ's message is its round trip: 800 us over 100.
		"READ 2 B latency, no busy poll                 5.00 us  30.00 us   8.00 us   1.25 of WRITE              <= 1.5 of WRITE, p99 <= 3x typical  NOT MET",
		"WRITE 2 B latency, busy poll                  12.50 us  30.00 us   4.00 us   6.25 of UDP busy poll      <= 1.3 of UDP busy poll, p99 <= 3x typical  NOT MET",
		"(t_avg 4.00 us; runs 3.500 3.500)",
		// 12.8 Gb/s is 1.6 GB/s, 0.80 of WRITE's 2.0; TCP's 40 Gb/s 5.0.
		"rsocket stream 64 KiB writes (rstream)           1.600 GB/s   0.80 of WRITE          >= 0.80 of WRITE  met",
		"(40.00 us per transfer; runs 1.600 1.600)",
		"kernel TCP stream 64 KiB writes (-T s)           5.000 GB/s   3.12 of rsocket        \n",
		// perf's t_avg 13 us against rstream's 13: 1.00; busy poll 6.5
		// against 13: 0.50.
		"\nrsocket latency case                           average        ratio                  target\n",
		"SEND 64 B latency (perf send --lat), avg         13.00 us",
		"rsocket 64 B request/response (rstream)          13.00 us     1.00x perf send        <= 1.3x perf send  met",
		"rsocket 64 B req/resp, busy poll, spin            6.50 us     0.50x perf send        \n",
		"kernel TCP 64 B request/response (-T s)           4.00 us     0.31x rsocket          \n",
		// The devices' cases: 1907.35 MiB/s is roce perf's 2.0 GB/s;
		// -R's 1716.62 MiB/s is 0.90 of it.
		"ib_write_bw 64 KiB on the device                 2.000 GB/s   1.00 of roce perf      >= 0.90 of roce perf  met",
		"ib_write_bw -R 64 KiB on the device              1.800 GB/s   0.90 of without -R     >= 0.90 of without -R  met",
		// ib_send_lat's 6 us against roce perf send --lat's 12.5.
		"ib_send_lat 2 B on the device                  6.00 us  12.00 us",
		"0.48 of roce perf          <= 1.5 of roce perf, p99 <= 3x typical  met",
		"ib_write_lat 2 B on the device                20.00 us  40.00 us",
		"1.60 of roce perf          p99 <= 3x typical  met",
		"rping on the device, per ping",
		// 12 Gb/s is 1.5 GB/s, 0.94 of roce rstream's 1.6; 15.6 us
		// against roce rstream's 13: 1.20.
		"rstream 64 KiB writes on the device              1.500 GB/s   0.94 of roce rstream   >= 0.90 of roce rstream  met",
		"rstream 64 B req/resp on the device              15.60 us     1.20x roce rstream     <= 1.3x roce rstream  met",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var results []result
	if err := json.Unmarshal(data, &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != 42 || results[31].Name != "ib_write_bw -R 64 KiB on the device" || math.Abs(results[31].Ratio-0.9) > 0.001 ||
		results[35].Name != "ib_send_lat 2 B on the device" || results[35].Value != 6 || results[35].P99 != 12 || results[4].Name != "WRITE 64 KiB, MTU 4096, 1 QP" || results[4].Met == nil || *results[4].Met ||
		results[1].Ratio != 0.7 || results[1].Met != nil ||
		results[9].Name != "WRITE 64 KiB, 64 QPs, 2 paths" || results[9].Ratio != 1 || results[9].Met != nil ||
		results[15].Name != "raw UDP 36 B + 20 B ACK, busy poll" || results[15].Ratio != 1.25 || results[15].Target != "p99 <= 3x typical" ||
		results[18].Name != "WRITE 2 B latency, no busy poll" || results[18].Unit != "us" || results[18].Value != 4 ||
		results[18].P99 != 9 || results[18].CPUPerMsg != 4 || results[18].Ratio != 4.0/3.5 ||
		results[10].Name != "rsocket stream 64 KiB writes (rstream)" || results[25].Name != "rsocket 64 B request/response (rstream)" ||
		results[25].Value != 13 || results[25].Ratio != 1 {
		t.Errorf("bench.json: %s", data)
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{{"-D", "0"}, {"-D", "61"}, {"-runs", "10"}, {"-n", "99"}, {"extra"}, {"-nope"}} {
		out, errs := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, out, errs, args...); code != cli.ExitUsage || !strings.Contains(errs.String(), "roce help bench") {
			t.Errorf("%v: exit %d, %q", args, code, errs.String())
		}
	}
}
