package s3server

import (
	"bytes"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/johannesboyne/gofakes3"
)

// lockedBackend makes gofakes3's bbolt backend safe under concurrent reads
// and writes. That backend decodes an object from its read transaction
// without copying: the object's contents and hash alias bbolt's memory map,
// which a later write that grows the file unmaps, so a GET streaming the
// contents faults (SIGSEGV) under a concurrent PUT. Here every read runs
// under a read lock and copies what it returns before releasing it, and
// every write takes the write lock; a PUT reads its request body before
// taking it, so a slow uploader holds no one up.
type lockedBackend struct {
	mu sync.RWMutex
	b  gofakes3.Backend
}

var _ gofakes3.Backend = (*lockedBackend)(nil)

func (l *lockedBackend) ListBuckets() ([]gofakes3.BucketInfo, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.b.ListBuckets()
}

func (l *lockedBackend) ListBucket(name string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.b.ListBucket(name, prefix, page)
}

func (l *lockedBackend) CreateBucket(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.CreateBucket(name)
}

func (l *lockedBackend) BucketExists(name string) (bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.b.BucketExists(name)
}

func (l *lockedBackend) DeleteBucket(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.DeleteBucket(name)
}

func (l *lockedBackend) ForceDeleteBucket(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.ForceDeleteBucket(name)
}

func (l *lockedBackend) GetObject(bucket, key string, rng *gofakes3.ObjectRangeRequest) (*gofakes3.Object, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	obj, err := l.b.GetObject(bucket, key, rng)
	if err != nil || obj == nil {
		return obj, err
	}
	return detach(obj)
}

func (l *lockedBackend) HeadObject(bucket, key string) (*gofakes3.Object, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	obj, err := l.b.HeadObject(bucket, key)
	if err != nil || obj == nil {
		return obj, err
	}
	return detach(obj)
}

// detach returns a copy of obj that shares no memory with the backend's
// database: contents read into a buffer of its own, hash and metadata
// copied.
func detach(obj *gofakes3.Object) (*gofakes3.Object, error) {
	cp := *obj
	cp.Hash = slices.Clone(obj.Hash)
	cp.Metadata = maps.Clone(obj.Metadata)
	if obj.Range != nil {
		r := *obj.Range
		cp.Range = &r
	}
	if obj.Contents != nil {
		data, err := io.ReadAll(obj.Contents)
		_ = obj.Contents.Close()
		if err != nil {
			return nil, err
		}
		cp.Contents = io.NopCloser(bytes.NewReader(data))
	}
	return &cp, nil
}

func (l *lockedBackend) DeleteObject(bucket, key string) (gofakes3.ObjectDeleteResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.DeleteObject(bucket, key)
}

func (l *lockedBackend) PutObject(bucket, key string, meta map[string]string, input io.Reader, size int64, conditions *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	data, err := gofakes3.ReadAll(input, size)
	if err != nil {
		return gofakes3.PutObjectResult{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.PutObject(bucket, key, meta, bytes.NewReader(data), size, conditions)
}

func (l *lockedBackend) DeleteMulti(bucket string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.DeleteMulti(bucket, keys...)
}

func (l *lockedBackend) CopyObject(srcBucket, srcKey, dstBucket, dstKey string, meta map[string]string) (gofakes3.CopyObjectResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.CopyObject(srcBucket, srcKey, dstBucket, dstKey, meta)
}
