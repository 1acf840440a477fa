package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// TestAckResultJSONMatchesMarshal: AckResult.AppendJSON writes the bytes
// json.Marshal writes, for an answer with every field set, nil parts, and
// random ones (nil and empty sizes, strings that need escaping, times of
// other zones and with or without nanoseconds); and AckBatchAnswer's, for
// batches of such answers and of refusals.
func TestAckResultJSONMatchesMarshal(t *testing.T) {
	at := time.Date(2026, 12, 3, 14, 5, 6, 789_000_000, time.UTC)
	later := at.Add(time.Minute)
	full := &AckResult{
		Ack: &Ack{Task: "t-0", At: at, Delay: Duration(1500 * time.Millisecond), Sizes: map[Kind]int{KindState: 3, KindInput: 12},
			ContentHash: "ab12", Index: 42, Lineage: 7},
		Epoch: &Epoch{Job: "job", Epoch: 9, Generation: 2, State: EpochCompleted, BeganAt: at, Deadline: later,
			CompletedAt: &later, EndedAt: &later, Reason: "done", Expected: 4, Acked: 4, PayloadBytes: 15,
			Pinned: true, PinName: "sp", CreateIndex: 40, ModifyIndex: 42},
		Completed: true,
	}
	cases := []*AckResult{full, {}, {Ack: &Ack{}}, {Epoch: &Epoch{}}}
	r := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "plain", "t<1>&\"q\"", "a&b<c>d", "tab\there", "µs", "\u2028", "back\\slash", "\xff"}
	str := func() string { return strs[r.IntN(len(strs))] }
	tm := func() time.Time { return randTime(r) }
	for range 3000 {
		res := &AckResult{Completed: r.IntN(2) == 0}
		if r.IntN(5) > 0 {
			a := &Ack{Task: str(), At: tm(), Delay: Duration(r.Int64N(int64(time.Hour))), ContentHash: str(), Index: r.Uint64(), Lineage: uint64(r.IntN(3))}
			switch r.IntN(3) {
			case 1:
				a.Sizes = map[Kind]int{}
			case 2:
				a.Sizes = map[Kind]int{Kind(str()): r.IntN(100), KindOutput: -r.IntN(5), KindState: r.Int()}
			}
			res.Ack = a
		}
		if r.IntN(5) > 0 {
			e := &Epoch{Job: str(), Epoch: r.Uint64(), Generation: r.Uint64(), State: EpochState(str()), BeganAt: tm(), Deadline: tm(),
				Reason: str(), Expected: r.Int(), Acked: -r.IntN(9), PayloadBytes: r.Int64(), Pinned: r.IntN(2) == 0, PinName: str(),
				CreateIndex: r.Uint64(), ModifyIndex: r.Uint64()}
			if r.IntN(2) == 0 {
				c := tm()
				e.CompletedAt = &c
			}
			if r.IntN(2) == 0 {
				c := tm()
				e.EndedAt = &c
			}
			res.Epoch = e
		}
		cases = append(cases, res)
	}
	matchesMarshal(t, cases)

	// A year json.Marshal refuses is left to it.
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if b, ok := (&AckResult{Ack: &Ack{At: far}}).AppendJSON([]byte("x")); ok || string(b) != "x" {
		t.Fatalf("year 10000: %q, %v", b, ok)
	}

	// The answer to a batch of acks: the same answers, and refusals.
	batches := []*AckBatchAnswer{{}, {Results: []AckBatchResult{}}}
	for i := 0; i+3 <= len(cases); i += 3 {
		b := &AckBatchAnswer{}
		for _, c := range cases[i : i+3] {
			switch r.IntN(3) {
			case 0:
				b.Results = append(b.Results, AckBatchResult{Status: 200, Ack: c})
			case 1:
				b.Results = append(b.Results, AckBatchResult{Status: 409, Error: &Error{Code: Code(str()), Field: str(), Message: str(), Retryable: r.IntN(2) == 0}})
			default:
				b.Results = append(b.Results, AckBatchResult{Status: r.IntN(600)})
			}
		}
		batches = append(batches, b)
	}
	matchesMarshal(t, batches)
	refused := &AckBatchAnswer{Results: []AckBatchResult{{Status: 200, Ack: full}, {Status: 200, Ack: &AckResult{Ack: &Ack{At: far}}}}}
	if b, ok := refused.AppendJSON([]byte("x")); ok || string(b) != "x" {
		t.Fatalf("a batch with a year 10000: %q, %v", b, ok)
	}
}

