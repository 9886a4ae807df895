package libgoroce_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

// TestDevices runs rdma-core's ibv_devices and ibv_devinfo -v, unmodified,
// on two devices: both are listed, with their GUIDs, one ACTIVE port
// each, its MTU and its GID table.
func TestDevices(t *testing.T) {
	devicetest.Need(t, "ibv_devices", "ibv_devinfo")
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := h.Run(ctx, "ibv_devices")
	if r.Err != nil || !regexp.MustCompile(`goroce0\s+0267[0-9a-f]{12}`).MatchString(r.Out) ||
		!strings.Contains(r.Out, "goroce1") {
		t.Fatalf("ibv_devices: %s", r)
	}
	r = h.Run(ctx, "ibv_devinfo", "-v", "-d", "goroce1")
	for _, want := range []string{"hca_id:\tgoroce1", "PORT_ACTIVE (4)", "link_layer:\t\tEthernet",
		"GID[  0]:\t\t::ffff:127.0.0.2, RoCE v2", "GID[  1]:\t\t::ffff:127.0.0.2, RoCE v2", "vendor_id:\t\t\t0x676f72",
		"active_mtu:\t\t4096 (5)"} {
		if !strings.Contains(r.Out, want) {
			t.Errorf("ibv_devinfo -v lacks %q", want)
		}
	}
	if r.Err != nil || t.Failed() {
		t.Fatalf("ibv_devinfo -v: %s", r)
	}
}

// TestIPv6 runs a device with an IPv4 and an IPv6 address: ibv_devinfo
// lists both GIDs, RoCE v2, at rxe's indices (1 IPv4, 2 IPv6), and
// ibv_rc_pingpong and ib_send_bw run over the IPv6 one (-g 2, -x 2).
func TestIPv6(t *testing.T) {
	devicetest.Need(t, "ibv_devinfo", "ibv_rc_pingpong", "ib_send_bw")
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1,::1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := h.Run(ctx, "ibv_devinfo", "-v")
	if r.Err != nil || !strings.Contains(r.Out, "GID[  1]:\t\t::ffff:127.0.0.1, RoCE v2") ||
		!strings.Contains(r.Out, "GID[  2]:\t\t::1, RoCE v2") {
		t.Fatalf("ibv_devinfo -v: %s", r)
	}
	port := devicetest.FreeTCPPort(t)
	p := strconv.Itoa(port)
	s, c := h.Pair(ctx, port, []string{"ibv_rc_pingpong", "-g", "2", "-n", "100", "-p", p},
		[]string{"ibv_rc_pingpong", "-g", "2", "-n", "100", "-p", p, "127.0.0.1"})
	if s.Err != nil || c.Err != nil || !strings.Contains(c.Out, "GID ::1") {
		t.Fatalf("ibv_rc_pingpong -g 2:\nserver %s\nclient %s", s, c)
	}
	port = devicetest.FreeTCPPort(t)
	p = strconv.Itoa(port)
	s, c = h.Pair(ctx, port, []string{"ib_send_bw", "-x", "2", "-n", "200", "-p", p},
		[]string{"ib_send_bw", "-x", "2", "-n", "200", "-p", p, "127.0.0.1"})
	if s.Err != nil || c.Err != nil || !strings.Contains(c.Out, "00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01") {
		t.Fatalf("ib_send_bw -x 2:\nserver %s\nclient %s", s, c)
	}
}

// TestPingpong runs rdma-core's pingpong tools, unmodified, both ends on
// one device and across two, with and without completion events.
func TestPingpong(t *testing.T) {
	tools := []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"}
	devicetest.Need(t, tools...)
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	iters := regexp.MustCompile(`(\d+) iters in`)
	for _, tool := range tools {
		for _, events := range []bool{false, true} {
			for _, devs := range [][2]string{{"goroce0", "goroce0"}, {"goroce0", "goroce1"}} {
				name := tool + "/" + devs[0] + "-" + devs[1]
				if events {
					name += "/e"
				}
				t.Run(name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					port := strconv.Itoa(devicetest.FreeTCPPort(t))
					args := []string{"-g", "0", "-n", "500", "-p", port}
					if events {
						args = append(args, "-e")
					}
					srv := append([]string{tool, "-d", devs[0]}, args...)
					cli := append(append([]string{tool, "-d", devs[1]}, args...), "127.0.0.1")
					s, c := h.Pair(ctx, devicetest.Atoi(port), srv, cli)
					for _, r := range []*devicetest.Result{s, c} {
						if m := iters.FindStringSubmatch(r.Out); r.Err != nil || m == nil || m[1] != "500" {
							t.Fatalf("want exit 0 and \"500 iters\" from both:\nserver %s\nclient %s", s, c)
						}
					}
				})
			}
		}
	}
}

