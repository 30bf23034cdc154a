package kiev_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameEveryError checks that the README and the package docs name
// every error a user can match: the README once left ErrOverloaded out.
func TestDocsNameEveryError(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	for _, f := range pkgs["kiev"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
						errs = append(errs, n.Name)
					}
				}
			}
		}
	}
	if len(errs) < 10 {
		t.Fatalf("found only %v; the parse missed the package's errors", errs)
	}
	readme := read(t, "README.md")
	doc := read(t, "doc.go")
	for _, e := range errs {
		if !strings.Contains(readme, "kiev."+e) {
			t.Errorf("README.md does not name kiev.%s", e)
		}
		if !regexp.MustCompile(`\b` + e + `\b`).MatchString(doc) {
			t.Errorf("doc.go does not name %s", e)
		}
	}
}

// TestReadmeClaims checks claims the README once got wrong: it offered
// `go install …@latest` for a module that is not published, and it had two
// "Limits" sections.
func TestReadmeClaims(t *testing.T) {
	readme := read(t, "README.md")
	if strings.Contains(readme, "@latest") {
		t.Error("README.md offers an @latest install; the module is not published: install from a checkout")
	}
	if n := strings.Count(readme, "- **Limits"); n != 1 {
		t.Errorf("README.md has %d Limits sections; want one", n)
	}
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
