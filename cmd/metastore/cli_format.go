package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/metastore/metastore/wire"
)

// Helpers that turn API answers into human output.

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtTime prints a time in UTC, to the second; the zero time is "-".
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// fmtDuration rounds a duration to three or four significant digits.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		d = d.Round(time.Second)
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

// fmtBytes prints an exact byte count, with a binary unit when it is large.
func fmtBytes(n uint64) string {
	switch {
	case n == 1:
		return "1 byte"
	case n < 1024:
		return strconv.FormatUint(n, 10) + " bytes"
	}
	v, unit := float64(n), "B"
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%d bytes (%.1f %s)", n, v, unit)
}

// fmtEpochs prints a list of epochs; a long one as its count and range.
func fmtEpochs(es []uint64) string {
	switch {
	case len(es) == 0:
		return "-"
	case len(es) <= 6:
		parts := make([]string, len(es))
		for i, e := range es {
			parts[i] = strconv.FormatUint(e, 10)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprintf("%d (%d..%d)", len(es), es[0], es[len(es)-1])
}

// fmtList joins up to max names, then says how many more there are.
func fmtList(names []string, max int) string {
	if len(names) == 0 {
		return "-"
	}
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// fmtCaps prints capability flags as their names.
func fmtCaps(c wire.Caps) string {
	raw, err := json.Marshal(c)
	if err != nil {
		return "?"
	}
	var names []string
	_ = json.Unmarshal(raw, &names)
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ",")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// plural returns "1 blob", "2 blobs", "2 mismatches".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	suffix := "s"
	for _, end := range []string{"s", "x", "ch", "sh"} {
		if strings.HasSuffix(word, end) {
			suffix = "es"
		}
	}
	return strconv.Itoa(n) + " " + word + suffix
}

// dash prints an empty value as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
