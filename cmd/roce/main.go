// Command roce is goroce's tool: it decodes RoCEv2 captures and, through
// subcommands added beside this file, runs the stack.
//
// Usage:
//
//	roce <command> [flags] [args]
//	roce help [command]
//
// Each command lives in its own file and has one entry in the commands
// table below.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/tool/decode"
	"github.com/goroce/goroce/internal/tool/demo"
	"github.com/goroce/goroce/internal/tool/perf"
	"github.com/goroce/goroce/internal/tool/pingpong"
	"github.com/goroce/goroce/internal/tool/rawudp"
	"github.com/goroce/goroce/internal/tool/rping"
	"github.com/goroce/goroce/internal/tool/scenario"
)

// command is one subcommand of roce.
type command struct {
	name    string
	summary string // one line, shown by roce help
	usage   string // the argument synopsis after the name
	// run runs the command with the arguments after its name and returns
	// the process's exit code: 0 success, 1 failure, 2 bad usage.
	run func(args []string, stdout, stderr io.Writer) int
}

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// commands is the static command table, in the order roce help lists it.
// Add a command by adding its entry here and its code in its own file.
var commands = []command{
	toolEntry(demo.Cmd),
	toolEntry(scenario.Server),
	toolEntry(scenario.Client),
	toolEntry(pingpong.Cmd),
	toolEntry(perf.Cmd),
	toolEntry(rping.Cmd),
	toolEntry(rawudp.Cmd),
	toolEntry(decode.Cmd),
}

// toolEntry is the entry of a tool that has moved to a package of its own
// under internal/tool.
func toolEntry(c *cli.Command) command {
	return command{name: c.Name(), summary: c.Short, usage: strings.TrimPrefix(c.UsageLine, c.Name()+" "),
		run: func(args []string, stdout, stderr io.Writer) int {
			if c.OneProc {
				cli.OneProc()
			}
			return cli.Run(context.Background(), c, &cli.Env{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr}, args)
		}}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args (without the program name) to a command.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				fmt.Fprintf(stdout, "usage: roce %s %s\n\n%s\n", c.name, c.usage, c.summary)
				return exitOK
			}
			fmt.Fprintf(stderr, "roce help: unknown command %q\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	}
	if c := lookup(name); c != nil {
		return c.run(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "roce: unknown command %q\n", name)
	if s := suggest(name); s != "" {
		fmt.Fprintf(stderr, "Did you mean %q?\n", s)
	}
	fmt.Fprintln(stderr, "Run 'roce help' for the list of commands.")
	return exitUsage
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// suggest returns the command name meant by a mistyped name: the one
// command it is a prefix of, or else the one command closest to it, at most
// two edits away. It returns "" when there is no such single command.
func suggest(name string) string {
	if name == "" {
		return ""
	}
	best, bestScore, tie := "", 3, false
	for _, c := range commands {
		score := editDistance(c.name, name)
		if strings.HasPrefix(c.name, name) {
			score = 0
		}
		switch {
		case score < bestScore:
			best, bestScore, tie = c.name, score, false
		case score == bestScore:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "roce is the goroce RoCEv2 tool.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintln(w, "  roce <command> [flags] [args]")
	fmt.Fprintln(w, "  roce help <command>")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}
