package mongo

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func raw(t testing.TB, doc bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// d returns the document of the keys and values of kv, in order.
func d(kv ...any) bson.D {
	doc := make(bson.D, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		doc = append(doc, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return doc
}

func TestCollectionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  bson.D
		want string
	}{
		{"find", d("find", "orders", "filter", d()), "orders"},
		{"insert", d("insert", "orders", "documents", bson.A{}), "orders"},
		{"aggregate", d("aggregate", "orders", "pipeline", bson.A{}), "orders"},
		{"aggregate", d("aggregate", 1, "pipeline", bson.A{}), ""}, // database-level
		{"getMore", d("getMore", int64(42), "collection", "orders"), "orders"},
		{"getMore", d("getMore", int64(42)), ""},
		{"ping", d("ping", 1), ""},
		{"createUser", d("createUser", "bob", "pwd", "x"), ""}, // a user, not a collection
		{"dropDatabase", d("dropDatabase", 1), ""},
	} {
		got := string(collectionOf(tc.name, raw(t, tc.cmd)))
		if got != tc.want {
			t.Errorf("collectionOf(%s %v) = %q, want %q", tc.name, tc.cmd, got, tc.want)
		}
	}
	for _, b := range [][]byte{nil, {5, 0, 0, 0}, {9, 0, 0, 0, 2, 'f', 0, 200, 0, 0, 0}} {
		if got := collectionOf("find", b); got != nil {
			t.Errorf("collectionOf(find, %v) = %q, want nil", b, got)
		}
	}
}

func TestCollectionOfAllocs(t *testing.T) {
	cmd := raw(t, d("find", "orders", "filter", d("_id", 1)))
	labels := newLabelSet(10)
	if n := testing.AllocsPerRun(100, func() { labels.ofBytes(collectionOf("find", cmd)) }); n != 0 {
		t.Errorf("labelling a known collection allocates %v times, want 0", n)
	}
}

func TestSummarize(t *testing.T) {
	big := strings.Repeat("x", 1000)
	docs := bson.A{}
	for i := range 100 {
		docs = append(docs, d("_id", i, "name", "item"))
	}
	for _, tc := range []struct {
		about string
		name  string
		cmd   bson.D
		want  string // the whole summary, or its start if cut
		cut   bool
	}{
		{"relaxed JSON, no session", "find",
			d("find", "orders", "filter", d("qty", d("$gt", 5)), "lsid", d("id", 1), "$db", "shop"),
			`{"find":"orders","filter":{"qty":{"$gt":5}},"$db":"shop"}`, false},
		{"long string cut", "find",
			d("find", "orders", "filter", d("note", big)),
			`{"find":"orders","filter":{"note":"xxxx`, true},
		{"many documents cut", "insert",
			d("insert", "orders", "ordered", true, "documents", docs),
			`{"insert":"orders","ordered":true,"documents":[{"_id":0,"name":"item"},`, true},
		{"saslStart", "saslStart", d("saslStart", 1, "payload", []byte("n,,n=bob,r=secret")), redactedCommand, false},
		{"saslContinue", "saslContinue", d("saslContinue", 1, "payload", []byte("secret")), redactedCommand, false},
		{"createUser", "createUser", d("createUser", "bob", "pwd", "secret"), redactedCommand, false},
		{"updateUser, any case", "UpdateUser", d("updateUser", "bob", "pwd", "secret"), redactedCommand, false},
		{"hello with auth", "hello", d("hello", 1, "speculativeAuthenticate", d("payload", "secret")), redactedCommand, false},
		{"hello", "hello", d("hello", 1), `{"hello":1}`, false},
		{"redacted by the driver", "authenticate", nil, redactedCommand, false},
	} {
		var cmd bson.Raw
		if tc.cmd != nil {
			cmd = raw(t, tc.cmd)
		}
		got := summarize(tc.name, cmd, MaxLoggedCommand)
		if len(got) > MaxLoggedCommand {
			t.Errorf("%s: summary is %d bytes, over %d: %s", tc.about, len(got), MaxLoggedCommand, got)
		}
		if strings.Contains(got, "secret") {
			t.Errorf("%s: summary shows the secret: %s", tc.about, got)
		}
		if tc.cut {
			if !strings.HasPrefix(got, tc.want) || !strings.Contains(got, "…") {
				t.Errorf("%s: summary = %s\nwant it to start with %s and hold …", tc.about, got, tc.want)
			}
		} else if got != tc.want {
			t.Errorf("%s: summary = %s\nwant %s", tc.about, got, tc.want)
		}
	}
}

func TestCutString(t *testing.T) {
	for _, tc := range []struct {
		s     string
		limit int
		want  string
	}{
		{"abc", 3, "abc"},
		{"abcdef", 5, "ab…"},
		{"ééé", 5, "é…"}, // é is 2 bytes, … 3
		{"ééé", 4, "…"},  // half an é would not be valid
		{"ééé", 6, "ééé"},
		{"éééé", 7, "éé…"},
		{"abcdef", 2, "…"},
	} {
		if got := cutString(tc.s, tc.limit); got != tc.want {
			t.Errorf("cutString(%q, %d) = %q, want %q", tc.s, tc.limit, got, tc.want)
		}
	}
}

func TestRedactURI(t *testing.T) {
	for _, tc := range []struct{ uri, msg, want string }{
		{"mongodb://bob:s3cret@h/db", "bad thing s3cret here", "bad thing xxxxx here"},
		{"mongodb://bob:s3c@ret@h", "unescaped s3c@ret", "unescaped xxxxx"},
		{"mongodb://bob@h", "bob here", "bob here"},
		{"mongodb://h/?x=s3cret", "s3cret", "s3cret"}, // no user info
		{"garbage", "garbage", "garbage"},
	} {
		if got := redactURI(tc.uri, tc.msg); got != tc.want {
			t.Errorf("redactURI(%q, %q) = %q, want %q", tc.uri, tc.msg, got, tc.want)
		}
	}
}

func TestLabelSetCap(t *testing.T) {
	l := newLabelSet(3)
	for i := range 5 {
		want := fmt.Sprint("c", i)
		if i >= 3 {
			want = OtherLabel
		}
		if got := l.of(fmt.Sprint("c", i)); got != want {
			t.Errorf("label %d = %q, want %q", i, got, want)
		}
	}
	if got := l.ofBytes([]byte("c1")); got != "c1" {
		t.Errorf("a known label after the cap = %q, want c1", got)
	}
	if got := newLabelSet(3).ofBytes([]byte("bad\xff")); got != OtherLabel {
		t.Errorf("the label of invalid UTF-8 = %q, want %q", got, OtherLabel)
	}
}

// FuzzSummarize feeds summarize and collectionOf any bytes as a command:
// they never panic, and a summary never exceeds MaxLoggedCommand bytes.
func FuzzSummarize(f *testing.F) {
	for _, doc := range []bson.D{
		d("find", "orders", "filter", d("a", 1)),
		d("insert", "orders", "documents", bson.A{d("s", strings.Repeat("é", 300))}),
		d("aggregate", 1, "pipeline", bson.A{d("$match", d())}),
		d("getMore", int64(7), "collection", "c"),
	} {
		b, err := bson.Marshal(doc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add("find", b)
	}
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		collectionOf(name, b)
		collectionOf("getMore", b)
		s := summarize(name, b, MaxLoggedCommand)
		if len(s) > MaxLoggedCommand {
			t.Fatalf("summary of %d bytes: %q", len(s), s)
		}
		if utf8.ValidString(string(b)) && !utf8.ValidString(s) {
			t.Fatalf("summary of valid UTF-8 is not: %q", s)
		}
	})
}
