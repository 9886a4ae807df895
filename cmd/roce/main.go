// Command roce is goroce's tool: it runs the stack against itself and
// against real RoCE peers, and decodes RoCEv2 captures.
//
// Usage:
//
//	roce <command> [flags] [args]
//	roce help [command]
//
// Each command is a package of its own under internal/tool, which
// declares its flags and help in a cli.Command; this file only lists
// them, in the order roce help shows them, as cmd/go's main lists its
// verbs.
package main

import (
	"os"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/tool/bench"
	"github.com/goroce/goroce/internal/tool/ccbench"
	"github.com/goroce/goroce/internal/tool/decode"
	"github.com/goroce/goroce/internal/tool/demo"
	"github.com/goroce/goroce/internal/tool/device"
	"github.com/goroce/goroce/internal/tool/mckey"
	"github.com/goroce/goroce/internal/tool/perf"
	"github.com/goroce/goroce/internal/tool/pingpong"
	"github.com/goroce/goroce/internal/tool/rawudp"
	"github.com/goroce/goroce/internal/tool/rcopy"
	"github.com/goroce/goroce/internal/tool/rping"
	"github.com/goroce/goroce/internal/tool/rstream"
	"github.com/goroce/goroce/internal/tool/scenario"
)

// commands is the command table, in the order roce help lists it.
var commands = []*cli.Command{
	demo.Cmd,
	scenario.Server,
	scenario.Client,
	pingpong.Cmd,
	perf.Cmd,
	rping.Cmd,
	rstream.Cmd,
	rstream.Riostream,
	rstream.Udpong,
	mckey.Cmd,
	rcopy.Cmd,
	rawudp.Cmd,
	decode.Cmd,
	device.Cmd,
	bench.Cmd,
	ccbench.Cmd,
}

func main() {
	os.Exit(cli.Main(commands, os.Args[1:], cli.Stdio()))
}
