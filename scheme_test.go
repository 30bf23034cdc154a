package kiev_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/internal/logtest"
	"github.com/kievrpc/kiev/registry"
	"github.com/kievrpc/kiev/registry/memory"
)

// schemeTest is the registry scheme "kievtest", registered once for the
// test binary (RegisterScheme cannot be undone, and -count runs tests
// again): "kievtest://NAME/Service" opens the memory registry NAME.
var schemeTest = struct {
	mu     sync.Mutex
	regs   map[string]*memory.Registry
	opened map[string]int
	closed map[string]int
	logged map[string]*slog.Logger
}{regs: map[string]*memory.Registry{}, opened: map[string]int{}, closed: map[string]int{}, logged: map[string]*slog.Logger{}}

func init() {
	kiev.RegisterScheme("kievtest", func(u *url.URL) (string, func(*slog.Logger) (registry.Registry, error), error) {
		name, service := u.Host, strings.Trim(u.Path, "/")
		switch {
		case name == "":
			return "", nil, errors.New("no registry name; write kievtest://NAME/Service")
		case service == "":
			return "", nil, errors.New("no service name; write kievtest://NAME/Service")
		}
		return service, func(log *slog.Logger) (registry.Registry, error) {
			schemeTest.mu.Lock()
			defer schemeTest.mu.Unlock()
			reg, ok := schemeTest.regs[name]
			if !ok {
				return nil, fmt.Errorf("no test registry named %q", name)
			}
			schemeTest.opened[name]++
			schemeTest.logged[name] = log
			return closeCounter{reg, name}, nil
		}, nil
	})
}

// closeCounter is a registry whose Close is counted and does not close the
// shared memory registry under it.
type closeCounter struct {
	*memory.Registry
	name string
}

func (c closeCounter) Close() error {
	schemeTest.mu.Lock()
	defer schemeTest.mu.Unlock()
	schemeTest.closed[c.name]++
	return nil
}

// testRegistry makes the memory registry that kievtest://<t's name>/
// targets open.
func testRegistry(t *testing.T) (*memory.Registry, string) {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	reg := memory.New()
	schemeTest.mu.Lock()
	schemeTest.regs[name] = reg
	schemeTest.opened[name], schemeTest.closed[name] = 0, 0
	schemeTest.mu.Unlock()
	t.Cleanup(func() { reg.Close() })
	return reg, name
}

// A target of a registered scheme finds the service in the registry the
// scheme opens, with the client's logger; the client closes it.
func TestRegisterSchemeDial(t *testing.T) {
	reg, name := testRegistry(t)
	provider(t, reg, "p0")
	logger, _ := logtest.New(t)
	c, err := kiev.Dial("kievtest://"+name+"/Who", kiev.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	if got := callName(t, c, context.Background()); got != "p0" {
		t.Fatalf("answered by %q; want p0", got)
	}
	c.Close()
	schemeTest.mu.Lock()
	opened, closed, logged := schemeTest.opened[name], schemeTest.closed[name], schemeTest.logged[name]
	schemeTest.mu.Unlock()
	if opened != 1 || closed != 1 {
		t.Errorf("registry opened %d and closed %d times; want once each", opened, closed)
	}
	if logged != logger {
		t.Errorf("open got logger %p; want the client's, %p", logged, logger)
	}
}

func TestRegisterSchemeErrors(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"kievtest:///Who", "kiev: Dial \"kievtest:///Who\": no registry name; write kievtest://NAME/Service"},
		{"kievtest://x", "no service name"},
		{"kievtest://nosuch/Who", "no test registry named \"nosuch\""},
		{"etcd://127.0.0.1:2379/Who", "import github.com/kievrpc/kiev/registry/etcd to use etcd:// targets"},
		{"gopher://127.0.0.1:1", "tcp://, udp://, unix://, zookeeper://, dns:// or kievtest://"},
	} {
		c, err := kiev.Dial(tc.target)
		if err == nil {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Dial(%q) = %v; want error saying %q", tc.target, err, tc.want)
		}
	}
}

func TestRegisterSchemePanics(t *testing.T) {
	parse := func(*url.URL) (string, func(*slog.Logger) (registry.Registry, error), error) {
		return "", nil, nil
	}
	for _, tc := range []struct {
		scheme string
		parse  func(*url.URL) (string, func(*slog.Logger) (registry.Registry, error), error)
		want   string
	}{
		{"kievtest", parse, "called twice"},
		{"zookeeper", parse, "knows zookeeper:// targets itself"},
		{"tcp", parse, "knows tcp:// targets itself"},
		{"Etcd", parse, "not a lower-case URL scheme"},
		{"", parse, "not a lower-case URL scheme"},
		{"a/b", parse, "not a lower-case URL scheme"},
		{"other", nil, "nil parse function"},
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tc.want) {
					t.Errorf("RegisterScheme(%q) panicked with %v; want a panic saying %q", tc.scheme, r, tc.want)
				}
			}()
			kiev.RegisterScheme(tc.scheme, tc.parse)
		}()
	}
}
