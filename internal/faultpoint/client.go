package faultpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ErrWaitTimeout is returned by Client.Wait when the condition did not hold
// in time.
var ErrWaitTimeout = errors.New("faultpoint: wait timed out")

// Client talks to the control API of one process (FAULTPOINT_ADDR).
type Client struct {
	// Addr is host:port of the control API.
	Addr string
	// HTTP is the client used; nil means one with a 30 s timeout.
	HTTP *http.Client
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values) (State, int, error) {
	u := "http://" + c.Addr + "/debug/fault/" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return State{}, 0, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return State{}, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return State{}, resp.StatusCode, err
	}
	var st State
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusRequestTimeout {
		return st, resp.StatusCode, fmt.Errorf("faultpoint: %s %s: %d %s", method, u, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, resp.StatusCode, fmt.Errorf("faultpoint: %s %s: %w", method, u, err)
	}
	return st, resp.StatusCode, nil
}

// Set arms the point name with a.
func (c *Client) Set(ctx context.Context, name string, a Arm) (State, error) {
	q := url.Values{"action": {string(a.Action)}}
	if a.Action == Delay {
		q.Set("delay", a.Delay.String())
	}
	if a.Count > 0 {
		q.Set("count", strconv.Itoa(a.Count))
	}
	if a.Skip > 0 {
		q.Set("skip", strconv.Itoa(a.Skip))
	}
	st, _, err := c.do(ctx, http.MethodPut, url.PathEscape(name), q)
	return st, err
}

// Get returns the point's state.
func (c *Client) Get(ctx context.Context, name string) (State, error) {
	st, _, err := c.do(ctx, http.MethodGet, url.PathEscape(name), nil)
	return st, err
}

// Release wakes the goroutines paused at name.
func (c *Client) Release(ctx context.Context, name string) (State, error) {
	st, _, err := c.do(ctx, http.MethodPost, url.PathEscape(name)+"/release", nil)
	return st, err
}

// Wait blocks until name has been hit at least hits times and at least
// paused goroutines wait there, for at most timeout (the server side
// bound; ctx bounds the request too). It returns ErrWaitTimeout, with the
// last state, when the condition did not hold in time.
func (c *Client) Wait(ctx context.Context, name string, hits int64, paused int, timeout time.Duration) (State, error) {
	q := url.Values{"hits": {strconv.FormatInt(hits, 10)}, "paused": {strconv.Itoa(paused)}, "timeout": {timeout.String()}}
	hc := *c.http()
	hc.Timeout = timeout + 10*time.Second
	cc := Client{Addr: c.Addr, HTTP: &hc}
	st, code, err := cc.do(ctx, http.MethodGet, url.PathEscape(name)+"/wait", q)
	if err == nil && code == http.StatusRequestTimeout {
		err = ErrWaitTimeout
	}
	return st, err
}
