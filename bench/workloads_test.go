package bench

import (
	"context"
	"testing"
	"time"

	"github.com/msl-armory/pool/bench/internal/work"
)

// The workloads, each written once, over any contender's adapter.
//
// The benchmarks do not run these generic functions but copies of them,
// one per contender, with the contender's adapter and handle types in
// place of P and H (workloads_gen_test.go, written by cmd/monomorph). Go
// compiles a method call on a type parameter as an indirect call through
// the instantiation's dictionary, never inlined, and those calls would add
// to every lease and release a cost that no contender's own API imposes
// (bench/README.md, "How the workloads are written"). In the copies every
// call to an adapter is direct, and inlined as the pool's own call would
// be. After editing this file, or an adapter's signature, run go generate.
//
// Every generic function in the package is a workload: cmd/monomorph
// requires type parameters [H any, P adapter[H]] and parameters
// (b *testing.B, p P), and a field of contender by the same name.
//
//go:generate go run ./cmd/monomorph msl=openMSL puddle=openPuddle commons=openCommons vitess=openVitess channel=openChannel semaphore=openSemaphore syncpool=openSyncPool

// adapter is a contender, a pool under test, as every workload drives it.
// lease takes an item, waiting for one if need be (or until ctx ends, for
// the pools that honour it); value is the leased item, which the workloads
// check is there; release gives it back; close ends the pool after the run
// and checks, from the census, that it kept its bound. H is the pool's own
// handle for a lease: msl's Lease, puddle's *Resource, commons'
// interface{}, or the *item itself, so that no handle is boxed into an
// interface (msl's Lease, which is not a pointer, would allocate). The
// workloads take the adapter as a type parameter, P, rather than as an
// interface value, so that cmd/monomorph can spell the adapter's own type
// in its place.
type adapter[H any] interface {
	lease(ctx context.Context) (H, error)
	value(h H) *item
	release(ctx context.Context, h H) error
	close(b *testing.B)
}

// waitCounter is an adapter whose pool counts the leases that waited: the
// parallel workloads report their share as waits/lease. In Contended that
// share, far more than the cost of a lease that finds an item, sets the
// figure (bench/README.md, "Floors and waits").
type waitCounter interface {
	waitsPerLease() float64
}

// sequential is the Sequential workload: one goroutine leases and
// releases.
func sequential[H any, P adapter[H]](b *testing.B, p P) {
	ctx := context.Background()
	for b.Loop() {
		h, err := p.lease(ctx)
		if err != nil {
			b.Fatalf("lease: %v", err)
		}
		if p.value(h) == nil {
			b.Fatalf("lease gave %T %v, want a non-nil *item", h, h)
		}
		if err := p.release(ctx, h); err != nil {
			b.Fatalf("release: %v", err)
		}
	}
	p.close(b)
}

// parallel is the Parallel and Contended workloads: b.RunParallel's
// goroutines lease and release.
func parallel[H any, P adapter[H]](b *testing.B, p P) {
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h, err := p.lease(ctx)
			if err != nil {
				b.Errorf("lease: %v", err)
				return
			}
			if p.value(h) == nil {
				b.Errorf("lease gave %T %v, want a non-nil *item", h, h)
				return
			}
			if err := p.release(ctx, h); err != nil {
				b.Errorf("release: %v", err)
				return
			}
		}
	})
	b.StopTimer()
	if w, ok := any(p).(waitCounter); ok {
		b.ReportMetric(w.waitsPerLease(), "waits/lease")
	}
	p.close(b)
}

// overload is the Overload workload (overload_test.go): each of
// runOverload's goroutines times the lease call alone, then holds the item
// for the work before releasing it.
func overload[H any, P adapter[H]](b *testing.B, p P) {
	ctx := context.Background()
	runOverload(b, func(w *overloadWorker) {
		for i := range w.wait {
			t0 := time.Now()
			h, err := p.lease(ctx)
			w.wait[i] = time.Since(t0)
			if err != nil {
				b.Errorf("lease: %v", err)
				return
			}
			if p.value(h) == nil {
				b.Errorf("lease gave %T %v, want a non-nil *item", h, h)
				return
			}
			w.hold(i)
			if err := p.release(ctx, h); err != nil {
				b.Errorf("release: %v", err)
				return
			}
			w.cycle[i] = time.Since(t0)
		}
	})
	p.close(b)
}

// releaseThenWork is the ReleaseThenWork workload (releasethenwork_test.go):
// each of runReleaseThenWork's goroutines times the lease call and the
// whole cycle: the lease, a short hold, the release and the longer work
// after it. The workload holds every item until the goroutines have
// started, so the run begins with a burst of waiting leases.
func releaseThenWork[H any, P adapter[H]](b *testing.B, p P) {
	ctx := context.Background()
	held := make([]H, rtwItems)
	for i := range held {
		var err error
		if held[i], err = p.lease(ctx); err != nil {
			b.Fatalf("lease before the run: %v", err)
		}
	}
	runReleaseThenWork(b, func(w *rtwWorker) {
		for i := range w.wait {
			t0 := time.Now()
			h, err := p.lease(ctx)
			w.wait[i] = time.Since(t0)
			if err != nil {
				b.Errorf("lease: %v", err)
				return
			}
			if p.value(h) == nil {
				b.Errorf("lease gave %T %v, want a non-nil *item", h, h)
				return
			}
			w.x = work.Spin(w.hold, w.x)
			if err := p.release(ctx, h); err != nil {
				b.Errorf("release: %v", err)
				return
			}
			w.x = work.Spin(w.work, w.x)
			w.cycle[i] = time.Since(t0)
		}
	}, func() {
		for _, h := range held {
			if err := p.release(ctx, h); err != nil {
				b.Errorf("release after the burst: %v", err)
			}
		}
	})
	p.close(b)
}
