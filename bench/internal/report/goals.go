package report

import (
	"fmt"
	"strings"

	"github.com/metastore/metastore/bench/internal/sut"
)

// The goals the metastore is measured against.
const (
	// GoalThroughputFactor: the metastore's acks/s at least this many
	// times the best variant's of each peer (etcd, ZooKeeper; lean or
	// compare-and-swap), with a p99 ack latency no higher than the lowest
	// of the peer's variants.
	GoalThroughputFactor = 5.0
	// GoalManifestRatio: mean time per ack at the largest manifest over
	// that at the smallest, at most this.
	GoalManifestRatio = 1.2
	// GoalGCRate: deletions per second, at least.
	GoalGCRate = 5000.0
	// GoalGCEntries: Raft entries per 1,000 deletions, at most.
	GoalGCEntries = 2.0
	// GoalFailoverMedian: median seconds from a leader's kill to the
	// first successful ack, less than this.
	GoalFailoverMedian = 2.0
	// GoalFootprintRSS: resident memory (VmRSS) of each member with the
	// footprint workload's live blobs (by default 1,000,000), at most.
	GoalFootprintRSS = 1 << 30
	// GoalRestartSeconds: seconds from starting a killed member again
	// until it serves, caught up with the leader, at most.
	GoalRestartSeconds = 30.0
	// GoalCPUPer1000Acks: CPU seconds of all members per 1,000 acks at the
	// highest concurrency, at most.
	GoalCPUPer1000Acks = 0.5
	// GoalUploadSlotP99MS: p99 of the upload-slot (Keys) calls at the
	// highest concurrency, in milliseconds, at most.
	GoalUploadSlotP99MS = 50.0
)

// Goal statuses.
const (
	Pass = "PASS"
	Miss = "MISS"
	// NA is the status of a goal whose figures were not measured.
	NA = "N/A"
)

// Goal is the verdict on one goal, with the figures it was judged on.
type Goal struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	Status      string `json:"status"`
	Detail      string `json:"detail"`
}

// EvaluateGoals judges every goal on r's measurements.
func EvaluateGoals(r *Results) []Goal {
	ms := r.System(Metastore)
	return []Goal{
		throughputGoal(r, ms),
		cpuGoal(ms),
		uploadSlotGoal(ms),
		bytesGoal(r, ms),
		restoreGoal(r, ms),
		manifestGoal(ms),
		resumeGoal(ms),
		gcGoal(ms),
		failoverGoal(ms),
		footprintGoal(ms),
	}
}

func verdict(ok bool) string {
	if ok {
		return Pass
	}
	return Miss
}

// throughputGoal judges the metastore's acks/s and p99 at the highest
// concurrency against each peer family's best variant in the run: the
// highest acks/s of the family's designs, and the lowest p99.
func throughputGoal(r *Results, ms *System) Goal {
	g := Goal{
		ID:          "ack_throughput",
		Description: fmt.Sprintf("ack throughput >= %gx the best variant of each peer, with p99 ack latency <= the lowest of its variants (at the highest concurrency)", GoalThroughputFactor),
		Status:      NA,
	}
	top := topPoint(ms)
	if top == nil {
		g.Detail = "metastore throughput not measured"
		return g
	}
	parts := []string{fmt.Sprintf("W=%d: metastore %.0f acks/s, p99 %.2f ms", top.Workers, top.AcksPerSecond, top.AckLatency.P99MS)}
	compared, ok := 0, true
	for _, fam := range PeerFamilies {
		var fast, slow *ThroughputPoint // highest acks/s; lowest p99
		var fastName, slowName string
		for i := range r.Systems {
			ps := &r.Systems[i]
			if !InFamily(ps.Name, fam) {
				continue
			}
			p := ps.Point(top.Workers)
			if p == nil || p.AcksPerSecond == 0 {
				continue
			}
			if fast == nil || p.AcksPerSecond > fast.AcksPerSecond {
				fast, fastName = p, ps.Name
			}
			if p.AckLatency.Count > 0 && (slow == nil || p.AckLatency.P99MS < slow.AckLatency.P99MS) {
				slow, slowName = p, ps.Name
			}
		}
		if fast == nil {
			parts = append(parts, fam+" not measured")
			continue
		}
		compared++
		factor := top.AcksPerSecond / fast.AcksPerSecond
		quick := factor >= GoalThroughputFactor
		tail := slow == nil || top.AckLatency.P99MS <= slow.AckLatency.P99MS
		ok = ok && quick && tail
		part := fmt.Sprintf("best %s: %s %.0f acks/s (%.2fx, %s)", fam, fastName, fast.AcksPerSecond, factor, verdict(quick))
		if slow != nil {
			part += fmt.Sprintf(", lowest p99 %s %.2f ms (%s)", slowName, slow.AckLatency.P99MS, verdict(tail))
		}
		parts = append(parts, part)
	}
	g.Detail = strings.Join(parts, "; ")
	if compared > 0 {
		g.Status = verdict(ok)
	}
	return g
}

