package pool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Stats: the relations that hold in every snapshot (the package
// documentation's "Stats").

// TestStatsRelationsHoldInEverySnapshot takes snapshots while items are
// created, discarded and detached as fast as 8 goroutines can: every one
// must keep Destroyed + Detached <= Created <= that + MaxSize.
func TestStatsRelationsHoldInEverySnapshot(t *testing.T) {
	const maxSize = 4
	p, _ := newTracked(t, Options[*conn]{MaxSize: maxSize})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, err := p.Lease(context.Background())
				if err != nil {
					t.Errorf("Lease: %v", err)
					return
				}
				if (i+w)%7 == 0 {
					_ = l.Detach().Close()
				} else {
					l.Discard()
				}
			}
		})
	}
	var snaps, bad int
	deadline := time.Now().Add(time.Second)
	for snaps < 200_000 && time.Now().Before(deadline) || snaps < 1000 {
		s := p.Stats()
		snaps++
		if s.Destroyed+s.Detached > s.Created || s.Created-s.Destroyed-s.Detached > maxSize {
			if bad++; bad <= 3 {
				t.Errorf("snapshot %d: Created %d, Destroyed %d, Detached %d (MaxSize %d)", snaps, s.Created, s.Destroyed, s.Detached, maxSize)
			}
		}
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, bad, "of %d snapshots", snaps)
	t.Logf("%d snapshots under churn, %d items created", snaps, p.Stats().Created)
}
