package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/internal/tool/decode"
)

var demoSummary = regexp.MustCompile(`(?m)^verified (\d+) bytes in (\d+) operations; (\d+) packets retransmitted; (\d+) NAKs seen\n`)

// runDemoT runs roce demo with args and returns the numbers of its last
// line: bytes verified, operations, retransmissions, NAKs.
func runDemoT(t *testing.T, args ...string) (out string, nums [4]int) {
	t.Helper()
	stdout, stderr := clitest.NewBuffer(""), clitest.NewBuffer("")
	if code := clitest.Run(Cmd, nil, stdout, stderr, args...); code != cli.ExitOK {
		t.Fatalf("roce demo %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	m := demoSummary.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no summary line:\n%s", stdout.String())
	}
	for i := range nums {
		nums[i], _ = strconv.Atoi(m[i+1])
	}
	return stdout.String() + stderr.String(), nums
}

func TestDemo(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		bytes int
		lossy bool
	}{
		{"udp", []string{"--count", "8", "--size", "10000"}, 5*8*10000 + 2*8*8, false},
		{"mem", []string{"--transport", "mem", "--count", "8", "--size", "10000"}, 5*8*10000 + 2*8*8, false},
		{"mem with faults", []string{"--transport", "mem", "--count", "16", "--size", "20000", "--mtu", "1024",
			"--loss", "0.05", "--dup", "0.02", "--reorder", "0.02", "--seed", "7"}, 5*16*20000 + 2*16*8, true},
		{"udp with loss", []string{"--count", "16", "--size", "20000", "--loss", "0.05", "--seed", "3"}, 5*16*20000 + 2*16*8, true},
		{"writes only", []string{"--ops", "write,read", "--count", "4", "--size", "1"}, 8, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, n := runDemoT(t, c.args...)
			if n[0] != c.bytes {
				t.Errorf("verified %d bytes, want %d", n[0], c.bytes)
			}
			if c.lossy && n[2] == 0 {
				t.Error("faults but no retransmissions")
			}
			// A clean link may still retransmit (loopback UDP drops when a
			// receiver falls behind; timers fire on a loaded machine), but
			// it never reorders, so a NAK would be a bug.
			if !c.lossy && n[3] != 0 && c.name == "mem" {
				t.Errorf("%d NAKs on a clean in-memory link", n[3])
			}
		})
	}
}

func TestDemoTrace(t *testing.T) {
	out, _ := runDemoT(t, "--transport", "mem", "--ops", "write", "--count", "1", "--size", "18", "-v")
	for _, want := range []string{"server] SLOW  create RC QP", "client] DATA  post RDMA_WRITE len=18",
		"INFO  SGE(RDMA_WRITE): addr=0x", "INFO  WR: wr_id=0 opcode=RDMA_WRITE signaled=1 num_sge=1 remote_addr=0x",
		"INFO  WC: wr_id=0 status=SUCCESS opcode=RDMA_WRITE byte_len=18", "INFO  QP dump: qpn=17 state=RTS mtu=4096"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoUsage(t *testing.T) {
	for _, args := range [][]string{{"--ops", "nope"}, {"--mtu", "3000"}, {"--loss", "2"}, {"--transport", "x"},
		{"--count", "0"}, {"extra"}, {"--no-such-flag"}} {
		stdout, stderr := clitest.NewBuffer(""), clitest.NewBuffer("")
		if code := clitest.Run(Cmd, nil, stdout, stderr, args...); code != cli.ExitUsage {
			t.Errorf("demo %v: exit %d, want %d", args, code, cli.ExitUsage)
		}
		if !strings.Contains(stderr.String(), "roce help demo") {
			t.Errorf("demo %v: no hint in %q", args, stderr.String())
		}
	}
}

// TestDemoCapture runs the demo with --pcap, through faults, over UDP (on
// the free port the demo picks) and over the in-memory link, and decodes
// both captures it says it wrote: every packet is found though it is not
// on port 4791, is on the port the run used, and has an ICRC that
// verifies; the HTML diagram tells no story of a bad ICRC.
func TestDemoCapture(t *testing.T) {
	portRE := regexp.MustCompile(`over (udp|mem) \(port (\d+)\)`)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"udp", nil},
		{"mem", []string{"--transport", "mem"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			server, client := filepath.Join(dir, "d.pcap"), filepath.Join(dir, "d.client.pcap")
			args := append([]string{"--pcap", server, "--count", "16", "--size", "9000", "--mtu", "1024",
				"--loss", "0.05", "--dup", "0.05", "--reorder", "0.05", "--seed", "5"}, c.args...)
			out, n := runDemoT(t, args...)
			if n[2] == 0 {
				t.Error("faults but no retransmissions: the capture shows no fault handled")
			}
			if !strings.Contains(out, server) || !strings.Contains(out, client) {
				t.Errorf("the output does not name both captures (%s, %s):\n%s", server, client, out)
			}
			m := portRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no port in the demo's first line:\n%s", out)
			}
			port, _ := strconv.Atoi(m[2])
			for _, file := range []string{server, client} {
				stdout, stderr := decodeT(t, "--json", file)
				lines := strings.Split(strings.TrimSpace(stdout), "\n")
				if len(lines) < 16*7 {
					t.Fatalf("%s: %d RoCE packets decoded, want at least %d (stderr %q)", file, len(lines), 16*7, stderr)
				}
				for _, l := range lines {
					var p struct {
						Dport  uint16 `json:"dport"`
						ICRCOK *bool  `json:"icrc_ok"`
					}
					if err := json.Unmarshal([]byte(l), &p); err != nil {
						t.Fatalf("%s: %v: %s", file, err, l)
					}
					if p.ICRCOK == nil || !*p.ICRCOK {
						t.Errorf("%s: a packet whose ICRC does not verify: %s", file, l)
					}
					if int(p.Dport) != port {
						t.Errorf("%s: a packet to UDP port %d, the run used %d: %s", file, p.Dport, port, l)
					}
				}
				if stderr != "" {
					t.Errorf("%s: decode said %q", file, stderr)
				}
				html, _ := decodeT(t, "--diagram=html", file)
				// The legend names bad ICRCs; the ladder must draw none: no
				// note "bad ICRC: HOST drops frame N", no arrow of that kind.
				if strings.Contains(html, "bad ICRC:") || strings.Contains(html, `<g class="pkt bad`) {
					t.Errorf("%s: the HTML diagram draws a bad ICRC", file)
				}
				if arrows := strings.Count(html, `<g class="pkt`); arrows != len(lines) {
					t.Errorf("%s: the HTML diagram has %d arrows for %d packets", file, arrows, len(lines))
				}
			}
		})
	}
}

// decodeT runs roce decode with args, which must succeed.
func decodeT(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := cli.Run(context.Background(), decode.Cmd, &cli.Env{Stdout: &out, Stderr: &errb}, args); code != cli.ExitOK {
		t.Fatalf("roce decode %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), errb.String()
}
