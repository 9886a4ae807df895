package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring of stdout
		stderr     string // substring of stderr
		stderrOnly bool   // stdout must be empty
	}{
		{"NoArgs", nil, exitUsage, "", "\n  decode     print the RoCEv2 packets", true},
		{"Help", []string{"help"}, exitOK, "\n  decode     print the RoCEv2 packets", "", false},
		{"DashHelp", []string{"--help"}, exitOK, "roce <command>", "", false},
		{"HelpDecode", []string{"help", "decode"}, exitOK, "usage: roce decode [--json | --flows] FILE...", "", false},
		{"HelpUnknown", []string{"help", "nope"}, exitUsage, "", `unknown command "nope"`, true},
		{"Unknown", []string{"frobnicate"}, exitUsage, "", "roce: unknown command \"frobnicate\"\nRun 'roce help'", true},
		{"SuggestPrefix", []string{"decod"}, exitUsage, "", `Did you mean "decode"?`, true},
		{"SuggestTypo", []string{"decoed"}, exitUsage, "", `Did you mean "decode"?`, true},
		{"Decode", []string{"decode", "../../testdata/captures/rxe_host_rc_pingpong.pcap"}, exitOK,
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

func TestSuggest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"decod", "decode"}, {"decoed", "decode"}, {"xyzzy", ""}, {"", ""},
	} {
		if got := suggest(tc.in); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance(kitten, sitting) = %d, want 3", d)
	}
}

// TestCommandTable checks that every command is complete and named once.
func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands {
		if c.name == "" || c.summary == "" || c.usage == "" || c.run == nil || strings.Contains(c.summary, "\n") {
			t.Errorf("incomplete command %+v", c)
		}
		if seen[c.name] || c.name == "help" {
			t.Errorf("command %q defined twice", c.name)
		}
		seen[c.name] = true
	}
}
