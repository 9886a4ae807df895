package diagram

import (
	"errors"
	"fmt"
	"io"
)

// Format is the form a diagram is written in. A *Format is a flag.Value
// that is also a boolean flag, so that a tool declares
//
//	var form diagram.Format
//	fs.Var(&form, "diagram", "draw the capture as a sequence diagram: text (the default) or html")
//
// and then --diagram means FormatText and --diagram=html FormatHTML.
type Format uint8

// Formats.
const (
	FormatNone Format = iota // no diagram
	FormatText               // WriteText
	FormatHTML               // WriteHTML with the default options
)

// ErrFormat means a format name is neither text nor html.
var ErrFormat = errors.New("diagram: unknown format")

// String returns "text", "html" or "" for FormatNone.
func (f Format) String() string {
	switch f {
	case FormatText:
		return "text"
	case FormatHTML:
		return "html"
	}
	return ""
}

// Set sets f from a flag's value: "text" or "true" (the flag alone) for
// FormatText, "html" for FormatHTML, "false" for FormatNone.
func (f *Format) Set(s string) error {
	switch s {
	case "text", "true":
		*f = FormatText
	case "html":
		*f = FormatHTML
	case "false":
		*f = FormatNone
	default:
		return fmt.Errorf("%w %q: use text or html", ErrFormat, s)
	}
	return nil
}

// IsBoolFlag tells package flag that the flag may stand alone.
func (f *Format) IsBoolFlag() bool { return true }

// Write writes the diagram in format f: WriteText or WriteHTML with the
// default options. FormatNone is an ErrFormat error.
func (d *Diagram) Write(w io.Writer, f Format) error {
	switch f {
	case FormatText:
		return d.WriteText(w)
	case FormatHTML:
		return d.WriteHTML(w, nil)
	}
	return fmt.Errorf("%w %d: use FormatText or FormatHTML", ErrFormat, f)
}
