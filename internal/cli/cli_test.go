package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/roce"
)

// echo is a test command: it prints its flags and arguments, or fails as
// -fail says.
var echo = &Command{
	UsageLine: "echo [-n N] [-fail KIND] ARGS...",
	Short:     "print the arguments",
	Long:      "Echo prints its arguments.\n\n",
	Flags: func(fs *FlagSet) Runner {
		n := fs.Int(nil, 1, "repeat `N` times", "n")
		var fail string
		fs.String(&fail, "", "fail: usage, exit, silent or plain", "fail")
		_ = n
		return func(_ context.Context, env *Env, args []string) error {
			switch fail {
			case "usage":
				return Usagef("bad: %w", syscall.EINVAL)
			case "exit":
				return &ExitError{Code: 255, Err: errors.New("no peer")}
			case "silent":
				return &ExitError{Code: 130}
			case "plain":
				return errors.New("it broke")
			}
			fmt.Fprintln(env.Stdout, strings.Join(args, " "))
			return nil
		}
	},
}

var other = &Command{UsageLine: "decode FILE", Short: "decode", Flags: func(*FlagSet) Runner { return nil }}

func mainT(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main([]*Command{echo, other, nil}, args, &Env{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string // exact
	}{
		{[]string{"echo", "a", "b"}, ExitOK, "a b\n", ""},
		{[]string{"echo", "-fail", "usage"}, ExitUsage, "", "roce echo: bad: invalid argument\nRun 'roce help echo' for usage.\n"},
		{[]string{"echo", "-fail", "exit"}, 255, "", "roce echo: no peer\n"},
		{[]string{"echo", "-fail", "silent"}, 130, "", ""},
		{[]string{"echo", "-fail", "plain"}, ExitFailure, "", "roce echo: it broke\n"},
		{[]string{"echo", "-n"}, ExitUsage, "", "roce echo: flag needs an argument: -n\nRun 'roce help echo' for usage.\n"},
		{[]string{"decode"}, ExitFailure, "", "roce decode: the command \"decode\" has nothing to run\n"},
		{[]string{"echo", "-h"}, ExitOK, "usage: roce echo [-n N] [-fail KIND] ARGS...\n\nEcho prints its arguments.\n\n" +
			"  --fail string\n    \tfail: usage, exit, silent or plain\n  -n N\n    \trepeat N times (default 1)\n", ""},
		{[]string{"ech"}, ExitUsage, "", "roce: unknown command \"ech\"\nDid you mean \"echo\"?\nRun 'roce help' for the list of commands.\n"},
	} {
		code, stdout, stderr := mainT(tc.args...)
		if code != tc.code || stdout != tc.stdout || stderr != tc.stderr {
			t.Errorf("%q: exit %d\nstdout %q\nstderr %q\nwant %d %q %q", tc.args, code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestHelp(t *testing.T) {
	list := "roce is the goroce RoCEv2 tool.\n\nUsage:\n  roce <command> [flags] [args]\n  roce help <command>\n\n" +
		"Commands:\n  echo       print the arguments\n  decode     decode\n"
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, ExitUsage, "", list},
		{[]string{"help"}, ExitOK, list, ""},
		{[]string{"--help"}, ExitOK, list, ""},
		{[]string{"help", "nope"}, ExitUsage, "", "roce help: unknown command \"nope\"\n" + list},
	} {
		code, stdout, stderr := mainT(tc.args...)
		if code != tc.code || stdout != tc.stdout || stderr != tc.stderr {
			t.Errorf("%q: exit %d\nstdout %q\nstderr %q", tc.args, code, stdout, stderr)
		}
	}
	// roce help CMD is CMD -h.
	_, help, _ := mainT("help", "echo")
	_, dashH, _ := mainT("echo", "-h")
	if help != dashH || !strings.HasPrefix(help, "usage: roce echo") {
		t.Errorf("roce help echo:\n%s\nroce echo -h:\n%s", help, dashH)
	}
}

func TestRunNil(t *testing.T) {
	var errb bytes.Buffer
	if code := Run(context.Background(), nil, &Env{Stderr: &errb}, nil); code != ExitFailure || errb.Len() == 0 {
		t.Errorf("Run(nil command) = %d, %q", code, errb.String())
	}
	if code := Report(nil, "x", errors.New("e")); code != ExitFailure {
		t.Errorf("Report to a nil writer = %d", code)
	}
	if (*UsageError)(nil).Error() == "" || (*ExitError)(nil).Error() == "" || (&UsageError{}).Unwrap() != nil {
		t.Error("nil errors")
	}
}

func TestSuggest(t *testing.T) {
	cmds := []*Command{{UsageLine: "decode"}, {UsageLine: "demo"}, {UsageLine: "perf"}}
	for _, tc := range []struct{ in, want string }{
		{"decod", "decode"}, {"decoed", "decode"}, {"de", ""}, {"xyzzy", ""}, {"", ""}, {"pref", "perf"},
	} {
		if got := suggest(cmds, tc.in); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance(kitten, sitting) = %d, want 3", d)
	}
}

func TestDeviceConfig(t *testing.T) {
	for _, tc := range []struct {
		d    DeviceFlags
		def  string
		want string // error text, or the address
	}{
		{DeviceFlags{Transport: "udp", Port: bth.UDPPort}, "127.0.0.1", "127.0.0.1"},
		{DeviceFlags{Transport: "udp", Port: bth.UDPPort, Bind: "::ffff:10.0.0.1"}, "127.0.0.1", "10.0.0.1"},
		{DeviceFlags{Transport: "udp", Port: bth.UDPPort}, "", "invalid IP"},
		{DeviceFlags{Transport: "x", Port: bth.UDPPort}, "", `--transport must be udp, afpacket or mem, not "x"`},
		{DeviceFlags{Transport: "udp", Port: 0}, "", "--roce-port must be 1-65535"},
		{DeviceFlags{Transport: "mem", Port: 1}, "", "--transport mem joins ends in one process only"},
		{DeviceFlags{Transport: "udp", Port: 1, Bind: "no such host.invalid"}, "", "--bind: \"no such host.invalid\" is not an IP address"},
		{DeviceFlags{Transport: "udp", Port: 1, Paths: -1}, "", "--paths must be 1-64"},
		{DeviceFlags{Transport: "udp", Port: 1, Paths: 65}, "", "--paths must be 1-64"},
		{DeviceFlags{Transport: "afpacket", Port: 1, Paths: 2}, "", "--paths is for --transport udp; afpacket has one"},
	} {
		cfg, err := tc.d.Config(tc.def)
		got := ""
		if err != nil {
			got = err.Error()
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Errorf("%+v: %T is not a usage error", tc.d, err)
			}
		} else {
			got = cfg.Link.(*roce.UDP).Addr.String()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%+v %q: got %q, want %q", tc.d, tc.def, got, tc.want)
		}
	}
	d := DeviceFlags{Transport: "udp", Port: 1, Paths: 3}
	if cfg, err := d.Config("127.0.0.1"); err != nil || cfg.Link.(*roce.UDP).Paths != 3 {
		t.Errorf("--paths 3: %v, %+v", err, cfg)
	}
	if _, err := d.Open(nil, false, nil); err == nil {
		t.Error("Open(nil) succeeded")
	}
	if LocalAddr(nil).IsValid() {
		t.Error("LocalAddr(nil)")
	}
}

// TestOpenLoopbackClient: clients without --bind whose address would be
// the server's loopback one take the next free loopback addresses.
func TestOpenLoopbackClient(t *testing.T) {
	port := 0
	for range 50 {
		a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
		if err != nil {
			t.Skipf("no 127.0.0.2: %v", err)
		}
		p := a.LocalAddr().(*net.UDPAddr).Port
		b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3), Port: p})
		a.Close()
		if err == nil {
			b.Close()
			port = p
			break
		}
	}
	if port == 0 {
		t.Skip("no UDP port free on 127.0.0.2 and 127.0.0.3")
	}
	d := DeviceFlags{Transport: "udp", Port: uint(port)}
	var got []netip.Addr
	for range 2 {
		cfg, err := d.Config("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		dev, err := d.Open(cfg, true, nil)
		if err != nil {
			t.Fatalf("client %d: %v", len(got), err)
		}
		defer dev.Close()
		if a := cfg.Link.(*roce.UDP).Addr; a != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("Open changed the caller's configuration to %v", a)
		}
		got = append(got, dev.Addr())
	}
	if got[0] != netip.MustParseAddr("127.0.0.2") || got[1] != netip.MustParseAddr("127.0.0.3") {
		t.Errorf("clients at %v, want 127.0.0.2 and 127.0.0.3", got)
	}
}
