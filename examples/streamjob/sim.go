package main

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/metastore/metastore/wire"
)

// The simulated job. Everything a task checkpoints is a pure function of
// the epoch, so resume can recompute what the checkpoint must hold and
// check what it restored against it.

// topologies are the task sets: "same" is the topology run starts; in
// "changed" agg-1 is gone and agg-2 is new.
var topologies = map[string][]string{
	"same":    {"source-0", "source-1", "map-0", "agg-0", "agg-1", "sink-0"},
	"changed": {"source-0", "source-1", "map-0", "agg-0", "agg-2", "sink-0"},
}

// capsOf gives each task its capabilities by its name.
func capsOf(task string) wire.Caps {
	var names []string
	switch {
	case strings.HasPrefix(task, "source-"):
		names = []string{"input"}
	case strings.HasPrefix(task, "agg-"):
		names = []string{"state", "incremental"}
	case strings.HasPrefix(task, "sink-"):
		names = []string{"output"}
	}
	c, err := wire.ParseCaps(names)
	if err != nil {
		panic(err)
	}
	return c
}

func tasksOf(topology string) []wire.Task {
	var out []wire.Task
	for _, id := range topologies[topology] {
		out = append(out, wire.Task{ID: id, Caps: capsOf(id)})
	}
	return out
}

// partitionOf is a source's partition: source-3 reads partition 3.
func partitionOf(task string) int {
	n, _ := strconv.Atoi(task[strings.LastIndexByte(task, '-')+1:])
	return n
}

// offsets is what a source checkpoints at an epoch.
func offsets(task string, epoch uint64) string {
	p := partitionOf(task)
	return fmt.Sprintf("partition-%d:offset=%d", p, epoch*1000+uint64(p)*7)
}

// txnID is what the sink checkpoints at an epoch.
func txnID(epoch uint64) string { return fmt.Sprintf("txn-%d", epoch) }

// keys are the keys every aggregation counts.
var keys = []string{"k0", "k1", "k2", "k3"}

// materializeEvery: every this many epochs (at 5, 15, 25, ...) an
// aggregation uploads a materialized base and truncates its changelog.
const materializeEvery = 10

func materializes(e uint64) bool { return e%materializeEvery == materializeEvery/2 }

// aggregate is an aggregation's state: a count per key.
type aggregate map[string]int64

// aggregateAt is the state of an aggregation after epoch e: the events of
// epochs 1..e, a fixed number per key and epoch.
func aggregateAt(task string, e uint64) aggregate {
	h := int64(crc32.ChecksumIEEE([]byte(task)) % 13)
	a := aggregate{}
	for x := int64(1); x <= int64(e); x++ {
		for i, k := range keys {
			a[k] += (x*int64(2*i+3)+h)%7 + int64(i) + 1
		}
	}
	return a
}

func (a aggregate) sum() int64 {
	var s int64
	for _, v := range a {
		s += v
	}
	return s
}

func (a aggregate) String() string {
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, a[k]))
	}
	return fmt.Sprintf("sum=%d (%s)", a.sum(), strings.Join(parts, " "))
}

func (a aggregate) equal(b aggregate) bool {
	for _, k := range keys {
		if a[k] != b[k] {
			return false
		}
	}
	return len(a) == len(b)
}

// changelog encodes the changes from state prev to next as records with
// sequence numbers from firstSeq: "seq=N key=K add=V", one per key.
func changelog(prev, next aggregate, firstSeq uint64) []byte {
	var b bytes.Buffer
	for i, k := range keys {
		fmt.Fprintf(&b, "seq=%d key=%s add=%d\n", firstSeq+uint64(i), k, next[k]-prev[k])
	}
	return b.Bytes()
}

// baseSnapshot encodes a materialized state holding every change up to
// sequence number throughSeq.
func baseSnapshot(a aggregate, throughSeq uint64) []byte {
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "base key=%s value=%d\n", k, a[k])
	}
	fmt.Fprintf(&b, "base through_seq=%d\n", throughSeq)
	return b.Bytes()
}

// replay rebuilds an aggregation's state from what a restore reads: its
// bases, then its changelog segments in sequence order. It returns the
// state and the last sequence number it holds.
func replay(r io.Reader) (aggregate, uint64, error) {
	a := aggregate{}
	var last uint64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		num := func(name string) (int64, error) {
			v, err := strconv.ParseInt(f[name], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("state record %q: bad %s", line, name)
			}
			return v, nil
		}
		switch {
		case strings.HasPrefix(line, "base through_seq="):
			n, err := num("through_seq")
			if err != nil {
				return nil, 0, err
			}
			last = uint64(n)
		case strings.HasPrefix(line, "base "):
			v, err := num("value")
			if err != nil {
				return nil, 0, err
			}
			a[f["key"]] = v
		case strings.HasPrefix(line, "seq="):
			seq, err := num("seq")
			if err != nil {
				return nil, 0, err
			}
			v, err := num("add")
			if err != nil {
				return nil, 0, err
			}
			if uint64(seq) <= last {
				return nil, 0, fmt.Errorf("state record %q: sequence %d is not after %d", line, seq, last)
			}
			a[f["key"]] += v
			last = uint64(seq)
		default:
			return nil, 0, fmt.Errorf("unknown state record %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	for _, k := range keys {
		if _, ok := a[k]; !ok {
			a[k] = 0
		}
	}
	return a, last, nil
}

func checksum(b []byte) string {
	return fmt.Sprintf("crc32c:%08x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func sortedTasks(ts []string) []string {
	out := slices.Clone(ts)
	slices.Sort(out)
	return out
}
