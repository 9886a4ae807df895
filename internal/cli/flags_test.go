package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// vals are the variables of the test flags.
type vals struct {
	b, v    bool
	n       int
	u       uint
	u64     uint64
	f       float64
	s, long string
	d       time.Duration
}

func (v *vals) String() string {
	return fmt.Sprintf("b=%v v=%v n=%d u=%d u64=%d f=%g s=%q long=%q d=%v", v.b, v.v, v.n, v.u, v.u64, v.f, v.s, v.long, v.d)
}

// declare declares the test flags on a FlagSet.
func (v *vals) declare(fs *FlagSet) {
	fs.Bool(&v.b, false, "a bool", "b")
	fs.Bool(&v.v, false, "verbose", "v", "verbose")
	fs.Int(&v.n, 7, "a `count`", "n", "count")
	fs.Uint(&v.u, 0, "a uint", "u")
	fs.Uint64(&v.u64, 1, "a uint64", "u64")
	fs.Float64(&v.f, 0.5, "a fraction", "f")
	fs.String(&v.s, "x", "a string", "s", "size")
	fs.String(&v.long, "", "a long one", "long-name")
	fs.Duration(&v.d, time.Second, "a duration", "d")
}

// declareStd declares the same flags on Go's flag package, every name on
// its own.
func (v *vals) declareStd(fs *flag.FlagSet) {
	fs.BoolVar(&v.b, "b", false, "a bool")
	for _, n := range []string{"v", "verbose"} {
		fs.BoolVar(&v.v, n, false, "verbose")
	}
	for _, n := range []string{"n", "count"} {
		fs.IntVar(&v.n, n, 7, "a `count`")
	}
	fs.UintVar(&v.u, "u", 0, "a uint")
	fs.Uint64Var(&v.u64, "u64", 1, "a uint64")
	fs.Float64Var(&v.f, "f", 0.5, "a fraction")
	for _, n := range []string{"s", "size"} {
		fs.StringVar(&v.s, n, "x", "a string")
	}
	fs.StringVar(&v.long, "long-name", "", "a long one")
	fs.DurationVar(&v.d, "d", time.Second, "a duration")
}

// TestStdMatchesFlag checks the StdFlags parser against Go's flag package,
// the reference: the same values, arguments left and error text.
func TestStdMatchesFlag(t *testing.T) {
	for _, line := range []string{
		"", "-b", "--b", "-b=false", "-b=maybe", "-n 5", "-n=5", "--n=5", "--count 9 rest", "-n", "-n x",
		"-n 99999999999999999999", "-u -1", "-f 0.25", "-d 3s", "-d nope", "-s hello -long-name=a=b", "-x", "--x=1",
		"-h", "-help", "--help", "---x", "-=x", "-- -b", "-v -verbose=false",
		"-u64 18446744073709551615", "-n -5",
	} {
		args := strings.Fields(line)
		var got, want vals
		fs := NewFlagSet(StdFlags)
		got.declare(fs)
		gerr := fs.Parse(args)
		ref := flag.NewFlagSet("ref", flag.ContinueOnError)
		ref.SetOutput(io.Discard)
		want.declareStd(ref)
		werr := ref.Parse(args)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Errorf("%q: error %v, flag package says %v", line, gerr, werr)
		}
		if werr != nil && !errors.Is(werr, flag.ErrHelp) {
			var ue *UsageError
			if !errors.As(gerr, &ue) {
				t.Errorf("%q: %T is not a *UsageError", line, gerr)
			}
			continue
		}
		if got.String() != want.String() || fmt.Sprint(fs.Args()) != fmt.Sprint(ref.Args()) {
			t.Errorf("%q: %v %q, flag package: %v %q", line, &got, fs.Args(), &want, ref.Args())
		}
	}
}

// TestStdPermutes: StdFlags takes flags after arguments too, as getopt
// does (Go's flag package stops at the first argument), until "--".
func TestStdPermutes(t *testing.T) {
	for _, tc := range []struct{ line, want, args string }{
		{"arg -b", `b=true v=false n=7 u=0 u64=1 f=0.5 s="x" long="" d=1s`, "[arg]"},
		{"-b arg -n 3", `b=true v=false n=3 u=0 u64=1 f=0.5 s="x" long="" d=1s`, "[arg]"},
		{"- -b", `b=true v=false n=7 u=0 u64=1 f=0.5 s="x" long="" d=1s`, "[-]"},
		{"a --size 5 b -- -n 1", `b=false v=false n=7 u=0 u64=1 f=0.5 s="5" long="" d=1s`, "[a b -n 1]"},
	} {
		var v vals
		fs := NewFlagSet(StdFlags)
		v.declare(fs)
		if err := fs.Parse(strings.Fields(tc.line)); err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if v.String() != tc.want || fmt.Sprint(fs.Args()) != tc.args {
			t.Errorf("%q:\n got %v %q\nwant %s %s", tc.line, &v, fs.Args(), tc.want, tc.args)
		}
	}
}

