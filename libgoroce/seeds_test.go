package libgoroce_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

var (
	roceOnce sync.Once
	roceBin  string
	roceErr  error
)

// roce builds cmd/roce once per test binary.
func roce(t *testing.T) string {
	t.Helper()
	roceOnce.Do(func() {
		dir, err := os.MkdirTemp("", "goroce-bin-")
		if err != nil {
			roceErr = err
			return
		}
		roceBin = filepath.Join(dir, "roce")
		if out, err := exec.Command("go", "build", "-o", roceBin, "../cmd/roce").CombinedOutput(); err != nil {
			roceErr = err
			t.Logf("%s", out)
		}
	})
	if roceErr != nil {
		t.Fatalf("go build ../cmd/roce: %v", roceErr)
	}
	return roceBin
}

// peers builds interop/peers' seed-program peers into a directory.
func peers(t *testing.T) string {
	t.Helper()
	devicetest.Lib(t)
	devicetest.Need(t, "make", "cc")
	if _, err := os.Stat("/usr/include/rdma/rdma_cma.h"); err != nil {
		t.Skip("no librdmacm headers (apt-get install librdmacm-dev)")
	}
	out := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", "../interop/peers", "OUT="+out, filepath.Join(out, "rdmaex_server"),
		filepath.Join(out, "rdmaex_client"), filepath.Join(out, "minimal_server"), filepath.Join(out, "minimal_client"),
		filepath.Join(out, "imm_server"), filepath.Join(out, "imm_client"), filepath.Join(out, "rdmalib"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make -C interop/peers: %v\n%s", err, b)
	}
	return out
}

// seedCase is a seed program's scenario: its server and client as the
// C peer runs them and as roce runs them, and what each must print.
type seedCase struct {
	name           string
	mode           string                          // roce's --mode
	peerServer     func(dir, port string) []string // the C peer's server command line
	peerClient     func(dir, port string) []string
	roceClientArgs []string // after "client --mode M"
	stdin          string   // the client's standard input
	serverStdin    string
	cexpect        []string
	sexpect        []string
	rdmalib        bool // the peer talks TCP on RDMALIB_PORT
}

var seedCases = []seedCase{
	{name: "writeread", mode: "writeread",
		peerServer: func(d, p string) []string { return []string{d + "/rdmaex_server", "-a", "127.0.0.1", "-p", p} },
		peerClient: func(d, p string) []string {
			return []string{d + "/rdmaex_client", "-a", "127.0.0.1", "-p", p, "-s", "hello world 789"}
		},
		roceClientArgs: []string{"-s", "hello world 789"},
		cexpect:        []string{`SUCCESS, source and destination buffers match`},
		sexpect:        []string{`requested buffer length of : 15 bytes`}},
	{name: "minimal", mode: "minimal",
		peerServer: func(d, p string) []string { return []string{d + "/minimal_server", p} },
		peerClient: func(d, p string) []string { return []string{d + "/minimal_client", "127.0.0.1", p} },
		cexpect:    []string{`Client read back: 'client-wrote-this'`},
		sexpect:    []string{`Server buffer after client ops: 'client-wrote-this'`}},
	{name: "write_imm", mode: "write-imm",
		peerServer: func(d, p string) []string { return []string{d + "/imm_server", p} },
		peerClient: func(d, p string) []string { return []string{d + "/imm_client", "127.0.0.1", p} },
		cexpect:    []string{`RDMA_WRITE_WITH_IMM completed`},
		sexpect:    []string{`got RECV with IMM`, `after WRITE_WITH_IMM, buf='client-wrote-with-imm'`}},
	{name: "rdmalib_send", mode: "send", rdmalib: true,
		peerServer: func(d, p string) []string { return []string{d + "/rdmalib", "send"} },
		peerClient: func(d, p string) []string { return []string{d + "/rdmalib", "send", "127.0.0.1"} },
		stdin:      "hello rdma\nsecond line\n",
		cexpect:    []string{`(?m)^Server acknowledged$`},
		sexpect:    []string{`(?m)^Received: hello rdma$`, `(?m)^Received: second line$`}},
	{name: "rdmalib_read", mode: "read", rdmalib: true,
		peerServer:  func(d, p string) []string { return []string{d + "/rdmalib", "read"} },
		peerClient:  func(d, p string) []string { return []string{d + "/rdmalib", "read", "127.0.0.1"} },
		serverStdin: "Hello from server memory!\n",
		stdin:       "0 4\n11 16\n",
		cexpect:     []string{`Read data \(5 bytes from position 0\): Hello`, `Read data \(6 bytes from position 11\): server`}},
}

