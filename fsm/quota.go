package fsm

import "encoding/json"

// JobUsage is what one job holds in the blob table: its open upload
// intents and the blobs that are live, with their bytes. The API's quotas
// (api/quota.go) are checked against it on the leader.
type JobUsage struct {
	Intents   int    `json:"intents"`
	LiveBlobs int    `json:"live_blobs"`
	LiveBytes uint64 `json:"live_bytes"`
}

// JobUsage scans the blobs the job owns. Every key the store hands out
// starts with the job's id and a slash, so the scan reads that prefix only.
func (f *FSM) JobUsage(job string) (JobUsage, uint64, error) {
	var u JobUsage
	idx, err := f.view(func(t *txn) error {
		return t.scan(bucketBlobs, []byte(job+"/"), func(_, v []byte) (bool, error) {
			var b struct {
				Job   string    `json:"job"`
				State BlobState `json:"state"`
				Size  uint64    `json:"size"`
			}
			if err := json.Unmarshal(v, &b); err != nil {
				return false, err
			}
			if b.Job != job {
				return true, nil
			}
			switch b.State {
			case BlobIntent:
				u.Intents++
			case BlobLive:
				u.LiveBlobs++
				u.LiveBytes += b.Size
			}
			return true, nil
		})
	})
	return u, idx, err
}
