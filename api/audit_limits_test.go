package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
)

// TestAckBatchAboveTheBurst: a batch of more acks than the client's
// burst is charged the whole burst, not refused for ever (a bucket never
// holds more than its burst); the client's next request is then over its
// rate. Found by a mutation audit: charging the batch uncapped survived
// every API test.
func TestAckBatchAboveTheBurst(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.RateLimit = 0.5 // one token per 2s
		c.RateBurst = 5
	})
	c := clientFrom("127.0.0.5")
	var acks []any
	for i := range 8 {
		acks = append(acks, batchItem("nojob", 1, fmt.Sprintf("t%d", i), 1, nil))
	}
	body, _ := json.Marshal(map[string]any{"acks": acks})
	req, _ := http.NewRequest("POST", m.URL+"/v1/acks", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a batch of 8 acks with a burst of 5: %d", resp.StatusCode)
	}
	if status, _, body := get(t, c, m.URL+"/v1/jobs"); status != http.StatusTooManyRequests {
		t.Fatalf("the request after the batch: %d %s", status, body)
	}
}
