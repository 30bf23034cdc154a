package kiev_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameEveryError checks that the guide (docs/guide.md) and the
// package docs name every error a user can match: the README, where the
// guide was, once left ErrOverloaded out.
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
	guide := read(t, "docs/guide.md")
	doc := read(t, "doc.go")
	for _, e := range errs {
		if !strings.Contains(guide, "kiev."+e) {
			t.Errorf("docs/guide.md does not name kiev.%s", e)
		}
		if !regexp.MustCompile(`\b` + e + `\b`).MatchString(doc) {
			t.Errorf("doc.go does not name %s", e)
		}
	}
}

// TestReadmeClaims checks claims the README once got wrong, and what it
// promises as the front door: it offered `go install …@latest` for a
// module that is not published, and it had two "Limits" sections (the
// guide, docs/guide.md, has the one now). It also holds the README to
// 250 lines, and checks its Go version, the version it says to fetch, and
// the make targets it names against go.mod, the satellite modules'
// requirements and the Makefile.
func TestReadmeClaims(t *testing.T) {
	readme := read(t, "README.md")
	docs := map[string]string{"README.md": readme}
	mds, _ := filepath.Glob("docs/*.md")
	for _, f := range mds {
		docs[f] = read(t, f)
	}
	for f, s := range docs {
		if strings.Contains(s, "@latest") {
			t.Errorf("%s offers an @latest install; the module is not published: install from a checkout", f)
		}
	}
	if n := strings.Count(docs["docs/guide.md"], "- **Limits"); n != 1 {
		t.Errorf("docs/guide.md has %d Limits sections; want one", n)
	}
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; the front door has at most 250: move the detail to docs/", n)
	}

	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(read(t, "go.mod"))
	if goVersion == nil {
		t.Fatal("go.mod has no go line")
	}
	if !strings.Contains(readme, "Go "+goVersion[1]+"** or later") {
		t.Errorf("README.md does not say kiev needs Go %s or later, as go.mod's go line does", goVersion[1])
	}
	// The version the satellite modules require kiev at is the one they
	// are released at together (docs/modules.md).
	req := regexp.MustCompile(`(?m)^\s*github\.com/kievrpc/kiev (v\S+)`).FindStringSubmatch(read(t, "clients/config/go.mod"))
	if req == nil {
		t.Fatal("clients/config/go.mod does not require github.com/kievrpc/kiev")
	}
	if want := "go get github.com/kievrpc/kiev@" + req[1]; !strings.Contains(readme, want) {
		t.Errorf("README.md does not say %q: the satellite modules require kiev %s", want, req[1])
	}

	makefile := read(t, "Makefile")
	for _, target := range []string{"demo", "test", "check"} {
		if !strings.Contains(readme, "`make "+target+"`") {
			t.Errorf("README.md does not name `make %s`", target)
		}
		if !regexp.MustCompile(`(?m)^` + target + `:`).MatchString(makefile) {
			t.Errorf("README.md names `make %s`, which the Makefile lacks", target)
		}
	}
	if !strings.Contains(read(t, ".ci/run"), "make test") {
		t.Error(".ci/run does not run make test, the README's test command")
	}

	// Each row of the table of what kiev does links to where it is told.
	table := readme[strings.Index(readme, "## What it does"):]
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| **") {
			continue
		}
		rows++
		if !strings.Contains(line, "](") {
			t.Errorf("README.md's row %q links to no doc", line)
		}
	}
	if rows < 10 {
		t.Errorf("README.md's \"What it does\" table has %d rows; the parse missed it", rows)
	}
}

// TestDocsLinks checks that every relative link of the README and of
// docs/ names a file that exists, and a heading of it if it names one:
// the README's sections moved to docs/, and their links with them.
func TestDocsLinks(t *testing.T) {
	files, _ := filepath.Glob("docs/*.md")
	files = append(files, "README.md", "RELIABILITY.md", "PROTOCOL.md", "bench/README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, f := range files {
		for _, m := range link.FindAllStringSubmatch(stripCode(read(t, f)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s links to %s, which does not exist", f, target)
					continue
				}
			}
			checked++
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") || !headings(t, file)[anchor] {
				t.Errorf("%s links to %s, but %s has no heading #%s", f, target, file, anchor)
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked %d links; the parse missed them", checked)
	}
}

// headings returns the anchors GitHub makes for the headings of a
// Markdown file.
func headings(t *testing.T, file string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripBlocks(read(t, file), false), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// inlineCode matches a Markdown code span.
var inlineCode = regexp.MustCompile("`[^`\n]*`")

// stripCode blanks the fenced code blocks and code spans of Markdown text.
func stripCode(s string) string {
	return stripBlocks(s, true)
}

// stripBlocks blanks the fenced code blocks of Markdown text, and its code
// spans if spans.
func stripBlocks(s string, spans bool) string {
	lines := strings.Split(s, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimLeft(l, " "), "```") {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		} else if spans {
			lines[i] = inlineCode.ReplaceAllString(l, "")
		}
	}
	return strings.Join(lines, "\n")
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