func manifestGoal(ms *System) Goal {
	g := Goal{
		ID:          "manifest_size",
		Description: fmt.Sprintf("mean time per ack at the largest manifest / at the smallest (by default 100,000 and 1,000 segments) <= %g", GoalManifestRatio),
		Status:      NA,
		Detail:      "metastore manifest cost not measured at two sizes",
	}
	if ms == nil || ms.Manifest == nil {
		return g
	}
	q := manifestTimeRatio(ms.Manifest)
	if q == 0 {
		return g
	}
	var small, large ManifestPoint
	for _, p := range ms.Manifest.Points {
		if p.AckTime.Count == 0 {
			continue
		}
		if small.Size == 0 || p.Size < small.Size {
			small = p
		}
		if p.Size > large.Size {
			large = p
		}
	}
	g.Status = verdict(q <= GoalManifestRatio)
	g.Detail = fmt.Sprintf("mean %.2f ms at %d segments, %.2f ms at %d: ratio %.2f",
		large.AckTime.MeanMS, large.Size, small.AckTime.MeanMS, small.Size, q)
	return g
}

func resumeGoal(ms *System) Goal {
	g := Goal{
		ID:          "resume_stateless",
		Description: "zero object-store requests for the stateless tasks on resume",
		Status:      NA,
		Detail:      "resume not measured",
	}
	if ms == nil || ms.Extras == nil || ms.Extras.Resume == nil {
		return g
	}
	res := ms.Extras.Resume
	g.Status = verdict(res.MetastoreStatelessRequests == 0)
	g.Detail = fmt.Sprintf("%d tasks (%d stateful): %d requests for stateless tasks, %d in all; naive restore %d (%d NoSuchKey)",
		res.Tasks, res.Stateful, res.MetastoreStatelessRequests, res.MetastoreRequests, res.NaiveRequests, res.NaiveNoSuchKey)
	return g
}

func gcGoal(ms *System) Goal {
	g := Goal{
		ID:          "gc",
		Description: fmt.Sprintf("GC >= %.0f deletions/s with <= %g Raft entries per 1,000 deletions", GoalGCRate, GoalGCEntries),
		Status:      NA,
		Detail:      "GC not measured",
	}
	if ms == nil || ms.Extras == nil || ms.Extras.GC == nil {
		return g
	}
	gc := ms.Extras.GC
	fast := gc.PerSecond >= GoalGCRate
	lean := gc.EntriesPer1000 <= GoalGCEntries
	g.Status = verdict(fast && lean)
	g.Detail = fmt.Sprintf("%d deleted in %.2f s: %.0f deletions/s (%s), %d Raft entries, %.2f per 1,000 (%s)",
		gc.Deleted, gc.Seconds, gc.PerSecond, verdict(fast), gc.RaftEntries, gc.EntriesPer1000, verdict(lean))
	return g
}

func failoverGoal(ms *System) Goal {
	g := Goal{
		ID:          "failover",
		Description: fmt.Sprintf("failover median < %g s", GoalFailoverMedian),
		Status:      NA,
		Detail:      "metastore failover not measured",
	}
	if ms == nil || ms.Failover == nil || len(ms.Failover.Samples) == 0 {
		return g
	}
	f := ms.Failover
	g.Status = verdict(f.MedianSeconds < GoalFailoverMedian)
	g.Detail = fmt.Sprintf("%d kills: median %.3f s, p90 %.3f s, max %.3f s", len(f.Samples), f.MedianSeconds, f.P90Seconds, f.MaxSeconds)
	return g
}