// TestDidYouMean: a mistyped flag of three letters or more is told the
// one flag it is close to, in the help's spelling.
func TestDidYouMean(t *testing.T) {
	for _, style := range []Style{StdFlags, Getopt} {
		for line, want := range map[string]string{
			"--bnid x":     "flag provided but not defined: -bnid (did you mean --bind?)",
			"--verbos":     "flag provided but not defined: -verbos (did you mean --verbose?)",
			"-cuont=1":     "flag provided but not defined: -cuont (did you mean --count?)",
			"--long 3":     "flag provided but not defined: -long (did you mean --long-name?)",
			"--trasnport":  "flag provided but not defined: -trasnport (did you mean --transport?)",
			"--zzzzzz":     "flag provided but not defined: -zzzzzz",
			"--hidden-one": "flag provided but not defined: -hidden-one",
		} {
			var v vals
			fs := NewFlagSet(style)
			v.declare(fs)
			fs.String(nil, "", "", "bind")
			fs.String(nil, "udp", "", "transport")
			fs.Bool(nil, false, "", "hidden-ones").Hide()
			err := fs.Parse(strings.Fields(line))
			if fmt.Sprint(err) != want {
				t.Errorf("style %d, %q: %v, want %q", style, line, err, want)
			}
		}
	}
}

func TestGetopt(t *testing.T) {
	for _, tc := range []struct {
		line, want, args, err string
	}{
		{line: "host -n5 --size=100 -v", want: `b=false v=true n=5 u=0 u64=1 f=0.5 s="100" long="" d=1s`, args: "[host]"},
		{line: "-n 5 a -- -b", want: `b=false v=false n=5 u=0 u64=1 f=0.5 s="x" long="" d=1s`, args: "[a -b]"},
		{line: "-bv -n3", want: `b=true v=true n=3 u=0 u64=1 f=0.5 s="x" long="" d=1s`, args: "[]"},
		{line: "-bvn3 x", want: `b=true v=true n=3 u=0 u64=1 f=0.5 s="x" long="" d=1s`, args: "[x]"},
		{line: "-bvn 4", want: `b=true v=true n=4 u=0 u64=1 f=0.5 s="x" long="" d=1s`, args: "[]"},
		{line: "-size 9 -count=2 -verbose", want: `b=false v=true n=2 u=0 u64=1 f=0.5 s="9" long="" d=1s`, args: "[]"},
		{line: "--long-name v -s=3", want: `b=false v=false n=7 u=0 u64=1 f=0.5 s="3" long="v" d=1s`, args: "[]"},
		{line: "-n -5", want: `b=false v=false n=-5 u=0 u64=1 f=0.5 s="x" long="" d=1s`, args: "[]"},
		{line: "-d2s -", want: `b=false v=false n=7 u=0 u64=1 f=0.5 s="x" long="" d=2s`, args: "[-]"},
		{line: "-zap", err: "flag provided but not defined: -zap"},
		{line: "-nope", err: `invalid value "ope" for flag -n: parse error`},
		{line: "--nope=1", err: "flag provided but not defined: -nope"},
		{line: "-x=1", err: "flag provided but not defined: -x"},
		{line: "-bx", err: "flag provided but not defined: -x (in -bx)"},
		{line: "-nx", err: `invalid value "x" for flag -n: parse error`},
		{line: "-bn", err: "flag needs an argument: -n"},
		{line: "--count", err: "flag needs an argument: -count"},
		{line: "-b=maybe", err: `invalid boolean value "maybe" for -b: parse error`},
		{line: "-h", err: "flag: help requested"},
		{line: "a --help", err: "flag: help requested"},
		{line: "-help", err: "flag: help requested"},
	} {
		var v vals
		fs := NewFlagSet(Getopt)
		v.declare(fs)
		err := fs.Parse(strings.Fields(tc.line))
		if fmt.Sprint(err) != fmt.Sprint(map[bool]any{true: nil, false: tc.err}[tc.err == ""]) {
			t.Errorf("%q: error %v, want %q", tc.line, err, tc.err)
			continue
		}
		if err != nil {
			var ue *UsageError
			if !errors.Is(err, ErrHelp) && !errors.As(err, &ue) {
				t.Errorf("%q: %T is not a *UsageError", tc.line, err)
			}
			continue
		}
		if v.String() != tc.want || fmt.Sprint(fs.Args()) != tc.args {
			t.Errorf("%q:\n got %v %q\nwant %s %s", tc.line, &v, fs.Args(), tc.want, tc.args)
		}
	}
}

