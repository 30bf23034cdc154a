package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kievrpc/kiev"
	"github.com/kievrpc/kiev/reflection"
)

var describeCommand = &command{
	name:     "describe",
	synopsis: "[flags] <target> [Service]",
	summary:  "list the methods of a server, with their argument and reply types",
	help: `
Describe asks the target's reflection service (kiev.Reflection, which
every kiev server has) for its services, or only for Service, and prints
one line per method, with the shapes its argument and reply take on the
wire:

  Arith.Add(Args{A int, B int}) Reply{C int}

A stream method marks what streams with "stream": the messages the
server sends (a server stream), those the client sends (a client
stream), or both (a bidirectional stream):

  Feed.Watch(Query{From int}) stream Event{N int}
  Feed.Upload(stream Chunk{Data []byte}) Sum{Bytes int}
  Feed.Chat(stream Msg{Text string}) stream Msg{Text string}

Field names are the names to use in the JSON of 'kiev call'. A type that
contains itself shows its name where it recurs; pointers are not marked,
since a JSON null stands for a nil pointer. --json prints the full
descriptions (reflection.ServiceInfo) instead.

Examples:
  kiev describe 127.0.0.1:7000
  kiev describe --json zookeeper://zk:2181/Arith Arith`,
	newRunner: func() runner { return &describeCmd{} },
}

type describeCmd struct {
	json    bool
	timeout time.Duration
}

func (c *describeCmd) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.json, "json", false, "print the descriptions as JSON")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up after `duration`; 0 waits as long as it takes")
}

func (c *describeCmd) run(ctx context.Context, cl *cli, args []string) error {
	if err := wantArgs("describe", args, 1, 2, "<target> [Service]"); err != nil {
		return err
	}
	if c.timeout < 0 {
		return usagef("describe", "--timeout %v is negative; use a duration such as 5s, or 0 for none", c.timeout)
	}
	target := args[0]
	client, err := cl.dial("describe", target, c.timeout)
	if err != nil {
		return err
	}
	defer client.Close()
	callCtx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()

	var infos []reflection.ServiceInfo
	method := reflection.ServiceName + ".List"
	if len(args) == 2 {
		method = reflection.ServiceName + ".Describe"
		var info reflection.ServiceInfo
		err = client.Call(callCtx, method, args[1], &info)
		infos = append(infos, info)
	} else {
		err = client.Call(callCtx, method, struct{}{}, &infos)
	}
	if err != nil {
		var se *kiev.ServerError
		if errors.As(err, &se) && se.Code == kiev.CodeNotFound {
			if strings.Contains(se.Message, strconv.Quote(reflection.ServiceName)) {
				return fmt.Errorf("%s has no reflection service (%s); its kiev is too old to describe itself", target, reflection.ServiceName)
			}
			return fmt.Errorf("%s: %s", target, strings.TrimPrefix(se.Message, "kiev: ")) // an unknown service
		}
		return callFailed(ctx, target, method, c.timeout, err)
	}
	if c.json {
		return printJSON(cl.stdout, infos)
	}
	if len(infos) == 0 {
		fmt.Fprintf(cl.stderr, "kiev describe: %s serves no services\n", target)
		return nil
	}
	return writeDescriptions(cl.stdout, infos)
}

// writeDescriptions prints one line per method.
func writeDescriptions(w io.Writer, infos []reflection.ServiceInfo) error {
	for _, s := range infos {
		for _, m := range s.Methods {
			args, reply := shapeString(m.Args), shapeString(m.Reply)
			if m.ClientStreaming {
				args = "stream " + args
			}
			if m.ServerStreaming {
				reply = "stream " + reply
			}
			if _, err := fmt.Fprintf(w, "%s.%s(%s) %s\n", s.Name, m.Name, args, reply); err != nil {
				return err
			}
		}
	}
	return nil
}

// shapeString renders a shape in a Go-like notation:
// Order{ID int, Items []Item{SKU string}, Notes map[string]string}.
func shapeString(ts reflection.TypeShape) string {
	var b strings.Builder
	writeShape(&b, ts)
	return b.String()
}

func writeShape(b *strings.Builder, ts reflection.TypeShape) {
	elem := func(e *reflection.TypeShape) {
		if e == nil {
			b.WriteString("?")
			return
		}
		writeShape(b, *e)
	}
	switch ts.Kind {
	case "struct":
		if strings.HasPrefix(ts.Type, "struct") {
			b.WriteString("struct")
		} else {
			b.WriteString(shortName(ts.Type))
		}
		b.WriteByte('{')
		for i, f := range ts.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f.Name)
			b.WriteByte(' ')
			writeShape(b, f.Shape)
		}
		b.WriteByte('}')
	case "slice":
		b.WriteString("[]")
		elem(ts.Elem)
	case "array":
		fmt.Fprintf(b, "[%d]", ts.Len)
		elem(ts.Elem)
	case "map":
		b.WriteString("map[")
		elem(ts.Key)
		b.WriteByte(']')
		elem(ts.Elem)
	case "bytes":
		if ts.Len > 0 {
			fmt.Fprintf(b, "[%d]byte", ts.Len)
		} else {
			b.WriteString("[]byte")
		}
	case "time":
		b.WriteString("time.Time")
	case "any":
		b.WriteString("any")
	case "int", "uint", "float", "bool", "string":
		if builtin.MatchString(ts.Type) {
			b.WriteString(ts.Type) // int64, float32: the exact range
		} else {
			b.WriteString(ts.Kind) // a named type: what it is on the wire
		}
	case "truncated":
		b.WriteString(shortName(ts.Type) + "{…}")
	default: // recursive, custom, unsupported, and kinds newer than this command
		b.WriteString(shortName(ts.Type))
	}
}

var (
	builtin   = regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	qualifier = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*\.`)
)

// shortName drops the package names from a Go type name: main.Args is
// Args, map[string]main.Item is map[string]Item.
func shortName(typ string) string {
	return qualifier.ReplaceAllString(typ, "")
}
