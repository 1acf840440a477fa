package wire

import (
	"time"

	"github.com/metastore/metastore/manifests"
)

// The objects that wrap an answer. Fields are in the order of their JSON
// names, the order in which the API has always written them.

// JobList is GET /v1/jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
}

// EpochList is GET /v1/jobs/{job}/epochs.
type EpochList struct {
	Epochs []Epoch `json:"epochs"`
}

// Membership is GET /v1/members: the Raft membership as a member reports
// it.
type Membership struct {
	LeaderID string         `json:"leader_id"`
	Members  []MemberStatus `json:"members"`
}

// MembershipChange is POST /v1/members (Added) and DELETE
// /v1/members/{id} (Removed): the member, and the membership after it.
type MembershipChange struct {
	Added   string         `json:"added,omitempty"`
	Members []MemberStatus `json:"members"`
	Removed string         `json:"removed,omitempty"`
}

// LeaderTransfer is POST /v1/leader/transfer.
type LeaderTransfer struct {
	LeaderID       string `json:"leader_id"`
	PreviousLeader string `json:"previous_leader"`
}

// StateHash is GET /v1/state/hash: a digest of the member's whole state at
// an applied index; members at the same index answer the same digest.
type StateHash struct {
	Hash  string `json:"hash"`
	ID    string `json:"id"`
	Index uint64 `json:"index"`
}

// TokenList is GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// TokenRevoked is DELETE /v1/tokens/{accessor}.
type TokenRevoked struct {
	Revoked Token `json:"revoked"`
}

// Uploads is POST /v1/jobs/{job}/uploads: the slots and the end of their
// lease. In the shared form (?shared=true, uploads.go) Shared holds what
// the slots have in common, said once, and each slot its key and the end
// of its URL.
type Uploads struct {
	LeaseUntil time.Time      `json:"lease_until"`
	Shared     *UploadsShared `json:"shared,omitempty"`
	Uploads    []Upload       `json:"uploads"`
}

// ObjectPut is PUT /v1/objects/{key}.
type ObjectPut struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// BlobStatsAnswer is GET /v1/blobs: the blob statistics and the object
// store they describe.
type BlobStatsAnswer struct {
	Blobs *BlobStats `json:"blobs"`
	Store string     `json:"store"`
}

// FsckAnswer is GET /v1/fsck: OK is false on any mismatch or problem.
type FsckAnswer struct {
	OK     bool       `json:"ok"`
	Report FsckReport `json:"report"`
}

// ManifestAnswer is GET /v1/jobs/{job}/epochs/{epoch}/manifests/{task}.
type ManifestAnswer struct {
	Bytes    uint64              `json:"bytes"`
	Epoch    uint64              `json:"epoch"`
	Job      string              `json:"job"`
	Manifest *manifests.Manifest `json:"manifest"`
	Task     string              `json:"task"`
}

// SnapshotRestored is POST /v1/snapshot/restore.
type SnapshotRestored struct {
	Restored BackupInfo `json:"restored"`
}
