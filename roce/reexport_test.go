package roce

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// TestReexports checks that roce re-exports every exported name of
// package verbs, so the two cannot drift apart.
func TestReexports(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../verbs", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := parser.ParseDir(fset, ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range mine["roce"].Files {
		for name, obj := range f.Scope.Objects {
			if obj != nil {
				have[name] = true
			}
		}
	}
	for fname, f := range pkgs["verbs"].Files {
		if len(fname) > 8 && fname[len(fname)-8:] == "_test.go" {
			continue
		}
		for name := range f.Scope.Objects {
			if ast.IsExported(name) && !have[name] {
				t.Errorf("verbs.%s is not re-exported by roce", name)
			}
		}
	}
}