// TestUploadsJSONMatchesMarshal: Uploads.AppendJSON writes the bytes
// json.Marshal writes, for presigned URLs (their & escaped as encoding/json
// escapes it), headers (none, empty, nil values, several values, names in
// any order), strings that need escaping, times of other zones, and no or
// empty slot lists.
func TestUploadsJSONMatchesMarshal(t *testing.T) {
	at := time.Date(2026, 12, 3, 14, 5, 6, 789_000_000, time.UTC)
	url := "http://127.0.0.1:9000/b/ms/j/t/18edcd52?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261203%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261203T140506Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host%3Bif-none-match&x-id=PutObject&X-Amz-Signature=ab12"
	cases := []Uploads{
		{},
		{LeaseUntil: at, Uploads: []Upload{}},
		{LeaseUntil: at, Uploads: []Upload{{Key: "j/t/k", Method: "PUT", URL: url, ExpiresAt: at}}},
	}
	r := rand.New(rand.NewPCG(3, 4))
	strs := []string{"", "PUT", url, "a&b<c>d", "t<1>&\"q\"", "tab\there", "µs", "\u2028", "back\\slash", "\xff"}
	str := func() string { return strs[r.IntN(len(strs))] }
	tm := func() time.Time { return randTime(r) }
	header := func() http.Header {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return http.Header{}
		}
		h := http.Header{}
		for range 1 + r.IntN(3) {
			var vals []string
			switch r.IntN(3) {
			case 1:
				vals = []string{}
			case 2:
				vals = []string{str(), str()}
			}
			h[str()] = vals
		}
		return h
	}
	for range 2000 {
		u := Uploads{LeaseUntil: tm()}
		if r.IntN(6) > 0 {
			u.Uploads = []Upload{}
		}
		if r.IntN(3) == 0 {
			u.Shared = &UploadsShared{Method: str(), URLPrefix: str(), URLInfix: str(), Header: header(), ExpiresAt: tm()}
		}
		for range r.IntN(4) {
			up := Upload{Key: str(), Method: str(), URL: str(), URLSuffix: str(), Header: header(), ExpiresAt: tm()}
			if r.IntN(4) == 0 {
				up.ExpiresAt = time.Time{}
			}
			u.Uploads = append(u.Uploads, up)
		}
		cases = append(cases, u)
	}
	matchesMarshal(t, cases)

	// A year json.Marshal refuses is left to it.
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, u := range []Uploads{{LeaseUntil: far}, {LeaseUntil: at, Uploads: []Upload{{ExpiresAt: far}}},
		{LeaseUntil: at, Shared: &UploadsShared{ExpiresAt: far}}} {
		if b, ok := u.AppendJSON([]byte("x")); ok || string(b) != "x" {
			t.Fatalf("year 10000: %q, %v", b, ok)
		}
	}
}

// randTime is a time in one of three zones, with or without nanoseconds.
func randTime(r *rand.Rand) time.Time {
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -7*3600)}
	ns := int64(r.IntN(3)) * int64(r.IntN(1_000_000_000))
	return time.Unix(int64(r.IntN(4_000_000_000)), ns).In(zones[r.IntN(len(zones))])
}

// matchesMarshal fails t unless AppendJSON writes the bytes json.Marshal
// writes for every case.
func matchesMarshal[T interface{ AppendJSON([]byte) ([]byte, bool) }](t *testing.T, cases []T) {
	t.Helper()
	for i, c := range cases {
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := c.AppendJSON(nil)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("case %d: AppendJSON (ok %v)\n%s\njson.Marshal\n%s", i, ok, got, want)
		}
	}
}
