// Package cli is what the tools of the roce command share: the command
// table's entry (Command), the one flag parser (FlagSet), the way to fail
// (UsageError, Report and the exit statuses), the one way to open a RoCE
// device (DeviceFlags.Open), and the step-by-step trace output. Each tool
// lives in its own package under internal/tool and exports its *Command;
// cmd/roce lists them and calls Main, as cmd/go's main lists its verbs.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/goroce/goroce/transport/mem"
)

// Command is one tool of the roce command: its help and how it runs. A
// Command is read-only once declared, and safe for concurrent use: each
// run declares its flags afresh.
type Command struct {
	// UsageLine is the command's name, then the synopsis of its flags and
	// arguments ("decode [--json | --flows] FILE...").
	UsageLine string
	// Short is the line roce help shows.
	Short string
	// Long is what the command's help prints between the usage line (and
	// a blank line) and its flags, as is: end it with the line breaks to
	// put before the flags.
	Long string
	// Style is how the command line reads: StdFlags (the default) or
	// Getopt, for the tools that mirror C ones.
	Style Style
	// OneProc asks Main to run the Go scheduler on one processor unless
	// the GOMAXPROCS environment variable is set, as the C tools the
	// command mirrors run one thread of work (see OneProc).
	OneProc bool
	// Flags declares the command's flags on fs and returns what runs the
	// command once they are parsed.
	Flags func(fs *FlagSet) Runner
}

// Runner runs a command with the arguments left after its flags; each
// run of a command has its own, so it need not be safe for concurrent
// use. It returns a *UsageError for a command line it cannot run, an *ExitError
// for a status of its own, or any other error for a failure.
type Runner func(ctx context.Context, env *Env, args []string) error

// Env is what a command reads and writes besides its arguments. Tests
// give their own; Stdio is the process's. A command only reads it, but
// its goroutines write to Stdout and Stderr at once: those writers must be
// safe for concurrent use (the process's standard streams are).
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// MemNet is the in-process network that --transport mem joins, for
	// tests that run both ends of a tool in one process; nil otherwise.
	MemNet *mem.Network
}

// Stdio returns the process's standard input, output and error.
func Stdio() *Env { return &Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr} }

// withDefaults returns env with the standard streams for what it lacks.
func (env *Env) withDefaults() *Env {
	e := Stdio()
	if env == nil {
		return e
	}
	c := *env
	if c.Stdin == nil {
		c.Stdin = e.Stdin
	}
	if c.Stdout == nil {
		c.Stdout = e.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = e.Stderr
	}
	return &c
}

// Name returns the command's name: the first word of its usage line.
func (c *Command) Name() string {
	name, _, _ := strings.Cut(strings.TrimSpace(c.UsageLine), " ")
	return name
}

// declare returns a flag set with the command's flags and its runner.
func (c *Command) declare() (*FlagSet, Runner) {
	fs := NewFlagSet(c.Style)
	var run Runner
	if c.Flags != nil {
		run = c.Flags(fs)
	}
	if run == nil {
		run = func(context.Context, *Env, []string) error {
			return fmt.Errorf("the command %q has nothing to run", c.Name())
		}
	}
	return fs, run
}

// Help writes the command's help to w: the usage line, Long and the
// flags.
func (c *Command) Help(w io.Writer) {
	fs, _ := c.declare()
	c.help(w, fs)
}

func (c *Command) help(w io.Writer, fs *FlagSet) {
	fmt.Fprintf(w, "usage: roce %s\n\n%s", c.UsageLine, c.Long)
	fs.PrintDefaults(w)
}

// Parse parses args (the arguments after the command's name) as c's
// flags and returns what Run would report before running the command: a
// *UsageError for a command line that does not parse, nil otherwise (the
// help asked for too). It runs nothing: tests check documented command
// lines with it.
func (c *Command) Parse(args []string) error {
	if c == nil {
		return errors.New("no command")
	}
	fs, _ := c.declare()
	if err := fs.Parse(args); err != nil && !errors.Is(err, ErrHelp) {
		return err
	}
	return nil
}

