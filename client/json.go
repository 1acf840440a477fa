package client

import (
	"encoding/json"

	segjson "github.com/segmentio/encoding/json"
)

// The client encodes the requests it sends most (acks, epochs, upload
// slots) and decodes every answer with github.com/segmentio/encoding's
// JSON, made to be encoding/json's drop-in and about three times faster at
// these bodies: decoding the answers with encoding/json was a quarter of
// the CPU a worker process spent at 64 acking tasks. TestJSONAsEncodingJSON
// holds it to encoding/json's bytes and values for the API's types. Its
// encoder ignores the omitzero option: a request body that needs it is
// encoded with encoding/json (TestMarshaledRequestsHaveNoOmitzero).

// marshal encodes v as json.Marshal does.
func marshal(v any) ([]byte, error) { return segjson.Marshal(v) }

// unmarshal decodes raw into v as json.Unmarshal does; encoding/json
// decodes what the faster decoder refuses, and words the error.
func unmarshal(raw []byte, v any) error {
	if err := segjson.Unmarshal(raw, v); err == nil {
		return nil
	}
	return json.Unmarshal(raw, v)
}
