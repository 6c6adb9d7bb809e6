// Command episodes shows why the Contended benchmark swings from run to run:
// it runs Contended's shape (8 goroutines over 2 items at GOMAXPROCS 2, by
// default) for a few seconds and prints, for each 10 ms window, how many of
// its leases waited for a release, per thousand, from the pool's Stats.
//
//	go run ./cmd/episodes            # from bench/
//	go run ./cmd/episodes -procs 1 -goroutines 4
//
// The windows are bimodal: nearly no lease waits (each processor's running
// goroutine finds its item in its slot) or nearly every lease does (the
// FIFO hand-off: a releaser whose item went to a waiter queues behind the
// others, so the queue never empties). The scheduler's preemption of a
// goroutine holding an item starts an episode of the second kind, and ends
// one; a run's ns/op follows the share of its time spent in such episodes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
)

func main() {
	procs := flag.Int("procs", 2, "GOMAXPROCS")
	items := flag.Int("items", 2, "MaxSize (all created at New)")
	goroutines := flag.Int("goroutines", 8, "goroutines leasing and releasing")
	window := flag.Duration("window", 10*time.Millisecond, "length of a window")
	duration := flag.Duration("duration", 3*time.Second, "length of the run")
	flag.Parse()
	runtime.GOMAXPROCS(*procs)

	p, err := pool.New(context.Background(),
		pool.FactoryFunc[*[128]byte](func(context.Context) (*[128]byte, error) { return new([128]byte), nil }),
		pool.Options[*[128]byte]{MinSize: *items, MaxSize: *items})
	if err != nil {
		log.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range *goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for !stop.Load() {
				for range 100 {
					l, err := p.Lease(ctx)
					if err != nil {
						log.Fatal(err)
					}
					l.Release()
				}
			}
		})
	}

	var out strings.Builder
	var quiet, busy, episodes int      // windows with under and over half the leases waiting; runs of busy ones
	var quietLeases, busyLeases uint64 // leases completed in each kind of window
	inEpisode := false
	prev := p.Stats()
	n := int(*duration / *window)
	for i := range n {
		time.Sleep(*window)
		s := p.Stats()
		leases, waits := s.Leases-prev.Leases, s.Waits-prev.Waits
		prev = s
		perMille := 1000 * float64(waits) / float64(max(leases, 1))
		fmt.Fprintf(&out, "%5.0f", perMille)
		if i%16 == 15 {
			out.WriteString("\n")
		}
		if perMille > 500 {
			busy++
			busyLeases += leases
			if !inEpisode {
				episodes++
			}
			inEpisode = true
		} else {
			quiet++
			quietLeases += leases
			inEpisode = false
		}
	}
	stop.Store(true)
	wg.Wait()
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}

	fmt.Printf("GOMAXPROCS %d, %d goroutines over %d items; leases that waited, per thousand, in each %v window:\n\n%s\n",
		*procs, *goroutines, *items, *window, out.String())
	perSec := func(leases uint64, windows int) float64 {
		return float64(leases) / (float64(windows) * window.Seconds())
	}
	fmt.Printf("\nwindows where most leases waited: %d of %d, in %d episodes\n", busy, n, episodes)
	if quiet > 0 {
		fmt.Printf("leases per second where few waited:  %.3g\n", perSec(quietLeases, quiet))
	}
	if busy > 0 {
		fmt.Printf("leases per second where most waited: %.3g\n", perSec(busyLeases, busy))
	}
}
