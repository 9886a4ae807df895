package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// Style is how a command line reads. It is a plain value, safe for
// concurrent use.
type Style int

const (
	// StdFlags reads a command line as Go's flag package reads its
	// flags (-name or --name, the value after = or as the next argument),
	// but, as getopt_long does, flags and arguments in any order until
	// "--": roce client --mode minimal SERVER --bind ADDR.
	StdFlags Style = iota
	// Getopt reads it as getopt_long does for rdma-core's, perftest's and
	// librdmacm's tools: flags and arguments in any order, a short flag's
	// value attached (-n5) or next (-n 5), short flags bundled (-vV, -cvC5),
	// long flags with two dashes or one (--size=5, -size 5).
	Getopt
)

// Layout is how PrintDefaults lays a command's flags out. It is a plain
// value, safe for concurrent use.
type Layout int

const (
	// FlagList lists every name of every flag on its own, sorted, with
	// its type or `quoted` value name and its default, as Go's flag
	// package does.
	FlagList Layout = iota
	// FlagTable is a table in declaration order, as C tools print their
	// usage: "-x ARG" for one-letter names, "--name ARG" for the others,
	// the usage beside it, and section titles between.
	FlagTable
)

// ErrHelp is what Parse returns for -h, -help and --help when the command
// does not define them: the caller prints the help and exits 0.
var ErrHelp = flag.ErrHelp

// FlagSet is one command's flags and the one parser that reads them in
// either Style. Flags are declared with the typed methods (Bool, Int, ...),
// each under one or more names (a short and a long spelling of one flag),
// and parsed once. It is not safe for concurrent use.
type FlagSet struct {
	style  Style
	layout Layout
	flags  []*Flag
	items  []helpItem // flags and section titles, in declaration order
	byName map[string]*Flag
	args   []string
	err    error // a declaration error, reported by Parse
}

// helpItem is one line group of the table help: a flag or a title.
type helpItem struct {
	flag  *Flag
	title string
}

// Flag is one declared flag. It belongs to its FlagSet and, like it, is
// not safe for concurrent use.
type Flag struct {
	// Names are the flag's spellings, without dashes; the first is the
	// one its help shows first.
	Names []string
	// Usage is its help text. In StdFlags help, a `quoted` word names the
	// value, as in Go's flag package.
	Usage string
	// Value holds the flag's value; DefValue is its default as text.
	Value    flag.Value
	DefValue string
	argName  string
	hidden   bool
	set      bool
}

// NewFlagSet returns an empty flag set that parses in style.
func NewFlagSet(style Style) *FlagSet {
	return &FlagSet{style: style, byName: map[string]*Flag{}}
}

// SetLayout sets how PrintDefaults lays the flags out (FlagList by
// default).
func (fs *FlagSet) SetLayout(l Layout) { fs.layout = l }

// Arg sets the name the table help gives the flag's value ("ADDR") and
// returns f.
func (f *Flag) Arg(name string) *Flag {
	if f != nil {
		f.argName = name
	}
	return f
}

// Hide keeps f out of the help (a flag accepted only to be refused with a
// better message) and returns f.
func (f *Flag) Hide() *Flag {
	if f != nil {
		f.hidden = true
	}
	return f
}

// Var declares a flag of any flag.Value under names. The value's current
// text is its default.
func (fs *FlagSet) Var(v flag.Value, usage string, names ...string) *Flag {
	f := &Flag{Names: names, Usage: usage, Value: v}
	if v == nil {
		fs.fail(fmt.Errorf("flag %v declared without a value", names))
		return f
	}
	f.DefValue = v.String()
	if len(names) == 0 {
		fs.fail(errors.New("a flag declared without a name"))
		return f
	}
	for _, n := range names {
		if n == "" || strings.HasPrefix(n, "-") || strings.Contains(n, "=") {
			fs.fail(fmt.Errorf("bad flag name %q", n))
			return f
		}
		if fs.byName[n] != nil {
			fs.fail(fmt.Errorf("flag -%s declared twice", n))
			return f
		}
	}
	for _, n := range names {
		fs.byName[n] = f
	}
	fs.flags = append(fs.flags, f)
	fs.items = append(fs.items, helpItem{flag: f})
	return f
}

func (fs *FlagSet) fail(err error) {
	if fs.err == nil {
		fs.err = err
	}
}

// std declares one flag through a scratch flag.FlagSet, so that values
// parse, print and report errors exactly as Go's flag package does.
func (fs *FlagSet) std(def func(s *flag.FlagSet), usage string, names []string) *Flag {
	var s flag.FlagSet
	def(&s)
	return fs.Var(s.Lookup("v").Value, usage, names...)
}