// footprintGoal judges the members' resident memory at the footprint's
// blob count and the restart of the member the footprint killed (its
// time, and its resident memory once it caught up, which counts as a
// member's). The detail gives the largest RssAnon and RssFile beside the
// largest VmRSS: VmRSS counts the resident pages of the memory-mapped
// state file, which the kernel can reclaim.
func footprintGoal(ms *System) Goal {
	g := Goal{
		ID:          "footprint",
		Description: fmt.Sprintf("at the footprint's blob count: VmRSS per member <= %d GiB, and a killed member restarts and serves within %g s", GoalFootprintRSS>>30, GoalRestartSeconds),
		Status:      NA,
		Detail:      "footprint not measured",
	}
	if ms == nil || ms.Extras == nil || ms.Extras.Footprint == nil || !ms.Extras.Footprint.Measured() {
		return g
	}
	fp := ms.Extras.Footprint
	top := maxIndex(fp.RSSBytes)
	lean := fp.RSSBytes[top] <= GoalFootprintRSS
	parts := []string{fmt.Sprintf("%d blobs: VmRSS max %s (%s, %s)", fp.Blobs, humanBytes(fp.RSSBytes[top]), footprintMember(fp, top), verdict(lean))}
	if len(fp.RSSAnonBytes) > 0 && len(fp.RSSFileBytes) > 0 {
		parts = append(parts, fmt.Sprintf("RssAnon max %s, RssFile max %s",
			humanBytes(fp.RSSAnonBytes[maxIndex(fp.RSSAnonBytes)]), humanBytes(fp.RSSFileBytes[maxIndex(fp.RSSFileBytes)])))
	} else {
		parts = append(parts, "RssAnon not reported")
	}
	restarted, quick := false, false
	switch {
	case fp.RestartError != "":
		restarted = true
		parts = append(parts, fmt.Sprintf("member %s did not restart and catch up (%s; the error is with the footprint's figures)", fp.RestartMember, Miss))
	case fp.RestartSecs > 0:
		restarted = true
		quick = fp.RestartSecs <= GoalRestartSeconds
		parts = append(parts, fmt.Sprintf("member %s killed and started again: answered its status after %.2f s, ready at the leader's index %d after %.2f s (%s)",
			fp.RestartMember, fp.RestartServeSecs, fp.RestartIndex, fp.RestartSecs, verdict(quick)))
		if fp.RestartRSSBytes > 0 {
			leanAgain := fp.RestartRSSBytes <= GoalFootprintRSS
			lean = lean && leanAgain
			detail := fmt.Sprintf("VmRSS then %s", humanBytes(fp.RestartRSSBytes))
			if fp.RestartRSSAnonBytes > 0 || fp.RestartRSSFileBytes > 0 {
				detail += fmt.Sprintf(" (RssAnon %s, RssFile %s)", humanBytes(fp.RestartRSSAnonBytes), humanBytes(fp.RestartRSSFileBytes))
			}
			parts = append(parts, fmt.Sprintf("%s, %s", detail, verdict(leanAgain)))
		}
	default:
		parts = append(parts, "restart not measured")
	}
	g.Detail = strings.Join(parts, "; ")
	switch {
	case !lean || (restarted && !quick):
		g.Status = Miss
	case restarted:
		g.Status = Pass
	}
	return g
}

// maxIndex is the index of the largest of xs (not empty).
func maxIndex(xs []int64) int {
	i := 0
	for j, x := range xs {
		if x > xs[i] {
			i = j
		}
	}
	return i
}

// footprintMember names the member of the footprint's per-member figures
// at index i.
func footprintMember(fp *sut.FootprintResult, i int) string {
	if i < len(fp.MemberIDs) {
		return fp.MemberIDs[i]
	}
	return fmt.Sprintf("member %d", i+1)
}

// topPoint is the metastore's throughput point at its highest concurrency.
func topPoint(ms *System) *ThroughputPoint {
	if ms == nil || len(ms.Throughput) == 0 {
		return nil
	}
	top := &ms.Throughput[0]
	for i := range ms.Throughput {
		if ms.Throughput[i].Workers > top.Workers {
			top = &ms.Throughput[i]
		}
	}
	return top
}

