package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/cli"
)

func run(args []string, stdout, stderr *bytes.Buffer) int {
	return cli.Main(commands, args, &cli.Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr})
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring of stdout
		stderr     string // substring of stderr
		stderrOnly bool   // stdout must be empty
	}{
		{"NoArgs", nil, cli.ExitUsage, "", "\n  decode     print the RoCEv2 packets", true},
		{"Help", []string{"help"}, cli.ExitOK, "\n  decode     print the RoCEv2 packets", "", false},
		{"HelpBench", []string{"help"}, cli.ExitOK, "\n  bench      compare roce perf", "", false},
		{"DashHelp", []string{"--help"}, cli.ExitOK, "roce <command>", "", false},
		{"HelpDecode", []string{"help", "decode"}, cli.ExitOK, "usage: roce decode [--json | --flows | --diagram[=html]] [--roce-port PORT] FILE...", "", false},
		{"HelpPerfFlags", []string{"help", "perf"}, cli.ExitOK, "  -A, --atomic_type type\n", "", false},
		// One entry per flag, all its names, one default, --long spellings.
		{"HelpPerfDefaults", []string{"help", "perf"}, cli.ExitOK, "  -f, --margin seconds\n    \twith -D, seconds left out of the measurement at each end (default D/4)\n", "", false},
		{"HelpServerBind", []string{"help", "server"}, cli.ExitOK, "  --bind address\n", "", false},
		{"HelpServerModes", []string{"help"}, cli.ExitOK, "(reqresp, writeread, minimal, write-imm, send, write, read, lambda, flush, params)", "", false},
		{"FlagTypo", []string{"demo", "--trasnport", "mem"}, cli.ExitUsage, "", "(did you mean --transport?)", true},
		{"HelpUnknown", []string{"help", "nope"}, cli.ExitUsage, "", `unknown command "nope"`, true},
		{"Unknown", []string{"frobnicate"}, cli.ExitUsage, "", "roce: unknown command \"frobnicate\"\nRun 'roce help'", true},
		{"SuggestPrefix", []string{"decod"}, cli.ExitUsage, "", `Did you mean "decode"?`, true},
		{"SuggestTypo", []string{"decoed"}, cli.ExitUsage, "", `Did you mean "decode"?`, true},
		{"Decode", []string{"decode", "../../testdata/captures/rxe_host_rc_pingpong.pcap"}, cli.ExitOK,
			"9 0.004144 198.18.0.1:4791 -> 198.18.0.11:4791 RC_SEND_ONLY", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stdout %q\nstderr %q\nwant %q and %q", out.String(), errb.String(), tc.stdout, tc.stderr)
			}
			if tc.stderrOnly && out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}

// TestCommandTable checks that every command is complete, named once, and
// declares its flags without error; and that its help is what roce help
// prints for it.
func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands {
		name := c.Name()
		if name == "" || c.Short == "" || c.UsageLine == "" || c.Flags == nil || strings.Contains(c.Short, "\n") {
			t.Errorf("incomplete command %+v", c)
		}
		if seen[name] || name == "help" {
			t.Errorf("command %q defined twice", name)
		}
		seen[name] = true
		var help, dashH, errb bytes.Buffer
		if code := run([]string{"help", name}, &help, &errb); code != cli.ExitOK {
			t.Errorf("roce help %s: exit %d, %s", name, code, errb.String())
		}
		if code := run([]string{name, "-h"}, &dashH, &errb); code != cli.ExitOK || dashH.String() != help.String() {
			t.Errorf("roce %s -h: exit %d\n%s\nroce help %s:\n%s", name, code, dashH.String(), name, help.String())
		}
		if !strings.HasPrefix(help.String(), "usage: roce "+name+" ") {
			t.Errorf("roce help %s starts %.40q", name, help.String())
		}
		// Each flag once, with one default, spelled as the README does.
		heads := map[string]bool{}
		for _, line := range strings.Split(help.String(), "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("roce help %s: two defaults in %q", name, line)
			}
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  -") {
				for _, n := range f {
					n = strings.TrimSuffix(n, ",")
					if !strings.HasPrefix(n, "-") {
						break
					}
					if len(n) > 2 && n[1] != '-' {
						t.Errorf("roce help %s: %q spelled with one dash", name, n)
					}
					if heads[n] {
						t.Errorf("roce help %s: %s listed twice", name, n)
					}
					heads[n] = true
				}
			}
		}
	}
}

// TestREADMECommands parses every roce command line the README shows (in
// its shell blocks and its inline code), flags and all, as the command
// would: a renamed or removed flag fails here before a reader meets it.
func TestREADMECommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	inSh := false
	for _, l := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(l, "```sh"):
			inSh = true
		case strings.HasPrefix(l, "```"):
			inSh = false
		case inSh:
			lines = append(lines, l)
		default:
			for _, span := range inlineCode.FindAllStringSubmatch(l, -1) {
				lines = append(lines, span[1])
			}
		}
	}
	checked := 0
	for _, l := range lines {
		l, _, _ = strings.Cut(l, "#")
		l, _, _ = strings.Cut(l, ">")
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "roce" || strings.ContainsAny(l, "[]{}|") || strings.Contains(l, "...") {
			continue
		}
		c := findCommand(f[1])
		if c == nil {
			if f[1] != "help" {
				t.Errorf("README: %q: no command %q", l, f[1])
			}
			continue
		}
		if err := c.Parse(unquote(f[2:])); err != nil {
			t.Errorf("README: %q: %v", strings.TrimSpace(l), err)
		}
		checked++
	}
	if checked < 20 {
		t.Errorf("only %d roce command lines found in the README", checked)
	}
}

// inlineCode matches a `code span` of markdown.
var inlineCode = regexp.MustCompile("`(roce [^`]+)`")

func findCommand(name string) *cli.Command {
	for _, c := range commands {
		if c.Name() == name {
			return c
		}
	}
	return nil
}

// unquote joins the words of a shell's quoted argument ("hello world 789").
func unquote(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if q := a[0]; (q == '"' || q == '\'') && !(len(a) > 1 && a[len(a)-1] == q) {
			for i+1 < len(args) {
				i++
				a += " " + args[i]
				if strings.HasSuffix(args[i], string(q)) {
					break
				}
			}
		}
		out = append(out, strings.Trim(a, `"'`))
	}
	return out
}
