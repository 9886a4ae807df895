package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// PrintDefaults writes the help of the flags to w, in the set's Layout:
// as Go's flag package does (FlagList), or as a table in declaration
// order with the usage's line breaks indented (FlagTable). Hidden flags
// are left out of both.
func (fs *FlagSet) PrintDefaults(w io.Writer) {
	if fs.layout == FlagTable {
		fs.printTable(w)
		return
	}
	var s flag.FlagSet
	s.SetOutput(w)
	for _, f := range fs.flags {
		if f.hidden {
			continue
		}
		for _, n := range f.Names {
			s.Var(f.Value, n, f.Usage)
			s.Lookup(n).DefValue = f.DefValue
		}
	}
	s.PrintDefaults()
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
