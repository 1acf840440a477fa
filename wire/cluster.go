package wire

import "time"

// Status is GET /v1/status: a point-in-time view of one member.
type Status struct {
	ID                string         `json:"id"`
	State             string         `json:"state"`
	LeaderID          string         `json:"leader_id"`
	LeaderRaftAddr    string         `json:"leader_raft_addr"`
	LeaderHTTPAddr    string         `json:"leader_http_addr"`
	Term              uint64         `json:"term"`
	CommitIndex       uint64         `json:"commit_index"`
	AppliedIndex      uint64         `json:"applied_index"`
	LastLogIndex      uint64         `json:"last_log_index"`
	LastSnapshotIndex uint64         `json:"last_snapshot_index"`
	Members           []MemberStatus `json:"members"`
	// Disk is the free space of the data directory's file system and
	// whether writes are refused for want of it.
	Disk DiskStatus `json:"disk"`
	// IntegrityProblem is the latest corrupt file found while the member
	// runs (empty if none): the member should be rebuilt.
	IntegrityProblem string `json:"integrity_problem,omitempty"`
	// LastContact is when this member, not leading, last heard from the
	// leader (absent on the leader and before any contact).
	LastContact *time.Time `json:"last_contact,omitempty"`
	// LeaderChanges lists the latest leader changes this member saw since
	// it started, oldest first (at most MaxLeaderChanges).
	LeaderChanges []LeaderChange `json:"leader_changes"`
	// BlobStore is how this member's calls to the object store went
	// (absent when the member does not follow them).
	BlobStore *BlobStoreHealth `json:"blob_store,omitempty"`
}

// Blob-store health states (BlobStoreHealth.State).
const (
	// BlobStoreUnknown: no call has reached the store since the member
	// started.
	BlobStoreUnknown = "unknown"
	// BlobStoreOK: the last call was answered.
	BlobStoreOK = "ok"
	// BlobStoreFailing: the last call failed (unreachable, timed out,
	// refused).
	BlobStoreFailing = "failing"
)

// BlobStoreHealth is how a member's calls to the object store went since
// it started. A call answered by the store (a missing object included) is
// a success; one that could not reach it, timed out or was refused (403,
// 5xx) is a failure. Each member follows its own calls: blob reads and
// uploads it served, and, on the leader, the observation of new blobs,
// verify and the garbage collector.
type BlobStoreHealth struct {
	// Location names the store ("s3://bucket/prefix", "file:///dir").
	Location string `json:"location"`
	// State is BlobStoreUnknown, BlobStoreOK or BlobStoreFailing.
	State string `json:"state"`
	// Calls counts the calls, Failures the failed ones,
	// ConsecutiveFailures those since the last success.
	Calls               uint64 `json:"calls"`
	Failures            uint64 `json:"failures"`
	ConsecutiveFailures uint64 `json:"consecutive_failures"`
	// LastSuccess is when the last successful call ended, LastSuccessOp
	// its operation (put, get, head, delete, list, ping).
	LastSuccess   *time.Time `json:"last_success,omitempty"`
	LastSuccessOp string     `json:"last_success_op,omitempty"`
	// LastError is the last failure's error, LastErrorAt when it ended,
	// LastErrorOp its operation.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	LastErrorOp string     `json:"last_error_op,omitempty"`
}

// MaxLeaderChanges bounds Status.LeaderChanges.
const MaxLeaderChanges = 20

// LeaderChange is one change of leader seen by a member: when (its clock),
// the new leader and the term it saw then.
type LeaderChange struct {
	At       time.Time `json:"at"`
	LeaderID string    `json:"leader_id"`
	Term     uint64    `json:"term"`
}

// MemberStatus is one member: a server of the Raft configuration, or a
// member record without a server (Suffrage "none").
type MemberStatus struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Suffrage is "voter", "nonvoter", "staging", or "none" for a member
	// record whose server is not in the Raft configuration.
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// DiskStatus is the free space of a member's data directory and whether
// writes are refused for want of it.
type DiskStatus struct {
	Dir          string `json:"dir"`
	FreeBytes    uint64 `json:"free_bytes"`
	MinFreeBytes uint64 `json:"min_free_bytes"`
	// WritesRefused is true while writes are refused for want of space.
	WritesRefused bool `json:"writes_refused"`
	// RefusedTotal counts writes refused since the process started.
	RefusedTotal uint64 `json:"refused_total"`
	// ApplyStalled is true while the state machine waits for space to
	// commit a batch (the member applies nothing meanwhile).
	ApplyStalled bool `json:"apply_stalled"`
	// RaftStalled is true while Raft waits for space to record its term
	// or vote (the member takes no part in Raft meanwhile).
	RaftStalled bool   `json:"raft_stalled"`
	Error       string `json:"error,omitempty"`
}

// MemberStatusAnswer is one member's own status as another member read it,
// or why it could not.
type MemberStatusAnswer struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"http_addr"`
	// Status is the member's answer to GET /v1/status; nil when it could
	// not be read (Error says why).
	Status *Status `json:"status,omitempty"`
	Error  string  `json:"error,omitempty"`
	// TookMs is how long the member took to answer.
	TookMs float64 `json:"took_ms"`
}

// MembersStatus is GET /v1/members/status: every member's own status, as
// the member asked (AskedBy) read them.
type MembersStatus struct {
	AskedBy string               `json:"asked_by"`
	Members []MemberStatusAnswer `json:"members"`
}

// BackupInfo describes a backup: the first line of a backup file, and
// the answer of POST /v1/snapshot/restore.
type BackupInfo struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Index   uint64    `json:"index"`
	Term    uint64    `json:"term"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"`
	SHA256  string    `json:"sha256"`
	// SchemaVersion is the state machine's layout version.
	SchemaVersion int `json:"schema_version"`
}