func TestIsSet(t *testing.T) {
	var v vals
	fs := NewFlagSet(Getopt)
	v.declare(fs)
	if err := fs.Parse([]string{"--size", "1", "-v"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"s": true, "size": true, "verbose": true, "n": false, "count": false, "nope": false} {
		if got := fs.IsSet(name); got != want {
			t.Errorf("IsSet(%q) = %v, want %v", name, got, want)
		}
	}
	if !fs.IsSet("n", "v") || fs.IsSet() {
		t.Error("IsSet of several names")
	}
	if fs.Arg(0) != "" || fs.Arg(-1) != "" || fs.NArg() != 0 {
		t.Error("arguments where there are none")
	}
}

// TestDeclarationErrors: a flag set declared wrongly fails its Parse with
// a plain error (the command's bug), not a usage error, and nothing
// panics.
func TestDeclarationErrors(t *testing.T) {
	for name, declare := range map[string]func(fs *FlagSet){
		"twice":    func(fs *FlagSet) { fs.Int(nil, 0, "", "n"); fs.Bool(nil, false, "", "x", "n") },
		"no name":  func(fs *FlagSet) { fs.String(nil, "", "") },
		"dash":     func(fs *FlagSet) { fs.Uint(nil, 0, "", "-n") },
		"equals":   func(fs *FlagSet) { fs.Duration(nil, 0, "", "a=b") },
		"no value": func(fs *FlagSet) { fs.Var(nil, "", "v") },
	} {
		fs := NewFlagSet(StdFlags)
		declare(fs)
		var ue *UsageError
		if err := fs.Parse(nil); err == nil || errors.As(err, &ue) {
			t.Errorf("%s: Parse returned %v", name, err)
		}
	}
	var nilFlag *Flag
	if nilFlag.Arg("X").Hide() != nil {
		t.Error("methods of a nil *Flag")
	}
}

// TestStdHelp: the StdFlags help is Go's flag.PrintDefaults, but with
// each flag once, all its names beside each other as the README spells
// them, and a default the usage already states not added again.
func TestStdHelp(t *testing.T) {
	var v vals
	fs := NewFlagSet(Getopt) // the style of parsing does not change the help
	v.declare(fs)
	fs.Bool(nil, false, "not shown", "hidden").Hide()
	fs.Int(nil, -1, "GID `index` (default: the device's)", "x", "gid-index")
	fs.Section("ignored in this style")
	if err := fs.Parse([]string{"-n", "3"}); err != nil { // help shows defaults, not values
		t.Fatal(err)
	}
	var got bytes.Buffer
	fs.PrintDefaults(&got)
	want := `  -b	a bool
  -n, --count count
    	a count (default 7)
  -d duration
    	a duration (default 1s)
  -f float
    	a fraction (default 0.5)
  -x, --gid-index index
    	GID index (default: the device's)
  --long-name string
    	a long one
  -s, --size string
    	a string (default "x")
  -u uint
    	a uint
  --u64 uint
    	a uint64 (default 1)
  -v, --verbose
    	verbose
`
	if got.String() != want {
		t.Errorf("help:\n%s\nwant:\n%s", got.String(), want)
	}
}

func TestTableHelp(t *testing.T) {
	fs := NewFlagSet(Getopt)
	fs.SetLayout(FlagTable)
	fs.Bool(nil, false, "server side", "s")
	fs.String(nil, "", "the address\non two lines", "a").Arg("ADDR")
	fs.Bool(nil, false, "not shown", "P").Hide()
	fs.Section("more:")
	fs.Int(nil, 0, "both spellings", "n", "iters").Arg("N")
	fs.String(nil, "", "a very long name", "a-very-long-name-indeed").Arg("X")
	fs.Section("The end.")
	var b bytes.Buffer
	fs.PrintDefaults(&b)
	want := `  -s              server side
  -a ADDR         the address
                  on two lines
more:
  -n, --iters N   both spellings
  --a-very-long-name-indeed X a very long name
The end.
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