// Bool declares a bool flag stored in p (allocated when nil).
func (fs *FlagSet) Bool(p *bool, def bool, usage string, names ...string) *Flag {
	if p == nil {
		p = new(bool)
	}
	return fs.std(func(s *flag.FlagSet) { s.BoolVar(p, "v", def, usage) }, usage, names)
}

// Int declares an int flag stored in p (allocated when nil).
func (fs *FlagSet) Int(p *int, def int, usage string, names ...string) *Flag {
	if p == nil {
		p = new(int)
	}
	return fs.std(func(s *flag.FlagSet) { s.IntVar(p, "v", def, usage) }, usage, names)
}

// Uint declares a uint flag stored in p (allocated when nil).
func (fs *FlagSet) Uint(p *uint, def uint, usage string, names ...string) *Flag {
	if p == nil {
		p = new(uint)
	}
	return fs.std(func(s *flag.FlagSet) { s.UintVar(p, "v", def, usage) }, usage, names)
}

// Uint64 declares a uint64 flag stored in p (allocated when nil).
func (fs *FlagSet) Uint64(p *uint64, def uint64, usage string, names ...string) *Flag {
	if p == nil {
		p = new(uint64)
	}
	return fs.std(func(s *flag.FlagSet) { s.Uint64Var(p, "v", def, usage) }, usage, names)
}

// Float64 declares a float64 flag stored in p (allocated when nil).
func (fs *FlagSet) Float64(p *float64, def float64, usage string, names ...string) *Flag {
	if p == nil {
		p = new(float64)
	}
	return fs.std(func(s *flag.FlagSet) { s.Float64Var(p, "v", def, usage) }, usage, names)
}

// String declares a string flag stored in p (allocated when nil).
func (fs *FlagSet) String(p *string, def string, usage string, names ...string) *Flag {
	if p == nil {
		p = new(string)
	}
	return fs.std(func(s *flag.FlagSet) { s.StringVar(p, "v", def, usage) }, usage, names)
}

// Duration declares a time.Duration flag stored in p (allocated when nil).
func (fs *FlagSet) Duration(p *time.Duration, def time.Duration, usage string, names ...string) *Flag {
	if p == nil {
		p = new(time.Duration)
	}
	return fs.std(func(s *flag.FlagSet) { s.DurationVar(p, "v", def, usage) }, usage, names)
}

// Section starts a group of flags under title in the FlagTable help; the
// FlagList help ignores it. A title after the last flag ends the help.
func (fs *FlagSet) Section(title string) {
	fs.items = append(fs.items, helpItem{title: title})
}

// Args returns the arguments left after the flags.
func (fs *FlagSet) Args() []string { return fs.args }

// NArg returns the number of arguments left after the flags.
func (fs *FlagSet) NArg() int { return len(fs.args) }

// Arg returns argument i left after the flags, or "" when there is none.
func (fs *FlagSet) Arg(i int) string {
	if i < 0 || i >= len(fs.args) {
		return ""
	}
	return fs.args[i]
}

// IsSet reports whether the command line set the flag of any of names.
func (fs *FlagSet) IsSet(names ...string) bool {
	for _, n := range names {
		if f := fs.byName[n]; f != nil && f.set {
			return true
		}
	}
	return false
}

// Lookup returns the flag of name, or nil.
func (fs *FlagSet) Lookup(name string) *Flag { return fs.byName[name] }

// Parse reads args. It returns ErrHelp for a help flag the command does
// not define, a *UsageError for a command line that does not parse, and
// an error of its own when the command declared its flags wrongly.
func (fs *FlagSet) Parse(args []string) error {
	if fs.err != nil {
		return fmt.Errorf("the command's flags: %w", fs.err)
	}
	fs.args = nil
	var err error
	if fs.style == Getopt {
		err = fs.parseGetopt(args)
	} else {
		err = fs.parseStd(args)
	}
	if err != nil && !errors.Is(err, ErrHelp) {
		return &UsageError{Err: err}
	}
	return err
}

// parseStd reads Go's flag syntax, with flags and arguments in any
// order; "--" ends the flags, and "-" alone is an argument.
func (fs *FlagSet) parseStd(args []string) error {
	for len(args) > 0 {
		s := args[0]
		if len(s) < 2 || s[0] != '-' {
			fs.args = append(fs.args, s)
			args = args[1:]
			continue
		}
		dashes := 1
		if s[1] == '-' {
			dashes++
			if len(s) == 2 {
				fs.args = append(fs.args, args[1:]...)
				return nil
			}
		}
		name := s[dashes:]
		if name == "" || name[0] == '-' || name[0] == '=' {
			return fmt.Errorf("bad flag syntax: %s", s)
		}
		var err error
		if args, err = fs.one(name, args[1:]); err != nil {
			return err
		}
	}
	return nil
}

