package transporttest

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// CheckParsed checks what a transport delivered in p.Parsed: the parse
// of p.Data by bth.Packet.Parse, its views pointing into p.Data itself
// (not into a copy, nor into another packet's bytes).
func CheckParsed(p *transport.Packet) error {
	if p == nil {
		return errors.New("no packet (a nil *transport.Packet)")
	}
	if p.Parsed == nil {
		return errors.New("the packet's Parsed is nil")
	}
	var want bth.Packet
	if err := want.Parse(p.Data); err != nil {
		return fmt.Errorf("delivered a packet that does not parse: %w", err)
	}
	got, exp := reflect.ValueOf(p.Parsed).Elem(), reflect.ValueOf(&want).Elem()
	for i := range got.NumField() {
		g, w := got.Field(i), exp.Field(i)
		same := false
		switch g.Kind() {
		case reflect.Slice, reflect.Pointer:
			same = g.Pointer() == w.Pointer() && (g.Kind() == reflect.Pointer || g.Len() == w.Len() && g.Cap() == w.Cap())
		default:
			same = g.Equal(w)
		}
		if !same {
			return fmt.Errorf("the packet's Parsed.%s is not the parse of its Data", got.Type().Field(i).Name)
		}
	}
	return nil
}
