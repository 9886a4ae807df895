//go:build hwverbs && cgo && linux

package hwverbs

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// nilCalls calls every exported function and method of the libibverbs
// build on nil and zero receivers and arguments, by name. None may
// panic; each returns an error (wrapping errNilKind, and naming the
// type) or a zero value. They need no device.
var nilCalls = map[string]func() (error, bool){
	"Device.Name":          func() (error, bool) { return nil, (*Device)(nil).Name() == "" && (&Device{}).Name() == "" },
	"Device.Port":          func() (error, bool) { return nil, (*Device)(nil).Port() == 0 },
	"Device.GIDIndex":      func() (error, bool) { return nil, (*Device)(nil).GIDIndex() == 0 },
	"Device.DroppedEvents": func() (error, bool) { return nil, (*Device)(nil).DroppedEvents() == 0 },
	"Device.GID":           func() (error, bool) { _, err := (&Device{}).GID(0); return err, true },
	"Device.Addr":          func() (error, bool) { return nil, !(*Device)(nil).Addr().IsValid() && !(&Device{}).Addr().IsValid() },
	"Device.ActiveMTU":     func() (error, bool) { return nil, (*Device)(nil).ActiveMTU() == 0 && (&Device{}).ActiveMTU() == 0 },
	"Device.Caps":          func() (error, bool) { return nil, (*Device)(nil).Caps() == 0 && (&Device{}).Caps() == 0 },
	"Device.Events":        func() (error, bool) { return nil, (*Device)(nil).Events() == nil && (&Device{}).Events() == nil },
	"Device.AllocPD":       func() (error, bool) { _, err := (*Device)(nil).AllocPD(); return err, true },
	"Device.CreateCQ":      func() (error, bool) { _, err := (&Device{}).CreateCQ(1); return err, true },
	"Device.Close":         func() (error, bool) { return (&Device{}).Close(), true },
	"PD.Dealloc":           func() (error, bool) { return (&PD{}).Dealloc(), true },
	"PD.RegMR":             func() (error, bool) { _, err := (*PD)(nil).RegMR(make([]byte, 8), 0); return err, true },
	"PD.CreateQP":          func() (error, bool) { _, err := (&PD{}).CreateQP(&verbs.QPInitAttr{}); return err, true },
	"PD.CreateSRQ":         func() (error, bool) { _, err := (*PD)(nil).CreateSRQ(verbs.SRQAttr{MaxWR: 1}); return err, true },
	"PD.AllocMW":           func() (error, bool) { _, err := (*PD)(nil).AllocMW(verbs.MWType2); return err, true },
	"MW.RKey":              func() (error, bool) { return nil, (*MW)(nil).RKey() == 0 && (&MW{}).RKey() == 0 },
	"MW.Type":              func() (error, bool) { return nil, (*MW)(nil).Type() == 0 },
	"MW.Dealloc":           func() (error, bool) { return (&MW{}).Dealloc(), true },
	"QP.BindMW":            func() (error, bool) { return (&QP{}).BindMW(nil, nil), true },
	"PD.CreateAH": func() (error, bool) {
		_, err := (&PD{}).CreateAH(verbs.AHAttr{DGID: [16]byte{15: 1}})
		return err, true
	},
	"QP.AttachMcast": func() (error, bool) {
		return (*QP)(nil).AttachMcast([16]byte{}), true
	},
	"QP.DetachMcast": func() (error, bool) {
		return (&QP{}).DetachMcast([16]byte{0xff}), true
	},
	"MR.Addr":      func() (error, bool) { return nil, (*MR)(nil).Addr() == 0 },
	"MR.Len":       func() (error, bool) { return nil, (*MR)(nil).Len() == 0 },
	"MR.LKey":      func() (error, bool) { return nil, (*MR)(nil).LKey() == 0 },
	"MR.RKey":      func() (error, bool) { return nil, (*MR)(nil).RKey() == 0 },
	"MR.Bytes":     func() (error, bool) { return nil, (*MR)(nil).Bytes() == nil },
	"MR.Dereg":     func() (error, bool) { return (&MR{}).Dereg(), true },
	"CQ.Poll":      func() (error, bool) { return nil, (&CQ{}).Poll(make([]verbs.WC, 4)) == 0 && (*CQ)(nil).Poll(nil) == 0 },
	"CQ.ReqNotify": func() (error, bool) { (*CQ)(nil).ReqNotify(false); (&CQ{}).ReqNotify(true); return nil, true },
	"CQ.C":         func() (error, bool) { return nil, (*CQ)(nil).C() == nil },
	"CQ.Wait":      func() (error, bool) { return (&CQ{}).Wait(context.Background()), true },
	"CQ.Destroy":   func() (error, bool) { return (*CQ)(nil).Destroy(), true },
	"QP.QPN":       func() (error, bool) { return nil, (*QP)(nil).QPN() == 0 },
	"QP.Type":      func() (error, bool) { return nil, (*QP)(nil).Type() == 0 },
	"QP.Cap":       func() (error, bool) { return nil, (*QP)(nil).Cap() == verbs.QPCap{} },
	"QP.Modify":    func() (error, bool) { return (&QP{}).Modify(nil, verbs.AttrState), true },
	"QP.Query":     func() (error, bool) { _, err := (*QP)(nil).Query(); return err, true },
	"QP.PostSend":  func() (error, bool) { return (&QP{}).PostSend(make([]verbs.SendWR, 2)), true },
	"QP.PostRecv":  func() (error, bool) { return (&QP{}).PostRecv(make([]verbs.RecvWR, 2)), true },
	"QP.Destroy":   func() (error, bool) { return (*QP)(nil).Destroy(), true },
	"SRQ.PostRecv": func() (error, bool) { return (&SRQ{}).PostRecv(make([]verbs.RecvWR, 1)), true },
	"SRQ.Modify":   func() (error, bool) { return (*SRQ)(nil).Modify(1), true },
	"SRQ.Destroy":  func() (error, bool) { return (&SRQ{}).Destroy(), true },
	"AH.Attr":      func() (error, bool) { return nil, (*AH)(nil).Attr() == verbs.AHAttr{} },
	"AH.Destroy":   func() (error, bool) { return (&AH{}).Destroy(), true },
	"Error.Error":  func() (error, bool) { return nil, (*Error)(nil).Error() == "<nil>" },
	"Error.Unwrap": func() (error, bool) { return nil, (*Error)(nil).Unwrap() == nil },
	// Functions whose arguments are all values a caller may pass as
	// they like: they say what is wrong, or work.
	"Devices": func() (error, bool) { _, err := Devices(); return nil, err == nil || errors.As(err, new(*Error)) },
	"Open":    func() (error, bool) { _, err := Open("no such device", nil); return nil, errors.Is(err, ErrNoDevice) },
	"Alloc":   func() (error, bool) { b, err := Alloc(0); return nil, b == nil && err != nil },
	"Free":    func() (error, bool) { return Free(nil), true },
}

func TestNilArguments(t *testing.T) {
	for name, call := range nilCalls {
		t.Run(name, func(t *testing.T) {
			err, ok := call()
			if !ok {
				t.Errorf("%s: not the zero value (or not the error expected)", name)
			}
			if err == nil {
				return
			}
			typ, _, _ := strings.Cut(name, ".")
			if !errors.Is(err, errNilKind) || !strings.Contains(err.Error(), "*"+typ) {
				t.Errorf("%s: %v, want an error wrapping %v that names *%s", name, err, errNilKind, typ)
			}
		})
	}
}

// TestNilArgumentsComplete fails when an exported function or method of
// the libibverbs build has no row in nilCalls: a new entry point comes
// with its nil case.
func TestNilArgumentsComplete(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var missing []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "stub.go" || strings.HasSuffix(f, "_others.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil {
				rt := fd.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				name = rt.(*ast.Ident).Name + "." + name
			}
			if _, ok := nilCalls[name]; !ok {
				missing = append(missing, f+": "+name)
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("no nil-argument case for:\n%s", strings.Join(missing, "\n"))
	}
}
