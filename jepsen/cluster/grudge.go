package cluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Grudge describes a partition: g[A] lists the members A cannot send to.
// A symmetric cut lists both directions.
type Grudge map[string][]string

func (g Grudge) clone() Grudge {
	if g == nil {
		return nil
	}
	out := Grudge{}
	for k, v := range g {
		out[k] = slices.Clone(v)
	}
	return out
}

// add records that from cannot send to to.
func (g Grudge) add(from, to string) {
	if from == to || slices.Contains(g[from], to) {
		return
	}
	g[from] = append(g[from], to)
	sort.Strings(g[from])
}

// Cuts reports whether from cannot send to to.
func (g Grudge) Cuts(from, to string) bool { return slices.Contains(g[from], to) }

// String prints "n1->n2 n2->n1 ...", sorted.
func (g Grudge) String() string {
	var parts []string
	for from, tos := range g {
		for _, to := range tos {
			parts = append(parts, from+"->"+to)
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " ")
}

// Components cuts every link between members of different groups, both
// ways; members of one group still talk. Components([]string{"n1"},
// []string{"n2","n3"}) isolates n1.
func Components(groups ...[]string) Grudge {
	g := Grudge{}
	for i, a := range groups {
		for j, b := range groups {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					g.add(x, y)
				}
			}
		}
	}
	return g
}

// Isolate cuts id off from every other member of all, both ways.
func Isolate(id string, all []string) Grudge {
	var rest []string
	for _, x := range all {
		if x != id {
			rest = append(rest, x)
		}
	}
	return Components([]string{id}, rest)
}

// Bridge cuts left from right, both ways, while bridge still talks to
// every member: the two sides can reach each other only through bridge's
// view of the cluster (Jepsen's "bridge" partition).
func Bridge(bridge string, left, right []string) Grudge {
	g := Components(left, right)
	for _, x := range append(slices.Clone(left), right...) {
		if x == bridge {
			panic(fmt.Sprintf("cluster.Bridge: %s is the bridge and on a side", x))
		}
	}
	return g
}

// OneWay drops everything from sends to to, on the connections from
// opens and on those to opens: what to sends reaches from, no answer
// comes back.
func OneWay(from, to string) Grudge {
	g := Grudge{}
	g.add(from, to)
	return g
}

// Merge returns the union of grudges.
func Merge(gs ...Grudge) Grudge {
	out := Grudge{}
	for _, g := range gs {
		for from, tos := range g {
			for _, to := range tos {
				out.add(from, to)
			}
		}
	}
	return out
}