// TestPerftest runs perftest's bandwidth and latency tools, unmodified,
// both ends on the device, by iterations and by duration (-D, which runs
// on SIGALRM), and checks each prints its result line.
func TestPerftest(t *testing.T) {
	tools := []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"}
	devicetest.Need(t, tools...)
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	result := regexp.MustCompile(`(?m)^\s*#bytes.*\n\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)`)
	type run struct {
		tool string
		args []string
	}
	var runs []run
	for _, tool := range tools {
		size := "65536"
		if strings.HasSuffix(tool, "_lat") {
			size = "2"
		}
		args := []string{"-s", size}
		if tool == "ib_atomic_bw" {
			args = nil
		}
		runs = append(runs, run{tool, append(args, "-n", "1000")}, run{tool, append(args, "-D", "1")})
	}
	runs = append(runs, run{"ib_atomic_bw", []string{"-A", "CMP_AND_SWAP", "-n", "1000"}},
		run{"ib_atomic_bw", []string{"-A", "FETCH_AND_ADD", "-n", "1000"}},
		// UD has no RNR: a SEND that comes before the device has taken
		// the server's receives from their ring is lost, and perftest
		// waits for it forever (the engine pulls them from the ring).
		run{"ib_send_bw", []string{"-c", "UD", "-s", "1024", "-n", "200"}},
		run{"ib_send_lat", []string{"-c", "UD", "-s", "1024", "-n", "200"}})
	for _, r := range runs {
		t.Run(r.tool+"/"+strings.Join(r.args, ""), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			port := devicetest.FreeTCPPort(t)
			args := append([]string{"-x", "0", "-p", strconv.Itoa(port)}, r.args...)
			srv := append([]string{r.tool, "-d", "goroce0"}, args...)
			cli := append(append([]string{r.tool, "-d", "goroce1"}, args...), "127.0.0.1")
			s, c := h.Pair(ctx, port, srv, cli)
			m := result.FindStringSubmatch(c.Out)
			if s.Err != nil || c.Err != nil || m == nil {
				t.Fatalf("want exit 0 and a result line:\nserver %s\nclient %s", s, c)
			}
			if v, _ := strconv.ParseFloat(m[4], 64); v <= 0 {
				t.Fatalf("a result of %s: %s", m[4], c)
			}
		})
	}
}

// TestFlushAtomicWrite runs testdata/flush.c: ATOMIC_WRITE and FLUSH
// through the extended QP's builders on the device, the capability bits,
// the flush access rights.
func TestFlushAtomicWrite(t *testing.T) {
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	exe := devicetest.CC(t, "flush", []string{"testdata/flush.c"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r := h.Run(ctx, exe); r.Err != nil || !strings.Contains(r.Out, "ATOMIC_WRITE and FLUSH ok") {
		t.Fatalf("%s", r)
	}
}

// TestOneProc runs two devices as `roce device --procs 1` (GOMAXPROCS=1),
// where the workers receive from the link while they spin, since the
// link's own receive goroutine waits for their P: rdma-core's RC and UD
// pingpongs and ib_send_lat run across them, each to its end.
func TestOneProc(t *testing.T) {
	devicetest.Need(t, "ibv_rc_pingpong", "ibv_ud_pingpong", "ib_send_lat")
	h := devicetest.NewHost(t)
	h.StartProcess(roce(t), "goroce0", "127.0.0.1", "--procs", "1")
	h.StartProcess(roce(t), "goroce1", "127.0.0.2", "--procs", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []struct {
		args []string
		want string // in the client's output
	}{
		{[]string{"ibv_rc_pingpong", "-g", "0", "-n", "2000"}, "2000 iters in"},
		{[]string{"ibv_ud_pingpong", "-g", "0", "-n", "2000"}, "2000 iters in"},
		{[]string{"ib_send_lat", "-s", "2", "-n", "2000"}, "t_typical"},
	} {
		port := devicetest.FreeTCPPort(t)
		p := strconv.Itoa(port)
		s, r := h.Pair(ctx, port, slices.Concat(c.args, []string{"-d", "goroce0", "-p", p}),
			slices.Concat(c.args, []string{"-d", "goroce1", "-p", p, "127.0.0.1"}))
		if s.Err != nil || r.Err != nil || !strings.Contains(r.Out, c.want) {
			t.Fatalf("%s across two devices with one P each, want exit 0 and %q:\nserver %s\nclient %s", c.args[0], c.want, s, r)
		}
	}
}
