package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// PrintDefaults writes the help of the flags to w, in the set's Layout:
// a list sorted by name (FlagList), or a table in declaration order with
// the usage's line breaks indented (FlagTable). Hidden flags are left out
// of both. The list is Go's flag package's, but each flag is one entry
// with all its names, spelled as the README writes them (-v, --trace),
// and its default once: not at all when the usage already says it.
func (fs *FlagSet) PrintDefaults(w io.Writer) {
	if fs.layout == FlagTable {
		fs.printTable(w)
		return
	}
	var list []*Flag
	for _, f := range fs.flags {
		if !f.hidden {
			list = append(list, f)
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].long() < list[j].long() })
	var b strings.Builder
	for _, f := range list {
		names := slices.Clone(f.Names)
		sort.SliceStable(names, func(i, j int) bool { return len(names[i]) < len(names[j]) })
		for i, n := range names {
			names[i] = spell(n)
		}
		head := "  " + strings.Join(names, ", ")
		var s flag.FlagSet
		s.Var(f.Value, "x", f.Usage)
		valueName, usage := flag.UnquoteUsage(s.Lookup("x"))
		if valueName != "" {
			head += " " + valueName
		}
		b.WriteString(head)
		if len(head) <= 4 { // a one-letter bool flag: its usage on its line, as package flag does
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !isZeroValue(f) && !strings.Contains(usage, "default") {
			if isString(f) {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}

// isString reports whether f holds a string, as flag.FlagSet.String
// declares one (its default is quoted in the help).
func isString(f *Flag) bool {
	var s flag.FlagSet
	s.String("x", "", "")
	return fmt.Sprintf("%T", f.Value) == fmt.Sprintf("%T", s.Lookup("x").Value)
}

// isZeroValue reports whether f's default is its type's zero value, which
// the help does not show (as package flag does).
func isZeroValue(f *Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]", "<nil>":
		return true
	}
	return false
}

// tableIndent is the column where the table help's usage text starts.
const tableIndent = 18

func (fs *FlagSet) printTable(w io.Writer) {
	for _, it := range fs.items {
		if it.flag == nil {
			fmt.Fprintln(w, it.title)
			continue
		}
		f := it.flag
		if f.hidden {
			continue
		}
		var spelled []string
		for _, n := range f.Names {
			if len(n) == 1 {
				spelled = append(spelled, "-"+n)
			} else {
				spelled = append(spelled, "--"+n)
			}
		}
		head := strings.Join(spelled, ", ")
		if f.argName != "" {
			head += " " + f.argName
		}
		usage := strings.ReplaceAll(f.Usage, "\n", "\n"+strings.Repeat(" ", tableIndent))
		fmt.Fprintf(w, "  %-*s %s\n", tableIndent-3, head, usage)
	}
}
