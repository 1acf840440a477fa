package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// memberStatusTimeout bounds the time one member has to answer its status
// for GET /v1/members/status.
const memberStatusTimeout = 2 * time.Second

// membersStatus asks every member with an HTTP address for its own status
// (GET /v1/status, with the caller's token), in parallel, and answers them
// all: role, term, indexes, last contact and disk of each member as it sees
// them. A member that does not answer within 2s is listed with the error.
func (s *Server) membersStatus(r *http.Request) (any, uint64, error) {
	own := s.node.Status()
	out := make([]wire.MemberStatusAnswer, len(own.Members))
	var wg sync.WaitGroup
	for i, m := range own.Members {
		out[i] = wire.MemberStatusAnswer{ID: m.ID, HTTPAddr: m.HTTPAddr}
		if m.ID == own.ID {
			st := own
			out[i].Status = &st
			continue
		}
		if m.HTTPAddr == "" {
			out[i].Error = "no HTTP address known"
			continue
		}
		wg.Add(1)
		go func(a *wire.MemberStatusAnswer) {
			defer wg.Done()
			start := time.Now()
			st, err := s.fwd.status(r.Context(), a.HTTPAddr, r.Header.Get("Authorization"))
			a.TookMs = float64(time.Since(start).Microseconds()) / 1000
			if err != nil {
				a.Error = err.Error()
				return
			}
			a.Status = st
		}(&out[i])
	}
	wg.Wait()
	return wire.MembersStatus{AskedBy: own.ID, Members: out}, own.AppliedIndex, nil
}

// status reads GET /v1/status of the member at addr.
func (f *forwarder) status(ctx context.Context, addr, authorization string) (*node.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.scheme+"://"+addr+"/v1/status", nil)
	if err != nil {
		return nil, err
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	req.Header.Set(HeaderForwardedBy, f.self)
	resp, err := (&http.Client{Transport: f.transport}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error Error `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
			return nil, fmt.Errorf("%d %s: %s", resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return nil, fmt.Errorf("answered %d", resp.StatusCode)
	}
	var st node.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("status: %v", err)
	}
	return &st, nil
}
