// Command openloop measures the response time of requests that arrive on
// their own schedule, an open loop, for this module's pool beside a
// channel pool, against the ideal FIFO queue with as many servers as the
// pool has items.
//
//	go run ./cmd/openloop                           # from bench/: the whole matrix, about 70 s
//	go run ./cmd/openloop -hold cpu -load 0.85 -v
//
// Requests arrive at Poisson instants. Each runs on a goroutine of its own:
// it leases an item, holds it, releases it, and is done; its response time
// runs from its scheduled arrival to the end of its Release. An arrival
// never waits for an earlier request, as a server's requests don't, so a
// pool that hands its items on slowly shows as a queue that grows, not
// (as in a closed loop, where each caller waits for its last request
// before making the next) as fewer requests made.
//
// The holds: CPU work of 50 µs (a calibrated spin, which allocates 4 KiB
// of garbage on the way, as parsing and encoding do, so that the
// collector runs and stops the holders) over GOMAXPROCS items, at 70 % and
// 85 % load, and a 1 ms time.Sleep, I/O's stand-in, over 8 items at 50,
// 70, 85 and 95 %. Load ρ is the arrival rate λ times the mean hold over
// the items: λ = ρ · items / (mean hold). The spin's mean hold is its
// calibrated 50 µs: a spin that took longer was interrupted by the
// machine, and that is noise, which the load each run carried (from its
// measured holds) shows. The sleep's is the mean measured in a warm-up:
// time.Sleep(1ms) takes longer than 1 ms by the timer's slack and the
// runtime's wake-up, every time, and at 95 % of 1 ms the queue would be
// overloaded.
//
// The ideal is the FIFO queue with that many servers, computed offline
// from a run's own arrival instants and its own holds as measured (from
// Lease returning to Release being called): what the run's requests would
// have seen had the pool handed each item on in no time, in arrival
// order, and the processors started every request at its instant.
//
// A round is 200 ms of arrivals, run once by each pool over the same
// sample path, in alternate order from round to round, 25 rounds a
// configuration, so that the host's drift falls on both pools alike; the
// table has, per configuration, the median over the rounds of each run's
// p50, p99 and p99.9, and the median of the per-round ratios.
// bench/README.md, "The open-loop benchmark", says how to read it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The two kinds of hold, as the workload defines them.
const (
	cpuWork  = 50 * time.Microsecond // CPU-bound hold, over GOMAXPROCS items
	ioSleep  = time.Millisecond      // I/O-like hold, over ioItems items
	ioItems  = 8
	warmSeed = ^uint64(0) // the round number of the warm-up's arrivals
	// defaultGarbage is -garbage's default: see bench/README.md.
	defaultGarbage = 4096
	// defaultLive is -live's default: see bench/README.md.
	defaultLive = 8
)

// defaultLoads are each kind's loads when -load is not given.
var defaultLoads = map[string][]float64{
	"cpu": {0.70, 0.85},
	"io":  {0.50, 0.70, 0.85, 0.95},
}

// options are the flags.
type options struct {
	kinds    []string
	loads    []float64 // nil: each kind's defaultLoads
	rounds   int
	duration time.Duration
	warmup   time.Duration
	procs    int
	seed     uint64
	garbage  int // bytes of garbage each CPU hold makes
	live     int // MiB of live heap kept through the rounds
	timer    string
	verbose  bool
}

// config is one row group of the table: a kind of hold at one load.
type config struct {
	kind    string
	items   int
	hold    hold
	nominal time.Duration // the hold's nominal length, for the warm-up's rate
	// measured: the rate is set from the warm-up's mean hold, not nominal
	measured bool
	load     float64
}

func (c config) String() string {
	return fmt.Sprintf("%s %s×%d ρ%.2f", c.kind, dur(c.nominal), c.items, c.load)
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // the flag package printed the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("openloop", flag.ContinueOnError)
	hold := fs.String("hold", "all", "kind of hold: cpu (50µs of CPU work over GOMAXPROCS items), io (1ms time.Sleep over 8 items), or all")
	load := fs.String("load", "", "loads to run, comma-separated (default: cpu 0.70,0.85; io 0.50,0.70,0.85,0.95)")
	o := options{}
	fs.IntVar(&o.rounds, "rounds", 25, "rounds; each runs both pools over one arrival sample path")
	fs.DurationVar(&o.duration, "duration", 200*time.Millisecond, "arrivals per run")
	fs.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "arrivals of each pool's warm-up run, per configuration")
	fs.IntVar(&o.procs, "procs", 2, "GOMAXPROCS, and the CPU kind's items")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrival processes")
	fs.IntVar(&o.garbage, "garbage", defaultGarbage, "bytes of garbage each CPU hold allocates, in 4 pieces, and keeps until it ends; 0, none")
	fs.IntVar(&o.live, "live", defaultLive, "MiB of live heap kept through the rounds, pointer-free, so that the collector's pace does not hang on the harness's own slices")
	fs.StringVar(&o.timer, "timer", defaultTimer, "how the generator waits for the next arrival: timerfd (Linux) or sleep")
	fs.BoolVar(&o.verbose, "v", false, "print every run's figures, not only the medians")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch *hold {
	case "all":
		o.kinds = []string{"cpu", "io"}
	case "cpu", "io":
		o.kinds = []string{*hold}
	default:
		return o, fmt.Errorf("-hold %q: want cpu, io or all", *hold)
	}
	if *load != "" {
		for f := range strings.SplitSeq(*load, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || x <= 0 {
				return o, fmt.Errorf("-load: %q is not a load above 0", f)
			}
			o.loads = append(o.loads, x)
		}
	}
	if o.rounds < 1 || o.duration <= 0 || o.warmup <= 0 || o.procs < 1 || o.garbage < 0 || o.live < 0 {
		return o, errors.New("-rounds and -procs must be at least 1, -duration and -warmup above 0, -garbage and -live not below 0")
	}
	return o, nil
}

