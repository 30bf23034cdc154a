package redis

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

func TestDescribe(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("é", 40) // 80 bytes, cut on a rune boundary
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"get", "user:1"}, "get user:1"},
		{[]any{"GET", "k"}, "get k"},
		{[]any{"ping"}, "ping"},
		{[]any{strings.Repeat("z", 40), "a b"}, strings.Repeat("z", 32) + `… "a b"`},
		{[]any{"set", "k", "two words", "ex", 60}, `set k "two words" ex 60`},
		{[]any{"set", "k", []byte{0xff, 'a'}}, `set k "\xffa"`},
		{[]any{"set", "k", ""}, `set k ""`},
		{[]any{"set", "k", long}, "set k " + strings.Repeat("é", 16) + "…"},
		{[]any{"set", "k", []byte(strings.Repeat("b", 100))}, "set k " + strings.Repeat("b", 32) + "…"},
		{[]any{"rpush", "l", 1, 2, 3, 4, 5}, "rpush l 1 2 3 …+2"},
		{[]any{"auth", "user", "pw"}, "auth [2 arguments not logged]"},
		{[]any{"hello", "3", "AUTH", "u", "pw"}, "hello [4 arguments not logged]"},
		{[]any{"config", "set", "requirepass", "pw"}, "config [3 arguments not logged]"},
		{[]any{"migrate", "h", 6379, "", 0, 5000, "AUTH", "pw", "KEYS", "k"}, "migrate [9 arguments not logged]"},
	} {
		if got := describe(redis.NewCmd(ctx, tc.args...)); got != tc.want {
			t.Errorf("describe(%q) = %q; want %q", tc.args, got, tc.want)
		}
	}
}

// FuzzDescribe checks that a command's description is valid UTF-8, short
// whatever the arguments, and never holds a secret command's arguments.
func FuzzDescribe(f *testing.F) {
	f.Add("get", "user:1", []byte("x"), 3)
	f.Add("auth", "password", []byte("password"), 1)
	f.Add("set", "\xff\xfe", []byte("\x00\"\n"), 9)
	f.Fuzz(func(t *testing.T, name, s string, b []byte, n int) {
		if name == "" {
			return
		}
		args := []any{name}
		for i := range n % 10 {
			if i%2 == 0 {
				args = append(args, s)
			} else {
				args = append(args, b)
			}
		}
		cmd := redis.NewCmd(context.Background(), args...)
		got := describe(cmd)
		if !utf8.ValidString(got) {
			t.Fatalf("describe = %q: not UTF-8", got)
		}
		// The name, then at most 4 quoted arguments of 32 bytes, each
		// escaped byte taking at most 4, then the count of the rest.
		if max := (4*maxLoggedArgLen + 2 + len("…")) + maxLoggedArgs*(4*maxLoggedArgLen+2+len(" …")) + len(" …+99"); len(got) > max {
			t.Fatalf("describe is %d bytes; want at most %d: %q", len(got), max, got)
		}
		if secretCommands[cmd.Name()] && len(args) > 1 {
			if !strings.HasSuffix(got, " arguments not logged]") {
				t.Fatalf("describe(%q) = %q: a secret command's arguments shown", args, got)
			}
		}
	})
}