func cpuGoal(ms *System) Goal {
	g := Goal{
		ID:          "cpu",
		Description: fmt.Sprintf("member CPU <= %g s per 1,000 acks, all members together (at the highest concurrency)", GoalCPUPer1000Acks),
		Status:      NA,
		Detail:      "metastore CPU not measured",
	}
	top := topPoint(ms)
	if top == nil || !top.CPUMeasured || top.Acks == 0 {
		return g
	}
	g.Status = verdict(top.CPUSecondsPer1000Acks <= GoalCPUPer1000Acks)
	g.Detail = fmt.Sprintf("W=%d: %.3f s per 1,000 acks", top.Workers, top.CPUSecondsPer1000Acks)
	return g
}

func uploadSlotGoal(ms *System) Goal {
	g := Goal{
		ID:          "upload_slot",
		Description: fmt.Sprintf("upload-slot (keys) call p99 <= %g ms (at the highest concurrency)", GoalUploadSlotP99MS),
		Status:      NA,
		Detail:      "metastore upload-slot calls not measured",
	}
	top := topPoint(ms)
	if top == nil || top.KeysLatency.Count == 0 {
		return g
	}
	g.Status = verdict(top.KeysLatency.P99MS <= GoalUploadSlotP99MS)
	g.Detail = fmt.Sprintf("W=%d: p99 %.2f ms over %d calls", top.Workers, top.KeysLatency.P99MS, top.KeysLatency.Count)
	return g
}

// bytesGoal judges the metastore's bytes written per ack at every manifest
// size against the etcd variant that wrote the fewest at that size.
func bytesGoal(r *Results, ms *System) Goal {
	g := Goal{
		ID:          "bytes_per_ack",
		Description: "bytes written per ack (the members' write_bytes) <= the best etcd variant's, at every manifest size",
		Status:      NA,
		Detail:      "metastore or etcd manifest cost not measured",
	}
	if ms == nil || ms.Manifest == nil {
		return g
	}
	var parts []string
	compared, ok := 0, true
	for _, p := range ms.Manifest.Points {
		if p.AckTime.Count == 0 {
			continue
		}
		var best *ManifestPoint
		var bestName string
		for i := range r.Systems {
			ps := &r.Systems[i]
			if !InFamily(ps.Name, Etcd) || ps.Manifest == nil {
				continue
			}
			for j := range ps.Manifest.Points {
				q := &ps.Manifest.Points[j]
				if q.Size == p.Size && q.AckTime.Count > 0 && (best == nil || q.BytesPerAck < best.BytesPerAck) {
					best, bestName = q, ps.Name
				}
			}
		}
		if best == nil {
			continue
		}
		compared++
		pass := p.BytesPerAck <= best.BytesPerAck
		ok = ok && pass
		part := fmt.Sprintf("%d segments: %.0f against %s %.0f (%s)", p.Size, p.BytesPerAck, bestName, best.BytesPerAck, verdict(pass))
		if p.DeviceBytesPerAck > 0 && best.DeviceBytesPerAck > 0 {
			part += fmt.Sprintf("; device %.0f against %.0f", p.DeviceBytesPerAck, best.DeviceBytesPerAck)
		}
		parts = append(parts, part)
	}
	if compared == 0 {
		return g
	}
	g.Status = verdict(ok)
	g.Detail = strings.Join(parts, "; ")
	return g
}

// restoreGoal judges the metastore's restore read (leader, p50) against
// the etcd variant with the fastest one.
func restoreGoal(r *Results, ms *System) Goal {
	g := Goal{
		ID:          "restore",
		Description: "restore read of the largest manifest no slower than the best etcd variant at p50 (leader reads)",
		Status:      NA,
		Detail:      "metastore or etcd restore not measured",
	}
	if ms == nil || ms.Restore == nil || ms.Restore.Leader.Count == 0 {
		return g
	}
	var best *Restore
	var bestName string
	for i := range r.Systems {
		ps := &r.Systems[i]
		if !InFamily(ps.Name, Etcd) || ps.Restore == nil || ps.Restore.Leader.Count == 0 {
			continue
		}
		if best == nil || ps.Restore.Leader.P50MS < best.Leader.P50MS {
			best, bestName = ps.Restore, ps.Name
		}
	}
	if best == nil {
		return g
	}
	g.Status = verdict(ms.Restore.Leader.P50MS <= best.Leader.P50MS)
	g.Detail = fmt.Sprintf("%d segments: p50 %.2f ms against %s %.2f ms", ms.Restore.Segments, ms.Restore.Leader.P50MS, bestName, best.Leader.P50MS)
	return g
}
