package redis

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// How much of a command the log shows.
const (
	maxLoggedArgs   = 4  // arguments after the command's name
	maxLoggedArgLen = 32 // bytes of each
)

// secretCommands are the commands whose arguments may hold credentials:
// the log shows their name only.
var secretCommands = map[string]bool{
	"auth":     true,
	"hello":    true, // HELLO 3 AUTH user password
	"acl":      true, // ACL SETUSER u >password
	"config":   true, // CONFIG SET requirepass password
	"migrate":  true, // MIGRATE ... AUTH password
	"sentinel": true, // SENTINEL SET master auth-pass password
}

// describe returns cmd as the log shows it: its name and at most
// maxLoggedArgs arguments, each cut to maxLoggedArgLen bytes and quoted
// if it holds spaces or unprintable bytes; the arguments of
// secretCommands are left out.
func describe(cmd redis.Cmder) string {
	args := cmd.Args()
	name := cmd.Name()
	var b strings.Builder
	writeArg(&b, name)
	if len(args) <= 1 {
		return b.String()
	}
	if secretCommands[name] {
		fmt.Fprintf(&b, " [%d arguments not logged]", len(args)-1)
		return b.String()
	}
	for i, a := range args[1:] {
		if i == maxLoggedArgs {
			fmt.Fprintf(&b, " …+%d", len(args)-1-i)
			break
		}
		b.WriteByte(' ')
		writeArg(&b, a)
	}
	return b.String()
}

// writeArg writes one argument, cut to maxLoggedArgLen bytes.
func writeArg(b *strings.Builder, a any) {
	var s string
	switch v := a.(type) {
	case string:
		s = v
	case []byte:
		if len(v) > maxLoggedArgLen {
			v = v[:maxLoggedArgLen+utf8.UTFMax] // enough to cut on a rune boundary
		}
		s = string(v)
	case int:
		s = strconv.Itoa(v)
	case int64:
		s = strconv.FormatInt(v, 10)
	default:
		s = fmt.Sprint(v)
	}
	cut := len(s) > maxLoggedArgLen
	if cut {
		n := maxLoggedArgLen
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	if s == "" || strings.IndexFunc(s, needsQuote) >= 0 || !utf8.ValidString(s) {
		s = strconv.Quote(s)
	}
	b.WriteString(s)
	if cut {
		b.WriteString("…")
	}
}

func needsQuote(r rune) bool {
	return r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r)
}

// commandLabel returns the metrics label of the command name: the name
// itself if it looks like one of Redis's, and "other" if not, so that a
// made-up name sent with Do cannot put any bytes in a label.
func commandLabel(name string) string {
	if name == "" || len(name) > 32 {
		return "other"
	}
	for i := range len(name) {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' && c != '.' && c != '|' {
			return "other"
		}
	}
	return name
}
