package decode

import (
	"encoding/hex"
	"net/netip"
	"reflect"
	"strings"
	"unicode"

	"github.com/goroce/goroce/layers"
	"github.com/goroce/goroce/mad"
)

// decodeCM returns the "cm" object of --json for a CM MAD: every field of
// the message, named in snake_case, GIDs as IP addresses, private data in
// hex without its trailing zeros, and for a REQ the rdma_cm header of its
// private data. It returns nil for MADs that are not CM messages or do not
// decode (the "mad" object still describes them).
func decodeCM(m *layers.MAD) any {
	if m.MgmtClass != mad.ClassCM {
		return nil
	}
	raw := append(append(make([]byte, 0, mad.Len), m.Contents...), m.Payload...)
	if len(raw) != mad.Len {
		return nil
	}
	_, msg, err := mad.Decode(raw)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	out := structFields(reflect.ValueOf(msg).Elem())
	if req, ok := msg.(*mad.REQ); ok {
		var h mad.CMAHeader
		if h.Unmarshal(req.PrivateData[:]) == nil {
			out["rdma_cm"] = map[string]any{"src": h.Src.String(), "dst": h.Dst.String(), "src_port": h.SrcPort,
				"service_port": req.ServiceID & 0xFFFF}
		}
	}
	return out
}

// structFields turns a CM message struct into JSON-friendly values.
func structFields(v reflect.Value) map[string]any {
	out := make(map[string]any, v.NumField())
	t := v.Type()
	for i := range v.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		out[snake(f.Name)] = jsonValue(f.Name, v.Field(i))
	}
	return out
}

func jsonValue(name string, v reflect.Value) any {
	switch v.Kind() {
	case reflect.Struct:
		return structFields(v)
	case reflect.Array:
		if v.Type().Elem().Kind() != reflect.Uint8 {
			return v.Interface()
		}
		b := make([]byte, v.Len())
		reflect.Copy(reflect.ValueOf(b), v)
		if len(b) == 16 && strings.HasSuffix(name, "GID") {
			return netip.AddrFrom16([16]byte(b)).Unmap().String()
		}
		for len(b) > 0 && b[len(b)-1] == 0 {
			b = b[:len(b)-1]
		}
		return hex.EncodeToString(b)
	}
	if s, ok := v.Interface().(interface{ String() string }); ok && v.Kind() != reflect.Bool {
		// Named enums (reasons, MTUs) read better by name, with the
		// number beside them.
		return map[string]any{"value": v.Interface(), "name": s.String()}
	}
	return v.Interface()
}

// snake turns a Go field name (LocalCommID) into local_comm_id.
func snake(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
