package funclen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxLines is the most lines a function may take. After issue 35's splits
// the longest outside the exemptions are near 100 (the test's -v output
// lists them).
const maxLines = 100

// skipDirs are the module's folders whose functions are not bounded, by
// path from the module's root.
var skipDirs = []string{
	"gostore/client", // the client's refactor (issue 35) pins its own shape
	"third_party",
}

// exempt names functions over maxLines that may stay so, each with the
// most lines it may take: benchmark programs that read as one script.
var exempt = map[string]int{
	"bench/scale/e2e.go: endToEnd": 160,
	"bench/ha/main.go: run":        153,
	"bench/ssd/e2e.go: e2e":        108,
}

type funcLen struct {
	name string // path from the module's root, ": ", (Recv).Name
	at   string // path:line
	n    int
}

func TestFunctionLength(t *testing.T) {
	root := moduleRoot(t)
	funcs := moduleFuncs(t, root)
	if len(funcs) < 1000 {
		t.Fatalf("found only %d functions under %s: the walk missed the module", len(funcs), root)
	}
	slices.SortFunc(funcs, func(a, b funcLen) int { return b.n - a.n })
	seen := map[string]bool{}
	near := 0
	for _, f := range funcs {
		seen[f.name] = true
		ceiling, ok := exempt[f.name]
		switch {
		case ok && f.n > ceiling:
			t.Errorf("%s (%s) is %d lines, past its exemption's %d: split it into named steps", f.name, f.at, f.n, ceiling)
		case ok && ceiling <= maxLines:
			t.Errorf("%s (%s): its exemption (%d) is at or under the bound %d: drop it", f.name, f.at, ceiling, maxLines)
		case ok:
		case f.n > maxLines:
			t.Errorf("%s (%s) is %d lines, over %d: split it into named steps (helpers with one job each)", f.name, f.at, f.n, maxLines)
		case near < 8:
			t.Logf("near the bound: %d lines %s (%s)", f.n, f.name, f.at)
			near++
		}
	}
	for name := range exempt {
		if !seen[name] {
			t.Errorf("exempt names %s, which is gone: drop it", name)
		}
	}
}

// moduleRoot is the folder of the go.mod above this package.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = up
	}
}

// moduleFuncs is every function declared with a body in the module's Go
// files, but for tests, generated files, skipDirs, testdata and hidden
// folders (a virtual environment, say).
func moduleFuncs(t *testing.T, root string) []funcLen {
	fset := token.NewFileSet()
	var out []funcLen
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || slices.Contains(skipDirs, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			from, to := fset.Position(fd.Pos()), fset.Position(fd.End())
			out = append(out, funcLen{name: rel + ": " + funcName(fd), at: fmt.Sprintf("%s:%d", rel, from.Line),
				n: to.Line - from.Line + 1})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// funcName is fd's name, with its receiver's type for a method:
// "(Server).handle".
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr: // a generic type's method
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return "(" + id.Name + ")." + fd.Name.Name
	}
	return fd.Name.Name
}
