package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// ackBody is an ack as workers send it: inline payloads (base64) and a
// manifest delta.
func ackBody(segments int) []byte {
	var b strings.Builder
	b.WriteString(`{"generation":3,"payloads":{"input":"b2Zmc2V0PTEyMzQ1Ng==","output":"c2luaz0xMjM0NTY3"},"manifest":{"blobs":[`)
	for i := range segments {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"key":"job-1/t%d/0123456789abcdef%04d","size":%d}`, i, i, 65536+i)
	}
	b.WriteString(`],"delta":{"add_segments":[`)
	for i := range segments {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"key":"job-1/t%d/0123456789abcdef%04d","offset":0,"length":65536,"first_seq":%d,"last_seq":%d}`, i, i, i*100+1, i*100+100)
	}
	b.WriteString(`]}},"note":"caf\u00e9 \"quoted\" -1.5e+3","x":[true,false,null,-0,0.25,1E9,[],{}]}`)
	return []byte(b.String())
}

// TestShapeScannerPassesRequestBodies: the bodies clients send take the
// scanner's path, with no allocation; otherwise checkJSONShape costs what
// the tokenizer costs.
func TestShapeScannerPassesRequestBodies(t *testing.T) {
	for _, body := range [][]byte{
		ackBody(3),
		ackBody(200),
		[]byte(`{}`),
		[]byte(` {"a": {"b": [1, 2, {"c": "d"}]}, "b": ""} `),
		[]byte(`{"tasks":[{"id":"a","caps":{"state":true}},{"id":"b","caps":{"state":true}}]}`),
		[]byte(strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth)),
	} {
		if !json.Valid(body) {
			t.Fatalf("test body is not JSON: %s", body)
		}
		if !shapeOK(body) {
			t.Errorf("scanner declined a well-formed body: %.80s", body)
		}
		if err := walkJSONShape(body); err != nil {
			t.Errorf("walk refused %.80s: %v", body, err)
		}
	}
	body := ackBody(3)
	if n := testing.AllocsPerRun(100, func() { shapeOK(body) }); n != 0 {
		t.Errorf("scanner allocates %.0f times per ack body", n)
	}
}

// TestShapeScannerDeclines: every refused shape goes to the walk, which
// words the error; and what the scanner cannot judge cheaply too.
func TestShapeScannerDeclines(t *testing.T) {
	wide := `{` + strings.Repeat(`"k":1,`, 0)
	for i := range maxScannedKeys + 1 {
		if i > 0 {
			wide += ","
		}
		wide += fmt.Sprintf(`"k%d":1`, i)
	}
	wide += "}"
	for _, c := range []struct {
		body    string
		wantErr string // "" when the walk passes it
	}{
		{`{"a":1,"a":2}`, `key "a" appears twice`},
		{`{"a":{"b":1,"b":2}}`, `key "b" appears twice`},
		{`{"a":1,"\u0061":2}`, `key "a" appears twice`},
		{`{"\u0061":1}`, ""},
		{strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1), "nested deeper"},
		{`{"a":[1,]}`, "malformed JSON"},
		{`{"a":01}`, "malformed JSON"},
		{`{"a":"x` + "\n" + `"}`, "malformed JSON"},
		{`{"a":tru}`, "malformed JSON"},
		{`{"a" 1}`, "malformed JSON"},
		{`{"a":1`, "EOF"},
		{wide, ""},
		{strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1), "nested deeper"},
		{"{\"\xff\":1,\"\xfe\":2}", `appears twice`},
		{"{\"a\":\"\x1f\"}", "malformed JSON"},
	} {
		if shapeOK([]byte(c.body)) {
			t.Errorf("scanner passed %.60s", c.body)
		}
		err := checkJSONShape([]byte(c.body))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%.60s: %v, want it passed", c.body, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%.60s: %v, want an error with %q", c.body, err, c.wantErr)
		}
	}
}

// FuzzCheckJSONShape: what the scanner passes, the tokenizer's walk passes
// (the scanner only ever answers "fine"), so checkJSONShape answers as the
// walk alone would, error for error.
func FuzzCheckJSONShape(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":[{"b":1},{"b":1}]}`,
		`{"a":"\ud800"}`, "{\"\xff\":1,\"\xfe\":2}", "[\"\x1f\"]",
		strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1), `1x`, `[1x]`, `-`, `-0.5e-7`, `"s"`, `nul`,
		`{"a":{"b":{"c":[[[[]]]]}}}`, string(ackBody(2)),
		strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		walked := walkJSONShape(raw)
		if shapeOK(raw) && walked != nil {
			t.Fatalf("scanner passed %q, the walk refuses it: %v", raw, walked)
		}
		got := checkJSONShape(raw)
		if fmt.Sprint(got) != fmt.Sprint(walked) {
			t.Fatalf("%q: checkJSONShape %v, walk %v", raw, got, walked)
		}
	})
}

func BenchmarkCheckJSONShape(b *testing.B) {
	body := ackBody(3)
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkJSONShape(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := walkJSONShape(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
