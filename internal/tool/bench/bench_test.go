package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
)

// fakeRoce is a stand-in for the roce binary: its servers say they listen
// and end, its clients print fixed figures, so the bench's runs, medians,
// ratios and targets can be checked without measuring anything.
const fakeRoce = `#!/bin/sh
case "$*" in
*rawudp*--lat*--json*) echo '{"results":{"t_typical_us":3.5,"t_avg_us":4}}' ;;
*rawudp*--gso\ 15\ *--first*) echo '{"gb_per_sec":2.5,"datagrams":90,"sent_datagrams":100}' ;;
*rawudp*--json*) echo '{"gb_per_sec":2.0,"datagrams":100,"sent_datagrams":100}' ;;
*rawudp*) echo 'rawudp server on 127.0.0.1:1' ;;
*perf*--lat*--json*) echo '{"results":{"t_typical_us":12.5,"t_avg_us":13}}' ;;
*perf*--json*) echo '{"results":{"bw_avg_mib_s":1907.3486328125},"allocs_per_msg":0.25}' ;;
*perf*) echo 'Waiting for client to connect...' ;;
*) echo "fake roce: $*" >&2; exit 2 ;;
esac
`

func TestBench(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake roce is a shell script")
	}
	dir := t.TempDir()
	roce := filepath.Join(dir, "roce")
	if err := os.WriteFile(roce, []byte(fakeRoce), 0o755); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(dir, "bench.json")
	out, errs := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, out, errs, "-roce", roce, "-D", "1", "-runs", "2", "-n", "100", "-json", js); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errs.String())
	}
	for _, want := range []string{
		"raw UDP, a WRITE's framing (1 + GSO 15)          2.500 GB/s                          (baseline)",
		"(90 of 100 datagrams arrived; runs 2.500 2.500)",
		// 1907.35 MiB/s is 2.0 GB/s: 0.80 of the framing's 2.5, its target.
		"WRITE 64 KiB, MTU 4096, 1 QP                     2.000 GB/s   0.80 of raw UDP        >= 2.0 GB/s and >= 0.80 of raw UDP  met",
		"READ 64 KiB, MTU 4096, 1 QP                      2.000 GB/s   1.00 of WRITE          >= 0.80 of WRITE  met",
		"(0.250 allocs/msg; runs 2.000 2.000)",
		"WRITE 2 B latency, busy poll                     12.50 us     t_avg 13.00 us         <= 10 us half round trip  NOT MET",
		"raw UDP 36 B ping-pong, blocking                  3.50 us     t_avg 4.00 us",
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
	if len(results) != 13 || results[3].Name != "WRITE 64 KiB, MTU 4096, 1 QP" || results[3].Met == nil || !*results[3].Met ||
		results[7].Unit != "us" || results[7].Value != 12.5 {
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