// TestSeedPeers runs interop/peers' C programs, the seed programs'
// protocols written from their documentation, unmodified on the device:
// server and client against each other, each against roce's Go
// implementation of the mode (on its own engine, across loopback), both
// ways.
func TestSeedPeers(t *testing.T) {
	dir := peers(t)
	bin := roce(t)
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	h.Start("goroce1", "127.0.0.2")
	roceArgs := []string{"--roce-port", strconv.Itoa(int(h.Port))}
	for _, c := range seedCases {
		for _, ends := range []string{"peer-peer", "peer-roce", "roce-peer"} {
			t.Run(c.name+"/"+ends, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				port := strconv.Itoa(devicetest.FreeTCPPort(t))
				var srv, cli []string
				var srvEnv, cliEnv []string
				switch ends {
				case "peer-peer":
					srv, cli = c.peerServer(dir, port), c.peerClient(dir, port)
				case "peer-roce":
					srv = c.peerServer(dir, port)
					cli = append(append([]string{bin, "client", "--mode", c.mode, "-p", port, "--bind", "127.0.0.3"}, roceArgs...),
						append(c.roceClientArgs, "127.0.0.1")...)
				case "roce-peer":
					srv = append([]string{bin, "server", "--mode", c.mode, "-p", port, "--bind", "127.0.0.3"}, roceArgs...)
					cli = c.peerClient(dir, port)
					for i, a := range cli {
						if a == "127.0.0.1" {
							cli[i] = "127.0.0.3"
						}
					}
				}
				if c.rdmalib {
					srvEnv, cliEnv = []string{"RDMALIB_PORT=" + port}, []string{"RDMALIB_PORT=" + port}
				}
				s := h.GoEnv(ctx, srvEnv, c.serverStdin, srv[0], srv[1:]...)
				defer s.Kill()
				if err := waitSeedServer(ctx, s, c, port, ends); err != nil {
					t.Fatalf("%v: %s", err, s.Output())
				}
				// A C peer server says nothing when it listens: its client
				// tries again while it is refused (bounded).
				var r *devicetest.Result
				for try := 0; ; try++ {
					r = h.GoEnv(ctx, cliEnv, c.stdin, cli[0], cli[1:]...).Wait()
					if r.Err == nil || ends == "roce-peer" || c.rdmalib || s.Exited() || try == 50 ||
						!refused.MatchString(r.Out) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if r.Err != nil {
					t.Fatalf("client %s\nserver: %s", r, s.Output())
				}
				for _, re := range c.cexpect {
					if !regexp.MustCompile(re).MatchString(r.Out) {
						t.Errorf("client output lacks %q:\n%s", re, r.Out)
					}
				}
				// The server has printed what it saw once its client is
				// done; roce's rdma-lib servers serve on until killed.
				deadline := time.Now().Add(10 * time.Second)
				for _, re := range c.sexpect {
					for !regexp.MustCompile(re).MatchString(s.Output()) && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
					if !regexp.MustCompile(re).MatchString(s.Output()) {
						t.Errorf("server output lacks %q:\n%s", re, s.Output())
					}
				}
			})
		}
	}
}

// refused is how a client says nobody answered its connection request.
var refused = regexp.MustCompile(`(?i)reject|refused|unreachable|REJECTED|error 8`)

// waitSeedServer waits until a seed server is ready for its client: its
// TCP port listens (rdma-lib's exchange), or roce's server has said it
// listens; a C peer over rdma_cm says nothing, and its client retries.
func waitSeedServer(ctx context.Context, p *devicetest.Proc, c seedCase, port, ends string) error {
	switch {
	case c.rdmalib:
		return p.WaitListen(ctx, devicetest.Atoi(port))
	case ends == "roce-peer":
		return p.WaitOutput(ctx, regexp.MustCompile(`listening on`))
	}
	return nil
}
