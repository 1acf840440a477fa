package report

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
)

// WriteTable writes the human-readable report of r: the run's machine and
// parameters, per workload a table (one row per system and variant, then
// the rows of the metastore's figures over each peer's), the
// metastore-only results, the goals and the errors. r should be finalized.
func WriteTable(w io.Writer, r *Results) error {
	b := bufio.NewWriter(w)
	writeHeader(b, r)
	for _, sec := range sections {
		writeSection(b, r, sec)
		if sec.id == "manifest" {
			writeManifestRatios(b, r)
		}
	}
	writeExtras(b, r)
	writeGoals(b, r)
	writeErrors(b, r)
	return b.Flush()
}

func writeHeader(b *bufio.Writer, r *Results) {
	status := ""
	if r.Interrupted {
		status = " (interrupted)"
	}
	fmt.Fprintf(b, "metastore benchmark: %s to %s%s\n", r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339), status)
	if r.Revision != "" {
		fmt.Fprintf(b, "metastore revision: %s\n", r.Revision)
	}
	m := r.Machine
	fmt.Fprintf(b, "machine: %s, %d cores, %s/%s, kernel %s, %s\n", m.CPUModel, m.Cores, m.OS, m.Arch, m.Kernel, m.GoVersion)
	var sys []string
	for _, s := range r.Systems {
		if s.Version != "" {
			sys = append(sys, s.Name+" "+s.Version)
		} else {
			sys = append(sys, s.Name)
		}
	}
	fmt.Fprintf(b, "systems: %s\n", strings.Join(sys, ", "))
	p := r.Params
	smoke := ""
	if p.Smoke {
		smoke = " (smoke)"
	}
	fmt.Fprintf(b, "parameters%s: duration %gs after %gs warmup, concurrency %s, %d tasks per job, %d segments per ack, keys in batches of %d;\n",
		smoke, p.DurationSeconds, p.WarmupSeconds, ints(p.Concurrency), p.TasksPerJob, p.SegmentsPerAck, p.KeyBatch)
	fmt.Fprintf(b, "  manifests %s with %d acks, %d restore reads, %d failover kills (%gs per call), GC %d objects, resume %d tasks (%d stateful), footprint %d blobs / %d jobs\n",
		ints(p.ManifestSizes), p.ManifestAcks, p.RestoreReads, p.FailoverKills, p.FailoverCallTimeoutSeconds,
		p.GCObjects, p.ResumeTasks, p.ResumeStateful, p.FootprintBlobs, p.FootprintJobs)
}

