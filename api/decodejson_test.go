package api

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"

	"github.com/metastore/metastore/wire"
)

// requestTypes makes a fresh value of every request body type the API
// decodes.
var requestTypes = []func() any{
	func() any { return new(wire.AckBatchRequest) },
	func() any { return new(wire.TaskAckRequest) },
	func() any { return new(wire.JobPutRequest) },
	func() any { return new(wire.AttemptStartRequest) },
	func() any { return new(wire.EpochBeginRequest) },
	func() any { return new(wire.EpochAbortRequest) },
	func() any { return new(wire.PinRequest) },
	func() any { return new(wire.UploadsRequest) },
	func() any { return new(wire.MemberRequest) },
	func() any { return new(wire.TokenRequest) },
}

// decodeBodies are request bodies the two decoders must agree on: what
// clients send, and the corners where JSON decoders are known to differ
// (numbers, escapes, base64, case, null, unknown fields, trailing data).
var decodeBodies = []string{
	string(ackBody(3)),
	`{"acks":[{"job":"j","epoch":7,"task":"t0","generation":3,"payloads":{"input":"eA=="},"manifest":{"blobs":[{"key":"j/k1","size":65536,"checksum":"sha256:ab"}],"delta":{"add_segments":[{"key":"j/k1","offset":0,"length":65536,"first_seq":1,"last_seq":100,"crc32c":"0a0b0c0d"}],"drop_segments":[{"key":"j/k0","offset":0}]}}}]}`,
	`{"acks":[{"job":"j","epoch":7,"task":"t0","generation":3,"manifest":{"base":{"job":"j","task":"t0","epoch":6},"full":{"bases":[{"key":"j/b","offset":0,"length":10}],"segments":[]}}}]}`,
	`{"acks":[{"job":"j","epoch":7,"task":"t0","generation":3,"manifest":{"delta":{"materialize":{"bases":[{"key":"j/b","offset":0,"length":10}]}}}}]}`,
	`{"generation":1,"payloads":{"input":"eA==","output":""}}`,
	`{"generation":1,"payloads":{"input":"eA"}}`,
	`{"generation":1,"payloads":{"input":"e\nA=="}}`,
	`{"generation":1,"payloads":{"input":"e\r\nA=="}}`,
	`{"generation":1,"payloads":{"input":"-_8="}}`,
	`{"generation":1,"payloads":{"input":null}}`,
	`{"generation":1,"payloads":null,"manifest":null}`,
	`{"generation":1.0}`,
	`{"generation":1e2}`,
	`{"generation":-0}`,
	`{"generation":-1}`,
	`{"generation":18446744073709551615}`,
	`{"generation":18446744073709551616}`,
	`{"generation":01}`,
	`{"generation":"1"}`,
	`{"generation":true}`,
	`{"generation":null}`,
	`{"Generation":2}`,
	`{"GENERATION":2,"epoch":3}`,
	`{"generation":2,"generation_x":3}`,
	`{"generation":2} `,
	`{"generation":2} {}`,
	`{"generation":2}x`,
	`{"generation":2`,
	`[]`,
	`null`,
	`"x"`,
	`{"attempt_id":"a\u00e9\ud83d\ude00","tasks":[{"id":"t0","capabilities":["state","incremental"]},{"id":"t1","capabilities":[]}]}`,
	`{"attempt_id":"\ud800","tasks":[]}`,
	`{"attempt_id":"a\u0000b","tasks":[{"id":"t0","capabilities":null}]}`,
	`{"attempt_id":"a","tasks":[{"id":"t0","capabilities":["nope"]}]}`,
	`{"attempt_id":"a","tasks":[{"id":"t0","capabilities":"state"}]}`,
	`{"attempt_id":"a","tasks":[{"id":"t0","capabilities":["state"],"extra":1}]}`,
	`{"config":{"retained":2,"ack_timeout":"10s"}}`,
	`{"config":{"retained":2,"ack_timeout":"ten"}}`,
	`{"config":{"retained":-2}}`,
	`{"config":{"retained":2.5}}`,
	`{"config":{}}`,
	`{"count":3,"task":"t0","generation":1}`,
	`{"count":2147483648,"task":"t0","generation":1}`,
	`{"count":-1,"task":"t0","generation":1}`,
	`{"role":"worker","job":"j","description":"tab\there \"q\" \\ \/"}`,
	`{"id":"m2","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`,
	`{"name":"keep"}`,
	`{"generation":1,"reason":"x"}`,
	`{}`,
	` { } `,
}

// TestDecodeJSONAgrees holds decodeJSON to encoding/json: for every body
// and request type, the same value or the same error as decodeStd. And
// wherever the faster decoder takes a body whole, encoding/json takes it
// too and decodes the same value (decodeJSON would otherwise answer what
// encoding/json refuses). The bodies clients send take the fast path.
func TestDecodeJSONAgrees(t *testing.T) {
	for _, body := range decodeBodies {
		for _, mk := range requestTypes {
			checkDecodersAgree(t, []byte(body), mk)
		}
	}
	batch, err := ackBatchBody(16, 3)
	if err != nil {
		t.Fatal(err)
	}
	checkDecodersAgree(t, batch, requestTypes[0])
	for _, body := range append([]string{string(batch)}, decodeBodies[1:4]...) {
		v := new(wire.AckBatchRequest)
		if rest, err := segjson.Parse([]byte(body), v, segjson.DisallowUnknownFields); err != nil || len(rest) != 0 {
			t.Errorf("the fast decoder refused a client's body (%v, %d bytes left): %s", err, len(rest), body)
		}
	}
}

// checkDecodersAgree compares decodeJSON, decodeStd and the fast
// decoder alone on body decoded as mk's type.
func checkDecodersAgree(t *testing.T, body []byte, mk func() any) {
	t.Helper()
	fast, std := mk(), mk()
	errFast, errStd := decodeJSON(body, fast), decodeStd(body, std)
	name := reflect.TypeOf(fast).Elem().Name()
	if fmt.Sprint(errFast) != fmt.Sprint(errStd) {
		t.Fatalf("%s from %q: decodeJSON answered %v, encoding/json %v", name, body, errFast, errStd)
	}
	if errStd == nil && !reflect.DeepEqual(fast, std) {
		t.Fatalf("%s from %q: decodeJSON decoded %+v, encoding/json %+v", name, body, fast, std)
	}
	alone := mk()
	rest, err := segjson.Parse(body, alone, segjson.DisallowUnknownFields)
	if err == nil && len(rest) == 0 {
		if errStd != nil {
			t.Fatalf("%s from %q: the fast decoder takes what encoding/json refuses (%v)", name, body, errStd)
		}
		if !reflect.DeepEqual(alone, std) {
			t.Fatalf("%s from %q: the fast decoder decoded %+v, encoding/json %+v", name, body, alone, std)
		}
	}
}

// FuzzDecodeJSON: on any body decodeBody would hand to decodeJSON (valid
// UTF-8, of a shape checkJSONShape passes), decodeJSON answers what
// encoding/json answers, for every request type.
func FuzzDecodeJSON(f *testing.F) {
	for _, b := range decodeBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(strings.TrimSpace(string(body))) == 0 || !utf8.Valid(body) || checkJSONShape(body) != nil {
			return
		}
		for _, mk := range requestTypes {
			checkDecodersAgree(t, body, mk)
		}
	})
}
