// Command genheader writes the C header of package abi (abi.CHeader) to
// the file its one argument names; go generate runs it.
package main

import (
	"fmt"
	"os"

	"github.com/goroce/goroce/uverbs/abi"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genheader FILE")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], abi.CHeader(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genheader:", err)
		os.Exit(1)
	}
}