func writeSection(b *bufio.Writer, r *Results, sec section) {
	vs := sec.variants(r)
	if len(vs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n== %s ==\n", sec.title)
	t := table{header: []string{sec.variantHeader, "system"}}
	for _, f := range sec.figures {
		t.header = append(t.header, f.header)
	}
	ms := r.System(Metastore)
	for _, v := range vs {
		for i := range r.Systems {
			s := &r.Systems[i]
			row := []string{v.label, s.Name}
			filled := false
			for _, f := range sec.figures {
				if x, ok := f.get(s, v.key); ok {
					row = append(row, f.format(x))
					filled = true
				} else {
					row = append(row, "-")
				}
			}
			if filled {
				t.rows = append(t.rows, row)
			}
		}
		if ms == nil {
			continue
		}
		for _, peer := range Peers {
			ps := r.System(peer)
			if ps == nil {
				continue
			}
			row := []string{v.label, Metastore + "/" + peer}
			filled := false
			for _, f := range sec.figures {
				a, okA := f.get(ms, v.key)
				c, okB := f.get(ps, v.key)
				if q, ok := Ratio(a, c); ok && okA && okB && !f.noRatio {
					row = append(row, fmt.Sprintf("%.2fx", q))
					filled = true
				} else {
					row = append(row, "-")
				}
			}
			if filled {
				t.rows = append(t.rows, row)
			}
		}
		// Against the best variant of each peer family, figure by figure
		// (the highest rate, the lowest cost of the family's designs).
		for _, fam := range PeerFamilies {
			row := []string{v.label, Metastore + "/" + BestPrefix + fam}
			filled := false
			for _, f := range sec.figures {
				a, okA := f.get(ms, v.key)
				c, _, okB := f.best(r, fam, v.key)
				if q, ok := Ratio(a, c); ok && okA && okB && !f.noRatio {
					row = append(row, fmt.Sprintf("%.2fx", q))
					filled = true
				} else {
					row = append(row, "-")
				}
			}
			if filled {
				t.rows = append(t.rows, row)
			}
		}
	}
	if sec.variantHeader == "" {
		t.header = t.header[1:]
		for i := range t.rows {
			t.rows[i] = t.rows[i][1:]
		}
		t.left = 1
	} else {
		t.left = 2
	}
	t.write(b)
}

func writeManifestRatios(b *bufio.Writer, r *Results) {
	var parts []string
	for _, s := range r.Systems {
		if s.Manifest != nil && s.Manifest.TimeRatio > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", s.Name, s.Manifest.TimeRatio))
		}
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(b, "mean time per ack, largest manifest / smallest: %s\n", strings.Join(parts, ", "))
	var methods []string
	bySystem := map[string][]string{}
	for _, s := range r.Systems {
		if m := s.Manifest; m != nil && m.BytesMethod != "" {
			if bySystem[m.BytesMethod] == nil {
				methods = append(methods, m.BytesMethod)
			}
			bySystem[m.BytesMethod] = append(bySystem[m.BytesMethod], s.Name)
		}
	}
	for _, m := range methods {
		fmt.Fprintf(b, "bytes per ack (%s): %s\n", strings.Join(bySystem[m], ", "), bytesMethodText(m))
	}
	for _, s := range r.Systems {
		if m := s.Manifest; m != nil && len(m.Points) > 0 && m.Points[0].DeviceBytesWritten > 0 {
			fmt.Fprintf(b, "device bytes per ack: sectors written by the device holding the data directories, sync(2) at both ends "+
				"(journal and other writers included); write_bytes charges whole large folios and can be far above it\n")
			break
		}
	}
}

func bytesMethodText(m string) string {
	switch m {
	case BytesProcIO:
		return "write_bytes of the members' /proc/PID/io"
	case BytesDataDir:
		return "growth of the members' data directories (/proc/PID/io unreadable)"
	}
	return m
}

func writeExtras(b *bufio.Writer, r *Results) {
	ms := r.System(Metastore)
	if ms == nil || ms.Extras == nil {
		return
	}
	x := ms.Extras
	b.WriteString("\n== metastore only ==\n")
	if gc := x.GC; gc != nil {
		fmt.Fprintf(b, "gc: %d objects deleted in %.2f s (%.0f/s), %d Raft entries (%.2f per 1,000 deletions), %d delete requests\n",
			gc.Deleted, gc.Seconds, gc.PerSecond, gc.RaftEntries, gc.EntriesPer1000, gc.DeleteRequests)
	}
	if rs := x.Resume; rs != nil {
		fmt.Fprintf(b, "resume: %d tasks (%d stateful): %d object requests (%d for stateless tasks); naive: %d requests (%d NoSuchKey)\n",
			rs.Tasks, rs.Stateful, rs.MetastoreRequests, rs.MetastoreStatelessRequests, rs.NaiveRequests, rs.NaiveNoSuchKey)
	}
	if fp := x.Footprint; fp != nil {
		writeFootprint(b, fp)
	}
}

// writeFootprint prints the footprint: the load, each member's memory
// (VmRSS, and its anonymous and file-backed parts) and data directory,
// the restart of the killed member and its memory after, the backup and
// the restore, and the error of the step that failed, if one did.
func writeFootprint(b *bufio.Writer, fp *sut.FootprintResult) {
	fmt.Fprintf(b, "footprint: %d blobs over %d jobs loaded in %.1f s\n", fp.Blobs, fp.Jobs, fp.LoadSeconds)
	if fp.Measured() {
		t := table{header: []string{"  member", "VmRSS", "RssAnon", "RssFile", "data dir"}, left: 1}
		at := func(xs []int64, i int) string {
			if i < len(xs) {
				return humanBytes(xs[i])
			}
			return "-"
		}
		for i := range fp.RSSBytes {
			t.rows = append(t.rows, []string{"  " + footprintMember(fp, i), at(fp.RSSBytes, i), at(fp.RSSAnonBytes, i), at(fp.RSSFileBytes, i), at(fp.DataDirBytes, i)})
		}
		t.write(b)
		if len(fp.RSSFileBytes) > 0 {
			b.WriteString("  (RssFile: resident pages of mapped files, the memory-mapped state file among them; page cache the kernel can reclaim)\n")
		}
	}
	switch {
	case fp.RestartError != "":
		fmt.Fprintf(b, "footprint restart: member %s killed (SIGKILL) and started again: failed", fp.RestartMember)
		if fp.RestartServeSecs > 0 {
			fmt.Fprintf(b, " (it answered its status after %.2f s)", fp.RestartServeSecs)
		}
		fmt.Fprintf(b, ": %s\n", fp.RestartError)
	case fp.RestartSecs > 0:
		fmt.Fprintf(b, "footprint restart: member %s killed (SIGKILL) and started again: answered its status after %.2f s; ready, at the leader's applied index %d, after %.2f s\n",
			fp.RestartMember, fp.RestartServeSecs, fp.RestartIndex, fp.RestartSecs)
		if fp.RestartRSSBytes > 0 {
			fmt.Fprintf(b, "footprint restart: member %s then: VmRSS %s", fp.RestartMember, humanBytes(fp.RestartRSSBytes))
			if fp.RestartRSSAnonBytes > 0 || fp.RestartRSSFileBytes > 0 {
				fmt.Fprintf(b, ", RssAnon %s, RssFile %s", humanBytes(fp.RestartRSSAnonBytes), humanBytes(fp.RestartRSSFileBytes))
			}
			b.WriteString("\n")
		}
	}
	switch {
	case fp.RestoreError != "" && fp.SnapshotBytes > 0:
		fmt.Fprintf(b, "footprint snapshot: %s saved in %.2f s; restore failed: %s\n", humanBytes(fp.SnapshotBytes), fp.SnapshotSecs, fp.RestoreError)
	case fp.RestoreError != "":
		fmt.Fprintf(b, "footprint snapshot: save failed: %s\n", fp.RestoreError)
	case fp.RestartError != "":
		b.WriteString("footprint snapshot: not taken (the restart failed)\n")
	default:
		fmt.Fprintf(b, "footprint snapshot: %s saved in %.2f s, restored in %.2f s\n", humanBytes(fp.SnapshotBytes), fp.SnapshotSecs, fp.RestoreSecs)
	}
	if fp.RestoreMethod != "" {
		fmt.Fprintf(b, "footprint restore: %s\n", fp.RestoreMethod)
	}
}

func writeGoals(b *bufio.Writer, r *Results) {
	if len(r.Goals) == 0 {
		return
	}
	b.WriteString("\n== goals ==\n")
	for _, g := range r.Goals {
		fmt.Fprintf(b, "%-4s  %s\n      %s\n", g.Status, g.Description, g.Detail)
	}
}

func writeErrors(b *bufio.Writer, r *Results) {
	var lines []string
	for _, s := range r.Systems {
		for _, e := range s.Errors {
			lines = append(lines, fmt.Sprintf("%s %s: %s", s.Name, e.Workload, e.Error))
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n== errors ==\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
}

// table is a text table: the first left columns left-aligned (labels), the
// others right-aligned (figures).
type table struct {
	header []string
	rows   [][]string
	left   int
}

func (t *table) write(b *bufio.Writer) {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(row []string) {
		var sb strings.Builder
		for i, c := range row {
			if i > 0 {
				sb.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-len(c))
			if i < t.left {
				sb.WriteString(c + pad)
			} else {
				sb.WriteString(pad + c)
			}
		}
		b.WriteString(strings.TrimRight(sb.String(), " ") + "\n")
	}
	line(t.header)
	for _, row := range t.rows {
		line(row)
	}
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func byteList(xs []int64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = humanBytes(x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// humanBytes formats n bytes with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
