package libgoroce_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

// TestRdmaCM runs librdmacm's example programs and perftest over rdma_cm
// (-R), unmodified, both ends on the device (server on goroce0, client on
// goroce1 where the tool takes a source address; mckey's group member and
// sender): each ends well and
// prints what it prints on success.
func TestRdmaCM(t *testing.T) {
	devicetest.Need(t, "rping", "ucmatose", "udaddy", "mckey", "cmtime", "rdma_server", "rdma_client", "ib_write_bw")
	h := devicetest.NewHost(t)
	d0 := h.Start("goroce0", "127.0.0.1")
	d1 := h.Start("goroce1", "127.0.0.2")
	type tc struct {
		name             string
		server, client   func(port string) []string
		port             int    // the rdma_cm port the server listens on, when not the one given (udaddy's)
		ready            string // what the server prints when it is ready, for a server that does not listen (mckey's receiver)
		cexpect, sexpect []string
	}
	cases := []tc{
		{name: "rping",
			server: func(p string) []string { return []string{"rping", "-s", "-a", "127.0.0.1", "-p", p, "-C", "100", "-V"} },
			client: func(p string) []string {
				return []string{"rping", "-c", "-a", "127.0.0.1", "-I", "127.0.0.2", "-p", p, "-C", "100", "-V", "-v"}
			},
			cexpect: []string{`ping data: rdma-ping-99: `}},
		{name: "ucmatose",
			server: func(p string) []string { return []string{"ucmatose", "-p", p, "-c", "4"} },
			client: func(p string) []string {
				return []string{"ucmatose", "-s", "127.0.0.1", "-b", "127.0.0.2", "-p", p, "-c", "4"}
			},
			cexpect: []string{`data transfers complete`, `return status 0`}, sexpect: []string{`return status 0`}},
		{name: "udaddy",
			// udaddy's -p is a port space; its port is 7174, on the
			// test's own devices.
			server: func(p string) []string { return []string{"udaddy"} },
			client: func(p string) []string { return []string{"udaddy", "-s", "127.0.0.1", "-b", "127.0.0.2"} }, port: 7174,
			cexpect: []string{`data transfers complete`, `return status 0`}, sexpect: []string{`return status 0`}},
		{name: "cmtime",
			server: func(p string) []string { return []string{"cmtime", "-p", p} },
			client: func(p string) []string {
				return []string{"cmtime", "-s", "127.0.0.1", "-b", "127.0.0.2", "-p", p, "-c", "50"}
			},
			cexpect: []string{`connect\s+:`, `disconnect\s+:`}},
		{name: "rdma_client",
			server:  func(p string) []string { return []string{"rdma_server", "-p", p} },
			client:  func(p string) []string { return []string{"rdma_client", "-s", "127.0.0.1", "-p", p} },
			cexpect: []string{`rdma_client: end 0`}, sexpect: []string{`rdma_server: end 0`}},
		{name: "mckey",
			// A member of 239.255.60.1 on goroce0 gets the sender's
			// datagrams through goroce1.
			// stdbuf: the receiver's "ready" line, not held in a buffer.
			server: func(p string) []string {
				return []string{"stdbuf", "-oL", "mckey", "-m", "239.255.60.1", "-b", "127.0.0.1", "-C", "10"}
			},
			client: func(p string) []string {
				return []string{"mckey", "-m", "239.255.60.1", "-b", "127.0.0.2", "-s", "-C", "10"}
			},
			ready:   "receiving data transfers",
			cexpect: []string{`data transfers complete`, `return status 0`}, sexpect: []string{`data transfers complete`, `return status 0`}},
	}
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"} {
		tool := tool
		size := "65536"
		if strings.HasSuffix(tool, "_lat") {
			size = "2"
		}
		cases = append(cases, tc{name: tool + "-R",
			// stdbuf: what perftest printed before a test
			// killed it, not lost in its buffer.
			server: func(p string) []string {
				return []string{"stdbuf", "-oL", tool, "-R", "-s", size, "-n", "500", "-p", p}
			},
			client: func(p string) []string {
				return []string{"stdbuf", "-oL", tool, "-R", "-s", size, "-n", "500", "-p", p, "127.0.0.1"}
			},
			cexpect: []string{`(?m)^\s*` + size + `\s+500\s+[\d.]+\s+[\d.]+`}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			port := strconv.Itoa(devicetest.FreeTCPPort(t))
			srv, cli := c.server(port), c.client(port)
			s := h.Go(ctx, srv[0], srv[1:]...)
			defer s.Kill()
			lport := devicetest.Atoi(port)
			if c.port != 0 {
				lport = c.port
			}
			if c.ready != "" {
				s.WaitFor(t, c.ready, 20*time.Second)
			} else {
				d0.WaitListening(t, lport, 20*time.Second)
			}
			r := h.Go(ctx, cli[0], cli[1:]...).Wait()
			if devicetest.Clockless(r) && strings.HasSuffix(c.name, "-R") {
				// perftest could not calibrate its clock: once more, on
				// a port of its own, which the first server's listener
				// (it goes with its session, a little after the process)
				// cannot hold.
				s.Kill()
				s.Wait()
				port = strconv.Itoa(devicetest.FreeTCPPort(t))
				srv, cli = c.server(port), c.client(port)
				s = h.Go(ctx, srv[0], srv[1:]...)
				defer s.Kill()
				d0.WaitListening(t, devicetest.Atoi(port), 20*time.Second)
				r = h.Go(ctx, cli[0], cli[1:]...).Wait()
			}
			defer func() {
				if t.Failed() {
					t.Logf("client: %s\ngoroce0: %+v\ngoroce1: %+v", r.Out, d0.Dev.Stats(), d1.Dev.Stats())
				}
			}()
			if r.Err != nil {
				t.Fatalf("client %s\nserver: %s", r, s.Output())
			}
			for _, re := range c.cexpect {
				if !regexp.MustCompile(re).MatchString(r.Out) {
					t.Errorf("client output lacks %q:\n%s", re, r.Out)
				}
			}
			if c.name == "cmtime" {
				s.Kill() // cmtime's server serves until killed
			}
			sr := s.Wait()
			if c.name != "cmtime" && sr.Err != nil {
				t.Errorf("server %s", sr)
			}
			for _, re := range c.sexpect {
				if !regexp.MustCompile(re).MatchString(sr.Out) {
					t.Errorf("server output lacks %q:\n%s", re, sr.Out)
				}
			}
		})
	}
}

