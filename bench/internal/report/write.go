package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Files written by WriteAll besides the charts.
const (
	JSONFile  = "results.json"
	TableFile = "results.txt"
)

// WriteAll writes r (finalized) into dir, creating it: results.json,
// results.txt and the charts. It returns the paths written.
func WriteAll(dir string, r *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: create %s: %w", dir, err)
	}
	var written []string
	write := func(name string, data []byte) error {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("report: write %s: %w", path, err)
		}
		written = append(written, path)
		return nil
	}

	js, err := MarshalJSON(r)
	if err != nil {
		return written, err
	}
	if err := write(JSONFile, js); err != nil {
		return written, err
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		return written, fmt.Errorf("report: table: %w", err)
	}
	if err := write(TableFile, table.Bytes()); err != nil {
		return written, err
	}
	for _, c := range Charts(r) {
		var svg bytes.Buffer
		if err := c.Chart.WriteSVG(&svg); err != nil {
			return written, fmt.Errorf("report: chart %s: %w", c.File, err)
		}
		if err := write(c.File, svg.Bytes()); err != nil {
			return written, err
		}
	}
	return written, nil
}

// MarshalJSON returns r as indented JSON.
func MarshalJSON(r *Results) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("report: encode results: %w", err)
	}
	return append(b, '\n'), nil
}

// ReadJSON reads results written by WriteAll.
func ReadJSON(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("report: decode %s: %w", path, err)
	}
	return &r, nil
}
