package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// checkExported parses the non-test Go files of the package in dir (every
// build variant: build constraints are not applied) and reports each
// exported identifier without a doc comment: a type, a function, a method
// on an exported type, a constant or a variable. For a grouped declaration,
// a doc comment on the group counts for every name in it. It also reports a
// package without a package doc comment.
func checkExported(dir string) ([]string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var problems []string
	pkgDoc := false
	parsed := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		parsed++
		if f.Name.Name == "main" {
			return nil, fmt.Errorf("%s: package main has no exported API to check", name)
		}
		if f.Doc != nil {
			pkgDoc = true
		}
		problems = append(problems, undocumented(fset, f)...)
	}
	if parsed == 0 {
		return nil, fmt.Errorf("%s: no Go files", dir)
	}
	if !pkgDoc {
		problems = append(problems, fmt.Sprintf("%s: the package has no package doc comment", dir))
	}
	return problems, nil
}

// undocumented returns a line for each exported identifier of f that has
// no doc comment.
func undocumented(fset *token.FileSet, f *ast.File) []string {
	var out []string
	report := func(pos token.Pos, what string) {
		out = append(out, fmt.Sprintf("%s: %s has no doc comment", fset.Position(pos), what))
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			what := "func " + d.Name.Name
			if d.Recv != nil && len(d.Recv.List) > 0 {
				recv := receiverType(d.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue // a method of an unexported type is not in the API
				}
				what = "method " + recv + "." + d.Name.Name
			}
			if d.Doc == nil {
				report(d.Name.Pos(), what)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
						report(s.Name.Pos(), "type "+s.Name.Name)
					}
				case *ast.ValueSpec:
					if s.Doc != nil || d.Doc != nil {
						continue
					}
					for _, n := range s.Names {
						if n.IsExported() {
							report(n.Pos(), d.Tok.String()+" "+n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// receiverType returns the name of a method's receiver type: T for T, *T,
// T[K] and *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			fmt.Fprintf(os.Stderr, "doccheck: unexpected receiver %T\n", e)
			return ""
		}
	}
}
