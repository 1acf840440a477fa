package gc

import (
	"testing"
	"time"
)

// TestConfigBounds: every negative duration is refused, and the largest
// batch sizes are accepted as they are.
func TestConfigBounds(t *testing.T) {
	for name, bad := range map[string]Config{
		"Interval":      {Interval: -time.Second},
		"Grace":         {Grace: -time.Second},
		"TombstoneTTL":  {TombstoneTTL: -time.Second},
		"OrphanGrace":   {OrphanGrace: -time.Second},
		"OrphanEvery":   {OrphanEvery: -time.Second},
		"DeleteTimeout": {DeleteTimeout: -time.Second},
		"ObserveDelay":  {ObserveDelay: -time.Second},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("negative %s accepted", name)
		}
	}
	cfg, err := Config{BatchSize: MaxBatchSize, ObserveBatch: MaxObserveBatch}.withDefaults()
	if err != nil || cfg.BatchSize != MaxBatchSize || cfg.ObserveBatch != MaxObserveBatch {
		t.Fatalf("the largest batch sizes: %+v %v", cfg, err)
	}
}
