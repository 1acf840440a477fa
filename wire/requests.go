package wire

import (
	"net/http"
	"time"

	"github.com/metastore/metastore/manifests"
)

// Request bodies. Path parameters (job, epoch, task) are not repeated in
// them.

// JobPutRequest is PUT /v1/jobs/{job}.
type JobPutRequest struct {
	Config JobConfig `json:"config"`
}

// TaskRequest is one task of AttemptStartRequest. Capabilities is
// required: a task that checkpoints nothing says so with [].
type TaskRequest struct {
	ID   string `json:"id"`
	Caps *Caps  `json:"capabilities"`
}

// AttemptStartRequest is POST /v1/jobs/{job}/attempts.
type AttemptStartRequest struct {
	AttemptID string        `json:"attempt_id"`
	Tasks     []TaskRequest `json:"tasks"`
}

// EpochBeginRequest is POST /v1/jobs/{job}/epochs.
type EpochBeginRequest struct {
	Generation uint64 `json:"generation"`
	Epoch      uint64 `json:"epoch"`
}

// TaskAckRequest is PUT /v1/jobs/{job}/epochs/{epoch}/acks/{task}.
type TaskAckRequest struct {
	Generation uint64          `json:"generation"`
	Payloads   map[Kind][]byte `json:"payloads,omitempty"`
	Manifest   *ManifestAck    `json:"manifest,omitempty"`
}

// AckBatchRequest is POST /v1/acks: the acks of several tasks, of one job
// or of many, sent together. Each is checked, authorized and applied as
// if it came alone to PUT /v1/jobs/{job}/epochs/{epoch}/acks/{task}, and
// answered in its own result; one ack's refusal does not touch another.
type AckBatchRequest struct {
	Acks []AckBatchItem `json:"acks"`
}

// AckBatchItem is one ack of an AckBatchRequest: the target of its route
// and the body of TaskAckRequest.
type AckBatchItem struct {
	Job        string          `json:"job"`
	Epoch      uint64          `json:"epoch"`
	Task       string          `json:"task"`
	Generation uint64          `json:"generation"`
	Payloads   map[Kind][]byte `json:"payloads,omitempty"`
	Manifest   *ManifestAck    `json:"manifest,omitempty"`
}

// MaxBatchAcks bounds the acks of one AckBatchRequest.
const MaxBatchAcks = 256

// ManifestAck is the manifest part of an ack: the task's state in the
// object store, as a delta or whole.
type ManifestAck struct {
	// Base names the checkpoint the task restored from, on the first ack of
	// an attempt; absent there, the task starts from an empty manifest.
	// Later acks of the attempt extend the previous ack and omit it.
	Base *BaseRef `json:"base,omitempty"`
	// Blobs commits uploads (held by intents) that this ack references.
	Blobs []BlobCommit `json:"blobs,omitempty"`
	// Delta is the change from the previous manifest (tasks with the
	// incremental flag); Full the whole manifest (tasks without it).
	Delta *manifests.Delta    `json:"delta,omitempty"`
	Full  *manifests.Manifest `json:"full,omitempty"`
}

// BaseRef names the checkpoint a task restored from.
type BaseRef struct {
	Job   string `json:"job"`
	Task  string `json:"task"`
	Epoch uint64 `json:"epoch"`
}

// BlobCommit turns an upload intent into a live blob.
type BlobCommit struct {
	Key      string `json:"key"`
	Size     uint64 `json:"size"`
	Checksum string `json:"checksum,omitempty"`
}

// EpochAbortRequest is POST /v1/jobs/{job}/epochs/{epoch}/abort.
type EpochAbortRequest struct {
	Generation uint64 `json:"generation"`
	Reason     string `json:"reason"`
}

// PinRequest is POST /v1/jobs/{job}/epochs/{epoch}/pin.
type PinRequest struct {
	Name string `json:"name"`
}

// UploadsRequest is POST /v1/jobs/{job}/uploads: Count (default 1, at most
// MaxIntents) upload slots for a task of generation Generation.
type UploadsRequest struct {
	Generation uint64 `json:"generation"`
	Task       string `json:"task"`
	Count      int    `json:"count"`
}

// Upload is one upload slot: where to put one blob. A slot of an answer
// in the shared form has only Key and URLSuffix (Uploads.Expand fills in
// the rest).
type Upload struct {
	Key       string      `json:"key"`
	Method    string      `json:"method,omitempty"`
	URL       string      `json:"url,omitempty"`
	URLSuffix string      `json:"url_suffix,omitempty"`
	Header    http.Header `json:"header,omitempty"`
	ExpiresAt time.Time   `json:"expires_at,omitzero"`
}

// MemberRequest is POST /v1/members: a member to add.
type MemberRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

// TokenRequest is POST /v1/tokens: Role operator, or worker with Job or
// JobPrefix.
type TokenRequest struct {
	Role        Role   `json:"role"`
	Job         string `json:"job,omitempty"`
	JobPrefix   string `json:"job_prefix,omitempty"`
	Description string `json:"description,omitempty"`
}
