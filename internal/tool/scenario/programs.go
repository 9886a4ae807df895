package scenario

import (
	"fmt"
	"strings"
)

// The seed documents describe three published programs. A mode that
// mirrors one speaks its protocol by default (--proto seed): its
// connection (rdma_cm or its TCP exchange), its port, what its private
// data or exchange carries, its message sizes and immediates, its
// replies and the output lines of its ends, so that either end can be
// that program. --proto goroce is goroce's own session protocol for
// every mode: the mode in the connection's private data (or TCP hello)
// and checked by both sides, rdma_cm on port 7471 unless --cm and -p say
// otherwise.

// The protocols of --proto.
const (
	protoSeed   = "seed"
	protoGoroce = "goroce"
)

// goroceDefaultPort is the port of goroce's session protocol, and of the
// modes without a published program (rdma-roce-lab's rdma_cm port).
const goroceDefaultPort = 7471

// seedMTU is the path MTU the seed programs use on their 1500-byte links
// (rdma-lib sets it; the rdma_cm programs get it from rxe's active MTU),
// and what a client asks for unless --mtu says otherwise.
const seedMTU = 1024

// program is a published program whose protocol a mode speaks. It is not
// modified.
type program struct {
	name   string // as the help names it
	cm     string // how its sides connect: rdmacm or tcp
	port   int    // its default port
	server string // the command that runs its server
	client string // and its client
}

var (
	rdmaExample = &program{name: "rdma-example (github.com/animeshtrivedi/rdma-example)", cm: "rdmacm", port: 20886,
		server: "./bin/rdma_server [-a ADDR] [-p 20886]", client: "./bin/rdma_client -a SERVER [-p 20886] -s STRING"}
	minimalSample = &program{name: "rdma-roce-lab's minimal sample and Example 1 (github.com/montybeatnik/rdma-roce-lab)",
		cm: "rdmacm", port: 7471, server: "./rdma_min_server 7471", client: "./rdma_min_client SERVER 7471"}
	rdmaLabImm = &program{name: "rdma-roce-lab's Example 2 (github.com/montybeatnik/rdma-roce-lab)", cm: "rdmacm", port: 7472,
		server: "./rdma_server_imm [7472]", client: "./rdma_client_imm SERVER 7472"}
	rdmaLib = &program{name: "rdma-lib (github.com/andreibleortu/rdma-lib)", cm: "tcp", port: 18515,
		server: "./rdma MODE", client: "./rdma MODE SERVER"}
)

// seedModes are the modes with a published program, as that program runs
// them. writeread and minimal run as goroce's own modes do, connected by
// the program's protocol (cmSeeds); the others differ in what they send
// and print. It is not modified.
var seedModes = seedModeTable()

func seedModeTable() map[string]*mode {
	t := map[string]*mode{}
	for _, m := range []*mode{
		withProgram(findModeDef("writeread"), rdmaExample),
		withProgram(findModeDef("minimal"), minimalSample),
		{name: "write-imm", program: rdmaLabImm, prepare: minimalPrepare, serverRecv: immRecv, server: immServer, client: immClient},
		{name: "send", program: rdmaLib, serverRecv: recvAt(0, rdmalibBuf), server: rdmalibSendServer, client: rdmalibSendClient},
		{name: "write", program: rdmaLib, serverRecv: recvAt(0, rdmalibBuf), server: rdmalibWriteServer, client: rdmalibWriteClient},
		{name: "read", program: rdmaLib, setup: rdmalibReadSetup, prepare: rdmalibReadPrepare, server: rdmalibReadServer,
			client: rdmalibReadClient},
		{name: "lambda", program: rdmaLib, setup: rdmalibLambdaSetup, serverRecv: recvAt(0, rdmalibBuf), server: rdmalibLambdaServer,
			refuseClient: errRdmalibLambda},
	} {
		m.summary = findModeDef(m.name).summary
		t[m.name] = m
	}
	return t
}

// withProgram returns a copy of m that speaks p's protocol.
func withProgram(m *mode, p *program) *mode {
	c := *m
	c.program = p
	return &c
}

// findModeDef returns goroce's mode of name; the name is one of modes.
func findModeDef(name string) *mode {
	for _, m := range modes {
		if m.name == name {
			return m
		}
	}
	panic("scenario: no mode " + name)
}

// programsHelp is the help's table of the published programs.
func programsHelp() string {
	var b strings.Builder
	b.WriteString("With --proto seed (the default), a mode with a published program speaks that program's\n" +
		"protocol, so that either end can be the program:\n")
	for _, m := range modes {
		sm := seedModes[m.name]
		if sm == nil {
			continue
		}
		p := sm.program
		fmt.Fprintf(&b, "  %-10s %s, over %s, port %d\n", m.name, p.name, cmName(p.cm), p.port)
		fmt.Fprintf(&b, "  %-10s   its server: %s; its client: %s\n", "", seedCommand(p.server, m.name), seedCommand(p.client, m.name))
	}
	b.WriteString("  reqresp and params have no published program: they speak goroce's session protocol.\n" +
		"A seed-mode client asks for path MTU 1024, as the programs use; a server over rdma_cm takes what the\n" +
		"client asks for (--mtu bounds it). When packets of more than 1024 bytes go unanswered on a larger path\n" +
		"MTU (a peer whose link carries less), roce says so and what to try.\n" +
		"--proto goroce speaks goroce's session protocol in every mode:\n" +
		"the mode in the connection's private data (or TCP hello) and checked by both sides, rdma_cm on\n" +
		"port 7471 (or --cm tcp), write-imm's -n and --imm, and the lambda server's registered functions.\n\n")
	return b.String()
}

// cmName names a way of connecting for the help.
func cmName(cm string) string {
	if cm == "tcp" {
		return "its TCP exchange"
	}
	return "rdma_cm"
}

// seedCommand fills the mode into a program's command line.
func seedCommand(cmd, mode string) string { return strings.ReplaceAll(cmd, "MODE", mode) }