// parseGetopt reads flags and arguments in any order; "--" ends the flags.
func (fs *FlagSet) parseGetopt(args []string) error {
	for len(args) > 0 {
		s := args[0]
		args = args[1:]
		switch {
		case s == "--":
			fs.args = append(fs.args, args...)
			return nil
		case len(s) < 2 || s[0] != '-':
			fs.args = append(fs.args, s)
			continue
		}
		var err error
		name := strings.TrimLeft(s, "-")
		long, _, _ := strings.Cut(name, "=")
		if s[1] == '-' || fs.byName[long] != nil || long == "h" || long == "help" || len(name) == 1 ||
			strings.Contains(name, "=") {
			args, err = fs.one(name, args)
		} else {
			args, err = fs.bundle(name, args)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// one sets the flag of name ("name" or "name=value"), taking its value
// from rest when it needs one and has none; it returns what rest is left.
func (fs *FlagSet) one(name string, rest []string) ([]string, error) {
	name, value, hasValue := strings.Cut(name, "=")
	f := fs.byName[name]
	if f == nil {
		if name == "help" || name == "h" {
			return rest, ErrHelp
		}
		return rest, fmt.Errorf("flag provided but not defined: -%s%s", name, fs.didYouMean(name))
	}
	if isBool(f) {
		if !hasValue {
			value = "true"
		}
		if err := f.Value.Set(value); err != nil {
			if !hasValue {
				return rest, fmt.Errorf("invalid boolean flag %s: %v", name, err)
			}
			return rest, fmt.Errorf("invalid boolean value %q for -%s: %v", value, name, err)
		}
		f.set = true
		return rest, nil
	}
	if !hasValue {
		if len(rest) == 0 {
			return rest, fmt.Errorf("flag needs an argument: -%s", name)
		}
		value, rest = rest[0], rest[1:]
	}
	return rest, fs.set(f, name, value)
}

// bundle reads a group of short flags after one dash: bool flags, the
// last of which may be one that takes a value, attached (-C5, -vC5) or
// next.
func (fs *FlagSet) bundle(group string, rest []string) ([]string, error) {
	for i := 0; i < len(group); i++ {
		name := group[i : i+1]
		f := fs.byName[name]
		switch {
		case f == nil && i == 0:
			return rest, fmt.Errorf("flag provided but not defined: -%s%s", group, fs.didYouMean(group))
		case f == nil:
			return rest, fmt.Errorf("flag provided but not defined: -%s (in -%s)", name, group)
		case isBool(f):
			if err := f.Value.Set("true"); err != nil {
				return rest, fmt.Errorf("invalid boolean flag %s: %v", name, err)
			}
			f.set = true
			continue
		}
		value := group[i+1:]
		if value == "" {
			if len(rest) == 0 {
				return rest, fmt.Errorf("flag needs an argument: -%s", name)
			}
			value, rest = rest[0], rest[1:]
		}
		return rest, fs.set(f, name, value)
	}
	return rest, nil
}

func (fs *FlagSet) set(f *Flag, name, value string) error {
	if err := f.Value.Set(value); err != nil {
		return fmt.Errorf("invalid value %q for flag -%s: %v", value, name, err)
	}
	f.set = true
	return nil
}

func isBool(f *Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// didYouMean returns " (did you mean --NAME?)" for a mistyped flag name
// of three letters or more: the one visible flag whose name it begins, or
// that begins it, or else the one closest to it (an edit or two away, one
// for names of four letters or less); "" when no single flag is.
func (fs *FlagSet) didYouMean(name string) string {
	if len(name) < 3 {
		return ""
	}
	limit := 2
	if len(name) <= 4 {
		limit = 1
	}
	best, bestScore, tie := "", limit+1, false
	seen := map[*Flag]bool{}
	for _, f := range fs.flags {
		if f.hidden || seen[f] {
			continue
		}
		seen[f] = true
		score := limit + 1
		for _, n := range f.Names {
			d := editDistance(n, name)
			if len(n) >= 3 && (strings.HasPrefix(n, name) || strings.HasPrefix(name, n)) {
				d = 0
			}
			score = min(score, d)
		}
		switch {
		case score < bestScore:
			best, bestScore, tie = spell(f.long()), score, false
		case score == bestScore && score <= limit:
			tie = true
		}
	}
	if best == "" || tie {
		return ""
	}
	return " (did you mean " + best + "?)"
}

// long returns the flag's longest name, the one its help sorts by.
func (f *Flag) long() string {
	l := f.Names[0]
	for _, n := range f.Names {
		if len(n) > len(l) {
			l = n
		}
	}
	return l
}

// spell writes a flag name as the README and the help do: -x for one
// letter, --name for the others.
func spell(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