// TestRdmaCMReturns runs testdata/cmreturns.c: rdma_cm's events and
// returns as librdmacm and the kernel give them (REJECTED's reasons,
// one DISCONNECTED per end however a connection ends, rdma_disconnect's
// returns, a listening port taken again, rdma_destroy_id waiting for an
// event another thread holds, a thread that calls rdma_get_cm_event just
// after another destroyed its channel), over IPv4 and IPv6, ENODEV
// from every entry point on a host with no device, and DEVICE_REMOVAL
// for every id when the device goes.
func TestRdmaCMReturns(t *testing.T) {
	exe := devicetest.CC(t, "cmreturns", []string{"testdata/cmreturns.c"}, "-lrdmacm")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r := devicetest.NewHost(t).Run(ctx, exe, "nodev"); r.Err != nil || !strings.Contains(r.Out, ", 0 failed") {
		t.Errorf("no device: %s", r)
	}
	h := devicetest.NewHost(t)
	d := h.Start("goroce0", "127.0.0.1,::1")
	for _, a := range []string{"127.0.0.1", "::1"} {
		r := h.Run(ctx, exe, a, strconv.Itoa(devicetest.FreeTCPPort(t)))
		if r.Err != nil || !strings.Contains(r.Out, ", 0 failed") {
			t.Errorf("%s: %s", a, r)
		}
	}
	// The device going under a program blocked in rdma_get_cm_event.
	p := h.Go(ctx, exe, "127.0.0.1", strconv.Itoa(devicetest.FreeTCPPort(t)), "gone")
	defer p.Kill()
	p.WaitFor(t, "ready", 20*time.Second)
	if err := d.Srv.Close(); err != nil {
		t.Fatal(err)
	}
	if r := p.Wait(); r.Err != nil || !strings.Contains(r.Out, ", 0 failed") {
		t.Errorf("device gone: %s", r)
	}
}
