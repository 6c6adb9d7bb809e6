package bench

import (
	"sync/atomic"
	"testing"
	_ "unsafe" // for go:linkname
)

// BenchmarkFloor measures what msl's fast path cannot do without, to set
// beside sync.Pool (BenchmarkSequential/pool=syncpool) in the same run:
//
//   - floor=cas: one compare-and-swap on a word no other processor touches,
//     the price of one locked instruction on this machine.
//   - floor=skeleton: a lease and release that hit the processor's slot,
//     stripped to the three locked instructions the pool's promises need
//     and nothing else (no bound, no ctx, no bypass flag, no counter):
//     the take from the slot (a compare-and-swap, as a lease on another
//     processor, a waiter or Close may steal the same entry at the same
//     instant), the end of the lease (a compare-and-swap on its
//     generation, as copies of a Lease may be released at once and exactly
//     one may win), and the park in the slot (a compare-and-swap, which is
//     also the fence that makes the bypass protocol sound: see ring.go).
//
// sync.Pool needs none of these: its per-processor private item is never
// taken by another processor (it drops items at garbage collection
// instead of handing them to waiters or Close), and it has no lease to end.
// So skeleton - syncpool is the least any pool with those promises pays
// over sync.Pool here, whatever else it does.
//
//	go test -run '^$' -bench 'Floor|Sequential/pool=(msl|syncpool)$' -cpu 1 -count 8
func BenchmarkFloor(b *testing.B) {
	b.Run("floor=cas", func(b *testing.B) {
		b.ReportAllocs()
		var w atomic.Uint64
		for b.Loop() {
			v := w.Load()
			if !w.CompareAndSwap(v, v+1) {
				b.Fatal("a compare-and-swap nobody raced failed")
			}
		}
	})
	b.Run("floor=skeleton", func(b *testing.B) {
		b.ReportAllocs()
		var s skeletonSlots
		s.init()
		for b.Loop() {
			e, gen := s.lease()
			if e.it == nil {
				b.Fatal("the slot held no item")
			}
			s.release(e, gen)
		}
	})
}

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// skeletonEntry is an item and its lease generation, as in msl.
type skeletonEntry struct {
	gen atomic.Uint64
	it  *item
}

// skeletonSlot is one processor's slot, on cache lines of its own.
type skeletonSlot struct {
	e atomic.Pointer[skeletonEntry]
	_ [120]byte
}

// skeletonSlots is a row of slots, one per processor, each holding an item
// at the start.
type skeletonSlots struct {
	s    [64]skeletonSlot
	mask int
}

func (r *skeletonSlots) init() {
	r.mask = len(r.s) - 1
	for i := range r.s {
		r.s[i].e.Store(&skeletonEntry{it: new(item)})
	}
}

// lease takes the calling processor's entry: the first locked instruction.
func (r *skeletonSlots) lease() (*skeletonEntry, uint64) {
	s := &r.s[procPin()&r.mask]
	e := s.e.Load()
	if e == nil || !s.e.CompareAndSwap(e, nil) {
		procUnpin()
		return r.leaseAny()
	}
	procUnpin()
	return e, e.gen.Load()
}

// leaseAny takes an entry from any slot: the goroutine moved processor
// since its last release (rare, and outside the floor).
func (r *skeletonSlots) leaseAny() (*skeletonEntry, uint64) {
	for i := range r.s {
		if e := r.s[i].e.Swap(nil); e != nil {
			return e, e.gen.Load()
		}
	}
	panic("skeleton: every slot is empty; one goroutine leases at a time")
}

// release ends the lease (the second) and parks the entry again (the
// third). The goroutine may have moved processor in between: it parks in
// the slot of the processor it is on now, as msl does.
func (r *skeletonSlots) release(e *skeletonEntry, gen uint64) {
	if !e.gen.CompareAndSwap(gen, gen+1) {
		panic("skeleton: the lease was ended twice")
	}
	s := &r.s[procPin()&r.mask]
	procUnpin()
	if !s.e.CompareAndSwap(nil, e) {
		r.parkAny(e) // moved to a processor whose slot is full (rare)
	}
}

// parkAny parks e in any empty slot: there is one, as one entry was out.
func (r *skeletonSlots) parkAny(e *skeletonEntry) {
	for i := range r.s {
		if r.s[i].e.CompareAndSwap(nil, e) {
			return
		}
	}
	panic("skeleton: every slot is full with an entry out")
}

// BenchmarkContendedWaits is BenchmarkContended's channel pool with its
// waits counted: a lease that finds the channel empty counts one before it
// blocks. Contended at -cpu 1 swings from run to run with the share of
// leases that wait, for the channel as for msl (whose Contended run
// reports waits/lease from Stats): a lease that waits costs a goroutine
// switch, some hundreds of ns here, and a lease that does not, tens.
//
//	go test -run '^$' -bench 'Contended(Waits)?/pool=(msl|channel)$' -cpu 1,2 -count 8
func BenchmarkContendedWaits(b *testing.B) {
	b.Run("pool=channel", func(b *testing.B) {
		b.ReportAllocs()
		p := openChannel(b, contItems)
		b.SetParallelism(contParallelism)
		var waits, leases atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var w, n int64
			for pb.Next() {
				var it *item
				select {
				case it = <-p.items:
				default:
					w++
					it = <-p.items
				}
				n++
				p.items <- it
			}
			waits.Add(w)
			leases.Add(n)
		})
		b.StopTimer()
		b.ReportMetric(float64(waits.Load())/float64(leases.Load()), "waits/lease")
		p.close(b)
	})
}
