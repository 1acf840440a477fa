package wire

import (
	"encoding/json"
	"strconv"
	"testing"
)

// BenchmarkUploadsForms encodes (as the API does, AppendJSON) and decodes
// (as the Go client does, encoding/json, then Expand) an answer of 300
// presigned S3 slots with keys as the benchmark's jobs have them, in the
// full form and in the shared one.
func BenchmarkUploadsForms(b *testing.B) {
	full := s3Slots(300)
	for i := range full.Uploads {
		s := &full.Uploads[i]
		key := "job-000017/task-0003/18edf35039ebc8fe000000000000000704d2" + strconv.Itoa(100000000000000000+i)
		s.URL = "http://127.0.0.1:39999/metastore-bench/" + key + s.URL[len("http://127.0.0.1:9000/b/")+len(s.Key):]
		s.Key = key
	}
	forms := []struct {
		name   string
		answer func() Uploads
	}{
		{"full", func() Uploads { return full }},
		{"shared", func() Uploads { sh, _ := full.Share(); return sh }},
	}
	for _, f := range forms {
		b.Run("encode/"+f.name, func(b *testing.B) {
			buf := make([]byte, 0, 256<<10)
			for b.Loop() {
				buf, _ = f.answer().AppendJSON(buf[:0])
			}
			b.ReportMetric(float64(len(buf)), "bytes/answer")
		})
		b.Run("decode/"+f.name, func(b *testing.B) {
			raw, _ := f.answer().AppendJSON(nil)
			for b.Loop() {
				var u Uploads
				if err := json.Unmarshal(raw, &u); err != nil {
					b.Fatal(err)
				}
				u.Expand()
			}
			b.ReportMetric(float64(len(raw)), "bytes/answer")
		})
	}
}
