package kiev_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRootDoesNotFrame checks the layering doc.go describes: package kiev
// is the API, and internal/transport owns the wire, so no non-test file
// of the root imports internal/wire.
func TestRootDoesNotFrame(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "github.com/kievrpc/kiev/internal/wire" {
				t.Errorf("%s imports %s: package kiev must leave framing to internal/transport (doc.go, Layers)", fset.Position(imp.Pos()), path)
			}
		}
	}
}