// configs lists the configurations o selects, in the table's order; cpu
// is the CPU kind's hold, calibrated.
func configs(o options, cpu hold) []config {
	var cs []config
	for _, kind := range o.kinds {
		c := config{kind: kind, items: o.procs, hold: cpu, nominal: cpuWork}
		if kind == "io" {
			c = config{kind: kind, items: ioItems, hold: hold{length: ioSleep}, nominal: ioSleep, measured: true}
		}
		loads := o.loads
		if loads == nil {
			loads = defaultLoads[kind]
		}
		for _, l := range loads {
			c.load = l
			cs = append(cs, c)
		}
	}
	return cs
}

func run(o options) error {
	runtime.GOMAXPROCS(o.procs)
	w, err := newWaiter(o.timer)
	if err != nil {
		return err
	}
	defer w.close()
	// The live heap: as a service's state, it sets the collector's pace
	// (GOGC: a cycle each time the heap grows by what is live); unlike
	// it, it holds no pointers and costs the mark nothing.
	live := make([]byte, o.live<<20)
	defer runtime.KeepAlive(live)
	cpu := hold{cpu: true, piece: pieceSize(o.garbage), length: cpuWork}
	cal := calibrate(cpu)
	cpu.spins = cal.spins
	fmt.Printf("openloop: %s %s/%s, GOMAXPROCS %d (NumCPU %d), %d rounds of %v arrivals per pool, warm-up %v, seed %d, -timer %s, -live %d MiB\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, o.procs, runtime.NumCPU(), o.rounds, o.duration, o.warmup, o.seed, o.timer, o.live)
	fmt.Printf("CPU hold: %d pieces of %d bytes of garbage (-garbage %d), fastest %v of %d; spin %d rounds (2^15 rounds took %v at fastest of %d); the hold: fastest %v, median %v of 200\n\n",
		pieces, cpu.piece, o.garbage, dur(cal.garbage), cal.trials, cal.spins, cal.fastest, cal.trials, cal.check[0], cal.check[1])
	fmt.Println(header)
	for _, c := range configs(o, cpu) {
		if err := runConfig(c, o, w); err != nil {
			return fmt.Errorf("%v: %w", c, err)
		}
	}
	return nil
}

// rng returns the random source of one round's arrivals for c: the same
// for both pools of the round, and the same whichever configurations a
// run selects, so that -hold cpu -load 0.85 repeats the full run's rounds.
func rng(seed uint64, c config, round uint64) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%g", c.kind, c.load)
	return rand.New(rand.NewPCG(seed^h.Sum64(), round))
}

// runConfig runs c's warm-up and rounds over a fresh pair of pools and
// prints its rows.
func runConfig(c config, o options, w waiter) (err error) {
	msl, err := newMSL(c.items, c.hold)
	if err != nil {
		return err
	}
	servers := []*server{msl, newChannel(c.items, c.hold)}
	defer func() {
		for _, s := range servers {
			err = errors.Join(err, s.closePool())
		}
	}()

	// The warm-up starts the goroutines' stacks and the runtime's free
	// lists, and measures the mean hold that a sleep's rate is set from.
	warm := schedule(nil, rng(o.seed, c, warmSeed), c.load*float64(c.items)/c.nominal.Seconds(), o.warmup)
	var holds, n time.Duration
	for _, s := range servers {
		for _, r := range s.runRound(warm, w) {
			holds += r.held - r.leased
			n++
		}
	}
	if n == 0 {
		return errors.New("the warm-up had no arrivals: raise -warmup")
	}
	meanHold := c.nominal
	if c.measured {
		meanHold = holds / n
	}
	perSec := c.load * float64(c.items) / meanHold.Seconds()

	results := make([][]result, len(servers))
	var arrivals []time.Duration
	for r := range o.rounds {
		arrivals = schedule(arrivals, rng(o.seed, c, uint64(r)), perSec, o.duration)
		if len(arrivals) == 0 {
			return errors.New("a round had no arrivals: raise -duration")
		}
		for j := range servers {
			k := j
			if r%2 == 1 { // alternate which pool runs first
				k = len(servers) - 1 - j
			}
			results[k] = append(results[k], measure(servers[k], arrivals, w, c.items, o.duration))
		}
	}
	printConfig(os.Stdout, c, perSec, meanHold, results, o.verbose)
	return nil
}

// measure runs one round of s and analyses it. The room for its requests
// is made before the allocations are counted. No collection is forced
// between runs: the collector keeps its own pace through the rounds, as
// in a service, where a forced one would put each run's first collection
// at the same point of its arrivals (with 200 ms runs, two collections
// each, at about 80 and 160 ms, and none in the runs' first 40 %).
func measure(s *server, arrivals []time.Duration, w waiter, servers int, span time.Duration) result {
	s.grow(len(arrivals))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	waits := s.waits()
	gc0, t0 := readGC(), time.Now()
	samples := s.runRound(arrivals, w)
	wall, gc := time.Since(t0), readGC().since(gc0)
	waits = s.waits() - waits
	runtime.ReadMemStats(&m1)
	res := analyze(arrivals, samples, servers, span)
	res.waited = float64(waits) / float64(len(arrivals))
	res.allocs = float64(m1.Mallocs-m0.Mallocs) / float64(len(arrivals))
	res.gcs = m1.NumGC - m0.NumGC
	res.gc = gc
	res.gcCPU = gc.cpu / (wall.Seconds() * float64(runtime.GOMAXPROCS(0)))
	return res
}
