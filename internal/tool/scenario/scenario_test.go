package scenario

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/transport/mem"
)

// scenario runs roce server and roce client for one mode in this process
// and returns what each printed. The server serves len(clients) clients,
// one after the other (or at once for params).
type scenario struct {
	mode    string
	server  []string // extra server flags
	clients []client
}

type client struct {
	args  []string
	stdin string
}

type result struct {
	serverOut, serverErr string
	serverErrV           error
	clientOut            []string
	clientErr            []error
}

// parseT parses and checks a command line of roce server or roce client.
func parseT(t testing.TB, args ...string) (*flags, *mode) {
	t.Helper()
	f := &flags{}
	fs := cli.NewFlagSet(cli.StdFlags)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	m, err := f.check()
	if err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	return f, m
}

// runScenario runs sc over transport, with proto (flags such as --proto
// and --cm) on both sides.
func runScenario(t *testing.T, transport string, proto []string, sc scenario) result {
	t.Helper()
	port := clitest.FreeTCPPort(t)
	rport := clitest.LoopbackUDPPort(t)
	var memNet *mem.Network
	if transport == "mem" {
		memNet = mem.NewNetwork(&mem.Config{Live: true})
		defer memNet.Close()
	}
	flagsOf := func(extra ...string) *flags {
		args := append([]string{"--mode", sc.mode, "-p", fmt.Sprint(port), "--transport", transport,
			"--roce-port", fmt.Sprint(rport), "--timeout", "20s"}, proto...)
		f, m := parseT(t, append(args, extra...)...)
		if m.name != sc.mode {
			t.Fatal(m.name)
		}
		f.sc.dev.Net = memNet
		if transport == "mem" {
			f.sc.dev.Bind = "198.18.0.1"
		}
		return f
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var res result
	sf := flagsOf(append([]string{"--clients", fmt.Sprint(len(sc.clients))}, sc.server...)...)
	_, m := parseT(t, append([]string{"--mode", sc.mode}, proto...)...)
	var sout, serr bytes.Buffer
	souts, serrs := &lockedBuffer{b: &sout}, &lockedBuffer{b: &serr}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res.serverErrV = serve(ctx, sf, m, strings.NewReader(""), souts, serrs)
	}()
	waitFor(t, serrs, "listening on", done)
	server := "127.0.0.1"
	if transport == "mem" && sf.sc.cm == "rdmacm" {
		server = "198.18.0.1" // the server's device address on the in-process network
	}
	res.clientOut = make([]string, len(sc.clients))
	res.clientErr = make([]error, len(sc.clients))
	var wg sync.WaitGroup
	for i, c := range sc.clients {
		cf := flagsOf(c.args...)
		if transport == "mem" {
			cf.sc.dev.Bind = fmt.Sprintf("198.18.0.%d", 10+i)
		}
		run := func() {
			var out bytes.Buffer
			res.clientErr[i] = dial(ctx, cf, m, server, strings.NewReader(c.stdin), &out, &bytes.Buffer{})
			res.clientOut[i] = out.String()
		}
		if sc.mode == "params" {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		} else {
			run()
		}
	}
	wg.Wait()
	<-done
	res.serverOut, res.serverErr = souts.String(), serrs.String()
	return res
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until out holds want, or the server ended (done).
func waitFor(t *testing.T, out *lockedBuffer, want string, done <-chan struct{}) {
	t.Helper()
	for range 500 {
		if strings.Contains(out.String(), want) {
			return
		}
		select {
		case <-done:
			t.Fatalf("the server ended before %q:\n%s", want, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("the server did not print %q", want)
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// scenarioCase is one scenario and what its sides must print.
type scenarioCase struct {
	sc        scenario
	client    []string // in the client's output, in order
	server    []string // in the server's output
	clientErr string   // an error the client must end with
}

// TestScenariosGoroce runs every mode with goroce's session protocol,
// over rdma_cm and the TCP exchange.
func TestScenariosGoroce(t *testing.T) {
	cases := []scenarioCase{
		{scenario{mode: "reqresp", clients: []client{{args: []string{"-n", "50", "-s", "ping"}}}},
			[]string{"50 requests answered; round trip µs: min"}, []string{"served 50 requests"}, ""},
		{scenario{mode: "writeread", clients: []client{{args: []string{"-s", "hello world 789"}}}},
			[]string{"Passed string is : hello world 789 , with count 15", "The client is connected successfully",
				"buffer attr, addr: 0x", " , len: ", " , stag : 0x", "...\nSUCCESS, source and destination buffers match",
				"Client resource clean up is complete"},
			[]string{"A new connection is accepted from ", "Client side buffer information is received...",
				"buffer attr, addr: 0x", "The client has requested buffer length of : 15 bytes",
				"A disconnect event is received from the client...", "Server shut-down is complete"}, ""},
		{scenario{mode: "writeread", clients: []client{{args: []string{"-s", strings.Repeat("w", 2000)}}}},
			[]string{"with count 2000", "SUCCESS, source and destination buffers match"},
			[]string{"The client has requested buffer length of : 2000 bytes"}, ""},
		{scenario{mode: "writeread", clients: []client{{args: []string{"-s", strings.Repeat("w", 2100)}}}},
			nil, nil, "-s is 2100 bytes;"},
		{scenario{mode: "minimal", clients: []client{{}}},
			[]string{"Client read back: 'client-wrote-this'"},
			[]string{"Server buffer after client ops: 'client-wrote-this'"}, ""},
		{scenario{mode: "minimal", clients: []client{{args: []string{"-s", "a longer string than the sample writes"}}}},
			[]string{"Client read back: 'a longer string than the sample writes'"},
			[]string{"Server buffer after client ops: 'a longer string than the sample writes'"}, ""},
		{scenario{mode: "write-imm", clients: []client{{args: []string{"-s", "notify me", "--imm", "0x1234", "-n", "2"}}}},
			[]string{"RDMA_WRITE_WITH_IMM of 9 bytes, imm=0x00001234: done", "imm=0x00001235: done"},
			[]string{`RECV notified: imm=0x00001234, 9 bytes written: "notify me"`, `RECV notified: imm=0x00001235`}, ""},
		{scenario{mode: "send", clients: []client{{stdin: "Hello, RDMA!\nsecond\n"}}},
			[]string{"Server acknowledged", "Server acknowledged"}, []string{"Received: Hello, RDMA!", "Received: second"}, ""},
		{scenario{mode: "write", clients: []client{{stdin: "Writing directly to server memory\nmore\n"}}},
			[]string{"Message sent successfully", "Message sent successfully"},
			[]string{"Received via RDMA WRITE: Writing directly to server memory", "Received via RDMA WRITE: more"}, ""},
		{scenario{mode: "read", server: []string{"--text", "Hello from server memory!"},
			clients: []client{{stdin: "0 5\n6 9\n3 100\nx\n"}}},
			[]string{"Read data (6 bytes from position 0): Hello ", "Read data (4 bytes from position 6): from",
				"range 3-100 is outside the server's 25 bytes (0-24)", "want two numbers: START END"},
			[]string{"Stored 25 bytes", "A disconnect event is received"}, ""},
		{scenario{mode: "lambda", clients: []client{{args: []string{"--fn", "wordcount", "-s", "one two three"}}}},
			[]string{"wordcount(13 bytes) = 3"}, []string{`call "CALL wordcount 13" -> OK 1`}, ""},
		{scenario{mode: "lambda", clients: []client{{args: []string{"--fn", "sum", "-s", "1 2 3 40"}}}},
			[]string{"sum(32 bytes) = 46"}, nil, ""},
		{scenario{mode: "lambda", clients: []client{{args: []string{"--fn", "rm-rf", "-s", "x"}}}},
			nil, []string{`-> ERR unknown function`}, `the server refused: unknown function "rm-rf"`},
		{scenario{mode: "lambda", clients: []client{{args: []string{"--fn", "upper", "-s", strings.Repeat("a", 3000)}}}},
			nil, nil, "arguments of 3000 bytes exceed the 2048-byte argument region"},
		{scenario{mode: "params", server: []string{"--dim", "4"}, clients: []client{
			{args: []string{"-n", "3", "--dim", "4", "--id", "0"}}, {args: []string{"-n", "3", "--dim", "4", "--id", "1"}}}},
			[]string{"iteration 2: weights"}, []string{"final weights after 6 steps: [0.9910 0.9820 0.9730 0.9640]"}, ""},
		{scenario{mode: "flush", clients: []client{{}}},
			[]string{"FLUSH global range: SUCCESS", "ATOMIC_WRITE: SUCCESS", "read back: 0x1122334455667788 and 256 bytes as written",
				"FLUSH global whole region: SUCCESS",
				"FLUSH persistent to a QP without FLUSH_PERSISTENT: REM_INV_REQ_ERR (as expected)", "flush: all as expected"},
			[]string{"ATOMIC_WRITE landed: 0x1122334455667788", "the WRITE before the FLUSH is in place"}, ""},
		{scenario{mode: "flush", clients: []client{{args: []string{"-s", "mr"}}}},
			[]string{"FLUSH global whole region: SUCCESS", "FLUSH to a region without FLUSH_GLOBAL: REM_ACCESS_ERR (as expected)"},
			[]string{"ATOMIC_WRITE landed: 0x1122334455667788", "the WRITE before the FLUSH is in place"}, ""},
	}
	for _, link := range [][2]string{{"mem", "rdmacm"}, {"udp", "rdmacm"}, {"mem", "tcp"}, {"udp", "tcp"}} {
		runScenarioCases(t, link[0], link[0]+"/"+link[1], []string{"--proto", "goroce", "--cm", link[1]}, cases)
	}
}

// runScenarioCases runs cases over transport with proto, as subtests
// named prefix/mode.
func runScenarioCases(t *testing.T, transport, prefix string, proto []string, cases []scenarioCase) {
	for _, c := range cases {
		name := c.sc.mode
		if c.clientErr != "" {
			name += "/refused"
		}
		t.Run(prefix+"/"+name, func(t *testing.T) {
			res := runScenario(t, transport, proto, c.sc)
			out := res.clientOut[0]
			if c.clientErr != "" {
				if res.clientErr[0] == nil || !strings.Contains(res.clientErr[0].Error(), c.clientErr) {
					t.Fatalf("client error %v, want %q\n%s", res.clientErr[0], c.clientErr, out)
				}
			} else if res.clientErr[0] != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s%s", res.clientErr[0], out, res.serverErrV, res.serverOut, res.serverErr)
			}
			if res.serverErrV != nil && c.clientErr == "" {
				t.Fatalf("server: %v\n%s%s", res.serverErrV, res.serverOut, res.serverErr)
			}
			containsInOrder(t, "client", out, c.client)
			containsInOrder(t, "server", res.serverOut, c.server)
		})
	}
}

// TestScenariosSeed runs every mode with its defaults: the published
// program's protocol, goroce on both ends.
func TestScenariosSeed(t *testing.T) {
	cases := []scenarioCase{
		{scenario{mode: "reqresp", clients: []client{{args: []string{"-n", "5", "-s", "ping"}}}},
			[]string{"5 requests answered; round trip µs: min"}, []string{"served 5 requests"}, ""},
		{scenario{mode: "writeread", clients: []client{{args: []string{"-s", "hello world 789"}}}},
			[]string{"Passed string is : hello world 789 , with count 15", "buffer attr, addr: 0x", " , len: 15 , stag : 0x",
				"...\nSUCCESS, source and destination buffers match"},
			[]string{"The client has requested buffer length of : 15 bytes", "A disconnect event is received from the client..."}, ""},
		{scenario{mode: "minimal", clients: []client{{}}},
			[]string{"Client read back: 'client-wrote-this'"}, []string{"Server buffer after client ops: 'client-wrote-this'"}, ""},
		{scenario{mode: "write-imm", clients: []client{{}}},
			[]string{"post RDMA_WRITE_WITH_IMM len=22\n", "  imm_data host=22\n", "  imm_data net=0x16000000\n", "RDMA_WRITE_WITH_IMM completed\n"},
			[]string{"got RECV with IMM\n", "  imm_data net=0x16000000\n", "  imm_data host=22\n",
				"after WRITE_WITH_IMM, buf='client-wrote-with-imm'\n"}, ""},
		{scenario{mode: "write-imm", clients: []client{{args: []string{"-s", "notify me", "--imm", "0x1234"}}}},
			[]string{"post RDMA_WRITE_WITH_IMM len=10\n", "  imm_data host=4660\n", "RDMA_WRITE_WITH_IMM completed"},
			[]string{"  imm_data host=4660\n", "after WRITE_WITH_IMM, buf='notify me'\n"}, ""},
		{scenario{mode: "send", clients: []client{{stdin: "Hello, RDMA!\n\nsecond\n"}}},
			[]string{"Connected to server. Enter messages (Ctrl+D to stop):\n", "Server acknowledged\nServer acknowledged\n"},
			[]string{"Send-Receive Server ready.\n", "Received: Hello, RDMA!\nReceived: second\n"}, ""},
		{scenario{mode: "write", clients: []client{{stdin: "Writing directly to server memory\nmore\n"}}},
			[]string{"Message sent successfully\nMessage sent successfully\n"},
			[]string{"Write Server ready.\n", "Received (34 bytes): Writing directly to server memory\nReceived (5 bytes): more\n"}, ""},
		{scenario{mode: "read", server: []string{"--text", "Hello from server memory!"},
			clients: []client{{stdin: "0 4\n11 16\n20 100\n3 1\nx\n0 4096\n"}}},
			[]string{"Connected to server.\n", "Read data (5 bytes from position 0): Hello\n", "Read data (6 bytes from position 11): server\n",
				"Read data (81 bytes from position 20): mory!\n",
				"Invalid range. start must be >= 0, end must be >= start and < 4096\n",
				"Invalid input. Please enter two numbers: start_pos end_pos\n",
				"Invalid range. start must be >= 0, end must be >= start and < 4096\n"},
			[]string{"Read Server ready.\n", "Waiting for client read requests...\n"}, ""},
		{scenario{mode: "params", server: []string{"--dim", "2"}, clients: []client{{args: []string{"-n", "2", "--dim", "2"}}}},
			[]string{"iteration 1: weights"}, []string{"final weights after 2 steps"}, ""},
	}
	for _, transport := range []string{"mem", "udp"} {
		runScenarioCases(t, transport, transport, nil, cases)
	}
}

func containsInOrder(t *testing.T, who, out string, want []string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("%s output lacks %q (in order):\n%s", who, w, out)
		}
		rest = rest[i+len(w):]
	}
}

// TestScenarioModeMismatch: a client of another mode is refused, and
// both sides say why: over rdma_cm (the REJ's private data), goroce's TCP
// hello, and rdma-lib's exchange (goroce's mark in its padding).
func TestScenarioModeMismatch(t *testing.T) {
	for _, c := range []struct {
		name           string
		proto          []string
		server, client string
	}{
		{"goroce/rdmacm", []string{"--proto", "goroce", "--cm", "rdmacm"}, "read", "send"},
		{"goroce/tcp", []string{"--proto", "goroce", "--cm", "tcp"}, "read", "send"},
		{"seed/rdmacm", nil, "minimal", "writeread"},
		{"seed/rdma-lib", nil, "read", "send"},
	} {
		t.Run(c.name, func(t *testing.T) { modeMismatch(t, c.proto, c.server, c.client) })
	}
}

func modeMismatch(t *testing.T, proto []string, serverMode, clientMode string) {
	port := clitest.FreeTCPPort(t)
	rport := clitest.LoopbackUDPPort(t)
	mk := func(mode string, extra ...string) (*flags, *mode) {
		return parseT(t, append(append([]string{"--mode", mode, "-p", fmt.Sprint(port), "--roce-port", fmt.Sprint(rport),
			"--timeout", "10s"}, proto...), extra...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sf, sm := mk(serverMode, "--text", "x", "--clients", "1")
	errc := make(chan error, 1)
	out := &lockedBuffer{b: &bytes.Buffer{}}
	done := make(chan struct{})
	errOut := &lockedBuffer{b: &bytes.Buffer{}}
	go func() { defer close(done); errc <- serve(ctx, sf, sm, strings.NewReader(""), out, errOut) }()
	waitFor(t, errOut, "listening on", done)
	cf, cm := mk(clientMode, "-s", "x")
	err := dial(ctx, cf, cm, "127.0.0.1", strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
	want := fmt.Sprintf("mode mismatch: the server runs --mode %s, the client asked for --mode %s", serverMode, clientMode)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("client: %v", err)
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("server: %v", err)
	}
	if sf.sc.cm == "rdmacm" && !strings.Contains(errOut.String(), "rejected: "+want) {
		t.Errorf("the server did not tell the rejected request: %q", errOut.String())
	}
}
