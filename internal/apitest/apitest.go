// Package apitest checks a package's exported API from the package's own
// tests: that each exported function and method has a row in the test's
// table of bad-argument cases (so a new entry point cannot be added
// without one), that none of them panics, that methods called on a nil
// receiver return an error instead of dereferencing it, and that errors
// say what is wrong.
//
// It reads the package's source with go/parser; it needs to run from the
// package's directory, as go test does.
package apitest

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// Entries returns the exported functions and methods declared in the
// non-test Go files of dir, sorted, as "Func" or "Type.Method". Methods of
// unexported types are listed too, since they are reachable through the
// interfaces those types implement. Files for every platform are read, so
// an entry point declared for linux and for other systems is one entry.
func Entries(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil {
				name = recvName(fd.Recv.List[0].Type) + "." + name
			}
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// PointerTypes returns the exported types declared in dir that have an
// exported method with a pointer receiver: those whose nil pointer a
// caller can hold and call a method on. (A value of an unexported type
// reaches callers only through an interface, from the package, which
// does not hand out nil pointers.)
func PointerTypes(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for n := range pointerMethods(t, dir) {
		if ast.IsExported(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// pointerMethods maps each type declared in dir to its exported methods
// declared with a pointer receiver.
func pointerMethods(t testing.TB, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			if _, star := fd.Recv.List[0].Type.(*ast.StarExpr); !star {
				continue
			}
			n := recvName(fd.Recv.List[0].Type)
			if !slices.Contains(out[n], fd.Name.Name) {
				out[n] = append(out[n], fd.Name.Name)
			}
		}
	}
	return out
}

func parseDir(t testing.TB, dir string) []*ast.File {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("apitest: %v", err)
		}
		files = append(files, f)
	}
	return files
}

func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}

// Table maps each entry point, named as Entries names it, to a test that
// calls it with nil, zero and out-of-range arguments and checks the
// result.
type Table map[string]func(t *testing.T)

// Run checks that table has a row for every entry point of the package in
// dir and no row for anything else, then runs each row as a subtest. A row
// that panics fails, with the stack.
func Run(t *testing.T, dir string, table Table) {
	t.Helper()
	entries := Entries(t, dir)
	for _, e := range entries {
		if table[e] == nil {
			t.Errorf("%s has no row in the nil-argument table: add one that calls it with nil and zero arguments", e)
		}
	}
	for name := range table {
		if !slices.Contains(entries, name) {
			t.Errorf("the nil-argument table has a row for %s, which is not an exported entry point of %s", name, dir)
		}
	}
	for _, name := range entries {
		f := table[name]
		if f == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Helper()
			NoPanic(t, name, func() { f(t) })
		})
	}
}

// NoPanic calls f and fails t, with the stack, if it panics.
func NoPanic(t testing.TB, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	f()
}

// Err fails t unless err is an error that wraps target (when target is
// not nil) and whose text contains each of words.
func Err(t testing.TB, err, target error, words ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("got no error, want one wrapping %v that mentions %q", target, words)
		return
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("error %q does not wrap %q", err, target)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

// NilReceivers calls every exported method declared with a pointer
// receiver in dir on each typed nil pointer in ptrs, with zero arguments
// (context.Background() for a context), and fails t if one panics, or
// returns a nil error (Unwrap aside), or an error that does not name the
// receiver's type. Methods declared on the value type, and methods
// promoted from an embedded field, are not called: on a nil pointer they
// dereference it before any code of the package runs, as Go defines.
// Nor are test helpers that take a testing.TB, which fail their test. It
// also fails t when a type PointerTypes lists for dir has no pointer in
// ptrs. A pointer wrapped in Zero stands for a type whose nil pointer
// means its zero value, as a nil *net.Dialer's methods would: its methods
// must not panic, and need not fail.
func NilReceivers(t testing.TB, dir string, ptrs ...any) {
	t.Helper()
	methods := pointerMethods(t, dir)
	have := map[string]bool{}
	for _, p := range ptrs {
		zero := false
		if z, ok := p.(Zero); ok {
			p, zero = z.P, true
		}
		v := reflect.ValueOf(p)
		if v.Kind() != reflect.Pointer || !v.IsNil() {
			t.Fatalf("apitest: NilReceivers takes typed nil pointers, not %T", p)
		}
		name := v.Type().Elem().Name()
		have[name] = true
		nilMethods(t, p, methods[name], zero)
	}
	for _, n := range PointerTypes(t, dir) {
		if !have[n] {
			t.Errorf("*%s has exported methods but no nil-receiver check: add (*%s)(nil) to NilReceivers", n, n)
		}
	}
}

// Zero wraps a typed nil pointer for NilReceivers: the type's methods
// take a nil receiver for its zero value.
type Zero struct{ P any }

var errorType = reflect.TypeFor[error]()

// nilMethods calls the named methods of p, a typed nil pointer; unless
// zero, each that returns an error must return one naming p's type.
func nilMethods(t testing.TB, p any, names []string, zero bool) {
	t.Helper()
	v := reflect.ValueOf(p)
	elem := v.Type().Elem()
	for _, name := range names {
		mv := v.MethodByName(name)
		if !mv.IsValid() {
			t.Errorf("apitest: *%s has no method %s", elem.Name(), name)
			continue
		}
		if takesTB(mv.Type()) {
			continue // a test helper: its Fatal ends the goroutine; the table's row covers it
		}
		what := "(*" + elem.Name() + ")(nil)." + name
		var out []reflect.Value
		NoPanic(t, what, func() { out = mv.Call(zeroArgs(mv.Type())) })
		if zero || len(out) == 0 || out[len(out)-1].Type() != errorType || name == "Unwrap" {
			continue // Unwrap's nil is "nothing wrapped"
		}
		err, _ := out[len(out)-1].Interface().(error)
		if err == nil {
			t.Errorf("%s returned no error", what)
		} else if !strings.Contains(err.Error(), elem.Name()) {
			t.Errorf("%s: error %q does not name the %s", what, err, elem.Name())
		}
	}
}

var (
	ctxType = reflect.TypeFor[context.Context]()
	tbType  = reflect.TypeFor[testing.TB]()
)

// takesTB reports whether a function takes a testing.TB.
func takesTB(ft reflect.Type) bool {
	for i := range ft.NumIn() {
		if ft.In(i) == tbType {
			return true
		}
	}
	return false
}

// zeroArgs returns zero values for the parameters of a function type,
// leaving out a variadic tail.
func zeroArgs(ft reflect.Type) []reflect.Value {
	n := ft.NumIn()
	if ft.IsVariadic() {
		n--
	}
	var args []reflect.Value
	for i := 0; i < n; i++ {
		in := ft.In(i)
		if in == ctxType {
			args = append(args, reflect.ValueOf(context.Background()))
			continue
		}
		args = append(args, reflect.Zero(in))
	}
	return args
}
