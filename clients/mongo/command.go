package mongo

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// MaxLoggedCommand is the most bytes of a command a log line shows: the
// command's relaxed Extended JSON, cut there and ended with "…".
const MaxLoggedCommand = 200

// redactedCommand stands for the body of a command that may hold
// credentials.
const redactedCommand = "[redacted]"

// sensitiveCommands may carry credentials; their bodies are never logged.
// The driver empties most of them in its events already; this list does
// not rely on it.
var sensitiveCommands = []string{
	"authenticate", "saslStart", "saslContinue", "getnonce",
	"createUser", "updateUser", "copydbgetnonce", "copydbsaslstart", "copydb",
}

// sensitive reports whether the command named name, with body cmd, may
// hold credentials: a command of sensitiveCommands, or a hello that
// carries speculative authentication.
func sensitive(name string, cmd bson.Raw) bool {
	for _, s := range sensitiveCommands {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	if strings.EqualFold(name, "hello") || strings.EqualFold(name, "isMaster") {
		_, err := bsoncore.Document(cmd).LookupErr("speculativeAuthenticate")
		return err == nil
	}
	return false
}

// collectionCommands are the commands whose first value is the name of the
// collection they act on.
var collectionCommands = map[string]bool{
	"find": true, "insert": true, "update": true, "delete": true,
	"findAndModify": true, "aggregate": true, "count": true, "distinct": true,
	"killCursors": true, "createIndexes": true, "dropIndexes": true,
	"listIndexes": true, "create": true, "drop": true, "collMod": true,
	"collStats": true, "validate": true, "mapReduce": true,
}

// collectionOf returns the name of the collection the command named name
// acts on, as a slice of cmd, or nil if it names none (a database-level
// command, aggregate with 1, a malformed cmd). It allocates nothing.
func collectionOf(name string, cmd bson.Raw) []byte {
	if name == "getMore" {
		v, err := bsoncore.Document(cmd).LookupErr("collection")
		if err != nil {
			return nil
		}
		return stringData(v)
	}
	if !collectionCommands[name] {
		return nil
	}
	// The first element: type, key, value, after the 4-byte length.
	if len(cmd) < 5 || bsoncore.Type(cmd[4]) != bsoncore.TypeString {
		return nil
	}
	rest := cmd[5:]
	end := bytes.IndexByte(rest, 0)
	if end < 0 {
		return nil
	}
	return stringData(bsoncore.Value{Type: bsoncore.TypeString, Data: rest[end+1:]})
}

// stringData returns the bytes of the BSON string v, or nil if v is not a
// well-formed string.
func stringData(v bsoncore.Value) []byte {
	if v.Type != bsoncore.TypeString || len(v.Data) < 5 {
		return nil
	}
	n := int(int32(binary.LittleEndian.Uint32(v.Data)))
	if n < 1 || 4+n > len(v.Data) || v.Data[3+n] != 0 {
		return nil
	}
	return v.Data[4 : 3+n]
}

// noisyKeys are the fields the driver adds to every command, which say
// nothing about it in a log line.
var noisyKeys = map[string]bool{"lsid": true, "$clusterTime": true, "txnNumber": true, "$readPreference": true}

// summarize returns cmd as relaxed Extended JSON of at most limit bytes,
// for a log line: the driver's session fields left out, long strings,
// documents and arrays cut, and a cut line ended with "…". It works in
// time proportional to limit, however big cmd is (an insert of a thousand
// documents), and never fails: a malformed cmd gives what could be read.
// The command named name is redactedCommand if it may hold credentials.
func summarize(name string, cmd bson.Raw, limit int) string {
	if sensitive(name, cmd) {
		return redactedCommand
	}
	if len(cmd) == 0 {
		return "{}"
	}
	// Cut cmd to about limit bytes of BSON, which print as at least as
	// many bytes of JSON, then print that and cut the JSON.
	doc, _ := cutDocument(nil, bsoncore.Document(cmd), limit, false, true)
	js, err := bson.MarshalExtJSON(bson.Raw(doc), false, false)
	if err != nil {
		return "(a malformed command)"
	}
	return cutString(string(js), limit)
}

// cutDocument appends to dst the document src, or its first elements that
// fit in budget bytes, with a last element "…" if any were left out.
// Large documents and arrays inside are cut likewise, and long strings
// shortened. The second result tells whether anything was cut.
func cutDocument(dst []byte, src bsoncore.Document, budget int, array, top bool) ([]byte, bool) {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	start := len(dst)
	cut := false
	n := 0
	for rest := src[min(4, len(src)):]; len(rest) > 1; {
		elem, next, ok := bsoncore.ReadElement(rest)
		if !ok {
			cut = true
			break
		}
		rest = next
		key := elem.Key()
		if top && noisyKeys[key] {
			continue
		}
		left := budget - (len(dst) - start)
		if left <= 0 {
			cut = true
			break
		}
		if len(elem) <= left {
			if elem.Validate() != nil {
				cut = true
				break
			}
			dst = append(dst, elem...)
			n++
			continue
		}
		// Too big: cut it to what is left after its key, if that is
		// enough to show something; each level of a nested document
		// has less, so the cutting ends within budget levels.
		v := elem.Value()
		inner := left - len(key) - 2
		switch {
		case (v.Type == bsoncore.TypeEmbeddedDocument || v.Type == bsoncore.TypeArray) && inner >= 16:
			dst = bsoncore.AppendHeader(dst, v.Type, key)
			dst, _ = cutDocument(dst, bsoncore.Document(v.Data), inner, v.Type == bsoncore.TypeArray, false)
		case v.Type == bsoncore.TypeString && inner >= 8:
			str, _ := v.StringValueOK()
			dst = bsoncore.AppendStringElement(dst, key, cutString(str, inner))
		default:
			dst = bsoncore.AppendStringElement(dst, key, "…")
		}
		n++
		cut = len(rest) > 1 // more elements follow
		break
	}
	if cut {
		key := "…"
		if array {
			key = strconv.Itoa(n)
		}
		dst = bsoncore.AppendStringElement(dst, key, "…")
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst, cut
}

// cutString returns s if it is at most limit bytes long, else its first
// bytes, cut at a rune boundary, and "…", in limit bytes (or the "…" alone
// if limit is under its 3 bytes).
func cutString(s string, limit int) string {
	const ellipsis = "…"
	if len(s) <= limit {
		return s
	}
	n := limit - len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)] + ellipsis
}
