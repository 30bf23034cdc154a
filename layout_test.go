package kiev_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// TestRootHoldsTheAPIOnly checks that the shapes of the admin pages,
// health and reflection stay in their packages: the root once declared
// all sixteen, and a package-level set of every registered service.
func TestRootHoldsTheAPIOnly(t *testing.T) {
	moved := map[string]string{
		"Status": "admin", "ServiceStatus": "admin", "MethodStatus": "admin", "SchedulerStatus": "admin",
		"ClientStatus": "admin", "ProviderStatus": "admin", "HealthStatus": "admin",
		"HealthCheckRequest": "health", "HealthCheckResponse": "health", "HealthWatchRequest": "health",
		"HealthResult": "health", "ServingStatus": "health",
		"TypeShape": "reflection", "FieldShape": "reflection", "MethodInfo": "reflection", "ServiceInfo": "reflection",
		"localServices": "nowhere: Dial reads its target alone",
	}
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range pkgs["kiev"].Files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if where, ok := moved[s.Name.Name]; ok {
						found = append(found, s.Name.Name+" (belongs in "+where+")")
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if where, ok := moved[n.Name]; ok {
							found = append(found, n.Name+" (belongs in "+where+")")
						}
					}
				}
			}
		}
	}
	slices.Sort(found)
	for _, f := range found {
		t.Errorf("the root package declares %s", f)
	}
}
