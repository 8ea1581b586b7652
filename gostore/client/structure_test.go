package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

// The package's shape (issue 35): Client orchestrates and the work of the
// calls lives in objects of their own. These bounds keep it from growing
// back into one type one file at a time: a new call goes on the object
// whose job it is (Reads, Writes, Sessions, Tasks, Keys, Buffers) or on a
// new one, not on Client.
const (
	maxClientMethods = 40  // methods declared with receiver Client or *Client
	maxFileLines     = 800 // lines of a non-test file
	maxTypeLines     = 800 // lines of all the methods of one type
)

// TestStructure parses the package and fails when Client has more than
// maxClientMethods methods, a non-test file more than maxFileLines lines,
// or a type's methods together more than maxTypeLines.
func TestStructure(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, ok := pkgs["client"]
	if !ok {
		t.Fatalf("package client not found in %v", pkgs)
	}
	var clientMethods []string
	typeLines := map[string]int{}
	for name, f := range pkg.Files {
		if n := fset.Position(f.End()).Line; n > maxFileLines {
			t.Errorf("%s has %d lines (at most %d): split it by job", name, n, maxFileLines)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			recv := receiverType(fn.Recv.List[0].Type)
			typeLines[recv] += fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if recv == "Client" {
				clientMethods = append(clientMethods, fn.Name.Name)
			}
		}
	}
	sort.Strings(clientMethods)
	if len(clientMethods) > maxClientMethods {
		t.Errorf("Client has %d methods (at most %d): give the work to the object whose job it is\n%s",
			len(clientMethods), maxClientMethods, strings.Join(clientMethods, " "))
	}
	for typ, n := range typeLines {
		if n > maxTypeLines {
			t.Errorf("the methods of %s have %d lines (at most %d): split the type by job", typ, n, maxTypeLines)
		}
	}
	t.Logf("Client: %d methods; method lines by type: %v", len(clientMethods), typeLines)
}

// receiverType names a method's receiver type: T for T, *T, T[P] and *T[P].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