// Run runs command c with args (the arguments after its name) and returns
// its exit status: it parses the flags, prints the help on -h, runs the
// command, and reports a failure on env's standard error (Report).
func Run(ctx context.Context, c *Command, env *Env, args []string) int {
	env = env.withDefaults()
	if c == nil {
		fmt.Fprintln(env.Stderr, "roce: no command to run")
		return ExitFailure
	}
	fs, run := c.declare()
	err := fs.Parse(args)
	if errors.Is(err, ErrHelp) {
		c.help(env.Stdout, fs)
		return ExitOK
	}
	if err == nil {
		err = run(ctx, env, fs.Args())
	}
	return Report(env.Stderr, c.Name(), err)
}

// Main is the roce command: it runs the command of cmds that args[0]
// names with the rest of args, or prints the help roce help asks for, and
// returns the exit status. A mistyped name gets a suggestion.
func Main(cmds []*Command, args []string, env *Env) int {
	env = env.withDefaults()
	if len(args) == 0 {
		usage(env.Stderr, cmds)
		return ExitUsage
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		return help(cmds, args[1:], env)
	default:
		if c := lookup(cmds, name); c != nil {
			if c.OneProc {
				OneProc()
			}
			return Run(context.Background(), c, env, args[1:])
		}
		fmt.Fprintf(env.Stderr, "roce: unknown command %q\n", name)
		if s := suggest(cmds, name); s != "" {
			fmt.Fprintf(env.Stderr, "Did you mean %q?\n", s)
		}
		fmt.Fprintln(env.Stderr, "Run 'roce help' for the list of commands.")
		return ExitUsage
	}
}

// help is roce help [command].
func help(cmds []*Command, args []string, env *Env) int {
	if len(args) == 0 {
		usage(env.Stdout, cmds)
		return ExitOK
	}
	if c := lookup(cmds, args[0]); c != nil {
		c.Help(env.Stdout)
		return ExitOK
	}
	fmt.Fprintf(env.Stderr, "roce help: unknown command %q\n", args[0])
	usage(env.Stderr, cmds)
	return ExitUsage
}

func lookup(cmds []*Command, name string) *Command {
	for _, c := range cmds {
		if c != nil && c.Name() == name {
			return c
		}
	}
	return nil
}

// usage lists the commands.
func usage(w io.Writer, cmds []*Command) {
	fmt.Fprintln(w, "roce is the goroce RoCEv2 tool.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintln(w, "  roce <command> [flags] [args]")
	fmt.Fprintln(w, "  roce help <command>")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range cmds {
		if c != nil {
			fmt.Fprintf(w, "  %-10s %s\n", c.Name(), c.Short)
		}
	}
}

// suggest returns the command name meant by a mistyped name: the one
// command it is a prefix of, or else the one command closest to it, at most
// two edits away. It returns "" when there is no such single command.
func suggest(cmds []*Command, name string) string {
	if name == "" {
		return ""
	}
	best, bestScore, tie := "", 3, false
	for _, c := range cmds {
		if c == nil {
			continue
		}
		score := editDistance(c.Name(), name)
		if strings.HasPrefix(c.Name(), name) {
			score = 0
		}
		switch {
		case score < bestScore:
			best, bestScore, tie = c.Name(), score, false
		case score == bestScore:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, with the
// transposition of two neighbouring letters one edit (bnid: bind), as
// typists make them.
func editDistance(a, b string) int {
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d := min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d = min(d, rows[i-2][j-2]+1)
			}
			rows[i][j] = d
		}
	}
	return rows[len(a)][len(b)]
}

// OneProc runs the Go scheduler on one processor, unless the GOMAXPROCS
// environment variable is set: like the C tools they mirror, roce perf
// and roce pingpong do one stream of work, whose goroutines (the
// program's, the receive loop) hand over to each other more cheaply on
// one processor than across threads, and idle processors looking for
// work would take CPU from the kernel's network path and the peer. On two
// cores, with both ends on one host, 64 KiB WRITEs move about 15 % more
// this way.
func OneProc() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
