// Command pgsize measures the pool over real PostgreSQL connections, at
// several MaxSizes, under a workload whose statements cost more the more
// of them run at once: which size serves it best.
//
//	bench/pg.sh                       # from the repository: a server of its own, then the sweep
//	bench/pg.sh -size 8 -duration 60s
//	bench/pg.sh -sizes a64,8,16,64 -warmup 10s # adaptive under MaxSize 64, beside fixed sizes
//
// pgsize needs a server with the table pg.sh creates (hot: id int primary
// key, n bigint, rows 1..64); -dsn says where. -clients goroutines (64)
// each loop: lease a *pgx.Conn from the pool, run the statement on one of
// the first -rows rows of hot, chosen at random, release it. An operation's
// response time is what its caller sees, from the Lease call to the end of
// the Release: the wait for a connection plus the statement. The
// statements (-stmt):
//
//   - update: UPDATE hot SET n = n + 1 WHERE id = $1, autocommit, one
//     round trip. Updates of one row queue on its row lock, each holding
//     it until its commit.
//   - lock: BEGIN; SELECT n FROM hot WHERE id = $1 FOR UPDATE; UPDATE hot
//     SET n = $2 WHERE id = $1 (n + 1); COMMIT. A read-modify-write, four
//     round trips, holding the row's lock over the last three.
//
// Each MaxSize gets a pool of its own (New with that MaxSize, nothing made
// up front), which runs -warmup then -duration; the figures are those of
// the operations that ended within -duration. Between runs the pool is
// closed (its connections too) and hot is vacuumed. With -rounds above 1
// the sizes run that many times, in alternate order (up, down, up, ...),
// and the table has each figure's median over the rounds, ops/s with its
// range. After each run pgsize checks that hot's sum of n grew by exactly
// the operations completed, warm-up included.
//
// With -adaptive every run has Options.AdaptiveSize on, its MaxSize the
// ceiling under which the pool finds its limit; an entry of -sizes written
// aN (a64) is such a run beside fixed ones, so that one invocation
// interleaves them: -sizes a64,8,16,64.
//
// The table (markdown, on stdout): MaxSize (with "adaptive" after it for
// an adaptive run), operations a second, the response time's p50 and p99
// (nearest rank), the share of leases that waited for a connection (from
// Stats), and the limit: Stats().Limit sampled each second of the measured
// period, its median and, when it moved, its range (for a fixed size it is
// the MaxSize). bench/README.md, "PostgreSQL: which
// MaxSize", says how to read it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/msl-armory/pool"
	"github.com/msl-armory/pool/bench/internal/work"
)

// options are the flags.
type options struct {
	dsn      string
	clients  int
	runs     []runSpec
	rows     int
	stmt     string
	warmup   time.Duration
	duration time.Duration
	timeout  time.Duration
	rounds   int
	adaptive bool
}

// runSpec is one entry of -sizes: a MaxSize, and whether the pool's
// adaptive limit is on under it.
type runSpec struct {
	size     int
	adaptive bool
}

func (r runSpec) String() string {
	if r.adaptive {
		return fmt.Sprintf("%d adaptive", r.size)
	}
	return strconv.Itoa(r.size)
}

// defaultSizes is -sizes's default.
const defaultSizes = "2,4,8,12,16,24,32,48,64"

// maxRows is the rows pg.sh puts in hot.
const maxRows = 64

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // the flag package printed the usage
	}
	if err != nil {
		fail(err.Error())
	}
	base := pool.Options[*pgx.Conn]{
		Name:          "pgsize",
		CreateTimeout: 10 * time.Second,
		Destroy: func(c *pgx.Conn) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return c.Close(ctx)
		},
	}
	if err := run(o, base); err != nil {
		fmt.Fprintln(os.Stderr, "pgsize:", err)
		os.Exit(1)
	}
}

// fail reports a usage error and exits with status 2, as the flag package
// does.
func fail(msg string) {
	fmt.Fprintln(os.Stderr, "pgsize:", msg)
	os.Exit(2)
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("pgsize", flag.ContinueOnError)
	o := options{}
	fs.StringVar(&o.dsn, "dsn", os.Getenv("PGSIZE_DSN"), "the server, as pgx.Connect takes it (default $PGSIZE_DSN; pg.sh sets it)")
	fs.IntVar(&o.clients, "clients", 64, "goroutines, each leasing, running the statement and releasing in a loop")
	size := fs.Int("size", 0, "one MaxSize to run, instead of -sizes")
	sizes := fs.String("sizes", defaultSizes, "MaxSizes to run, comma-separated, in this order; aN (a64) is an adaptive run with MaxSize N")
	fs.IntVar(&o.rows, "rows", 4, fmt.Sprintf("hot rows: each statement picks one of ids 1..rows at random (at most %d)", maxRows))
	fs.StringVar(&o.stmt, "stmt", "update", "the statement: update (autocommit UPDATE of one row) or lock (a transaction: SELECT ... FOR UPDATE, then UPDATE)")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "run time before the measurement, per size")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured run time per size")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "the ctx of each operation, lease and statement; one that ends stops the run")
	fs.IntVar(&o.rounds, "rounds", 1, "times to run every size, alternating the order")
	fs.BoolVar(&o.adaptive, "adaptive", false, "turn on the pool's adaptive size limit (Options.AdaptiveSize) in every run, each size then its ceiling (MaxSize)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.dsn == "" {
		return o, errors.New("no -dsn (run it through bench/pg.sh)")
	}
	if *size != 0 {
		o.runs = []runSpec{{size: *size}}
	} else {
		for f := range strings.SplitSeq(*sizes, ",") {
			f = strings.TrimSpace(f)
			num, adaptive := strings.CutPrefix(f, "a")
			n, err := strconv.Atoi(num)
			if err != nil {
				return o, fmt.Errorf("-sizes: %q is not a number or aN", f)
			}
			o.runs = append(o.runs, runSpec{size: n, adaptive: adaptive})
		}
	}
	for i, r := range o.runs {
		if r.size < 1 {
			return o, fmt.Errorf("MaxSize %d: must be at least 1", r.size)
		}
		o.runs[i].adaptive = r.adaptive || o.adaptive
	}
	if _, ok := statements[o.stmt]; !ok {
		return o, fmt.Errorf("-stmt %q: want update or lock", o.stmt)
	}
	if o.clients < 1 || o.rounds < 1 || o.rows < 1 || o.rows > maxRows {
		return o, fmt.Errorf("-clients and -rounds must be at least 1, -rows between 1 and %d", maxRows)
	}
	if o.warmup < 0 || o.duration <= 0 || o.timeout <= 0 {
		return o, errors.New("-duration and -timeout must be above 0, -warmup not below 0")
	}
	return o, nil
}

// A statement runs one operation's SQL on c, on row id.
type statement func(ctx context.Context, c *pgx.Conn, id int) error

var statements = map[string]statement{
	"update": func(ctx context.Context, c *pgx.Conn, id int) error {
		_, err := c.Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = $1", id)
		return err
	},
	"lock": func(ctx context.Context, c *pgx.Conn, id int) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			var n int64
			if err := tx.QueryRow(ctx, "SELECT n FROM hot WHERE id = $1 FOR UPDATE", id).Scan(&n); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE hot SET n = $2 WHERE id = $1", id, n+1)
			return err
		})
	},
}

// result is one run's figures.
type result struct {
	spec       runSpec
	limits     []int // Stats().Limit, sampled each second of the measured period
	ops        int   // operations that ended within the measured window
	opsPerSec  float64
	p50, p99   time.Duration
	waitShare  float64 // leases that waited, over the leases, in the window
	total      int     // operations completed, warm-up included
	sumGrowth  int64   // hot's sum of n after the run less before it
	wallPerRun time.Duration
}

func run(o options, base pool.Options[*pgx.Conn]) error {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, o.dsn)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	var version, syncCommit, fsync string
	var rows int
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync'), (SELECT count(*) FROM hot WHERE id <= $1)", o.rows).
		Scan(&version, &syncCommit, &fsync, &rows); err != nil {
		return fmt.Errorf("reading the server's settings and hot (did pg.sh create it?): %w", err)
	}
	if rows != o.rows {
		return fmt.Errorf("hot has %d of ids 1..%d", rows, o.rows)
	}
	fmt.Fprintf(os.Stderr, "pgsize: PostgreSQL %s (synchronous_commit %s, fsync %s), %s GOMAXPROCS %d (NumCPU %d)\n",
		version, syncCommit, fsync, runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintf(os.Stderr, "pgsize: %d clients, -stmt %s on %d hot rows, warm-up %v + %v per size, %d round(s), adaptive %v\n",
		o.clients, o.stmt, o.rows, o.warmup, o.duration, o.rounds, o.adaptive)

	bySpec := map[runSpec][]result{}
	start := time.Now()
	for round := range o.rounds {
		order := slices.Clone(o.runs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, spec := range order {
			if _, err := admin.Exec(ctx, "VACUUM hot"); err != nil {
				return err
			}
			opts := base
			opts.MaxSize = spec.size
			if spec.adaptive {
				applyAdaptive(&opts)
			}
			r, err := runOne(ctx, o, admin, opts)
			if err != nil {
				return fmt.Errorf("MaxSize %v: %w", spec, err)
			}
			r.spec = spec
			fmt.Fprintf(os.Stderr, "round %d MaxSize %v: %.0f ops/s, p50 %s, p99 %s, waited %.0f %%, limit %s (%d ops in %v)\n",
				round+1, spec, r.opsPerSec, ms(r.p50), ms(r.p99), 100*r.waitShare, limitCell([]result{r}), r.ops, r.wallPerRun.Round(time.Millisecond))
			bySpec[spec] = append(bySpec[spec], r)
		}
	}
	fmt.Fprintf(os.Stderr, "pgsize: %v in all\n\n", time.Since(start).Round(time.Second))
	printTable(o, bySpec)
	return nil
}

// sample is one operation: when it ended, from the run's start, and its
// response time.
type sample struct {
	end, took time.Duration
}

// runOne runs the workload on a new pool with opts for o.warmup +
// o.duration, then closes the pool.
func runOne(ctx context.Context, o options, admin *pgx.Conn, opts pool.Options[*pgx.Conn]) (result, error) {
	var r result
	var before int64
	if err := admin.QueryRow(ctx, "SELECT sum(n) FROM hot").Scan(&before); err != nil {
		return r, err
	}
	dial := pool.FactoryFunc[*pgx.Conn](func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.Connect(ctx, o.dsn)
	})
	p, err := pool.New(ctx, dial, opts)
	if err != nil {
		return r, err
	}
	stmt := statements[o.stmt]
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		failOnce sync.Once
		failure  error
		failed   = make(chan struct{})
	)
	samples := make([][]sample, o.clients)
	begin := time.Now()
	for g := range o.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), uint64(begin.UnixNano())))
			var mine []sample
			for !stop.Load() {
				id := 1 + rng.IntN(o.rows)
				t0 := time.Now()
				err := operation(ctx, o.timeout, p, stmt, id)
				t1 := time.Now()
				if err != nil {
					failOnce.Do(func() { failure = err; close(failed) })
					stop.Store(true)
					break
				}
				mine = append(mine, sample{end: t1.Sub(begin), took: t1.Sub(t0)})
			}
			samples[g] = mine
		})
	}
	var s0, s1 pool.Stats
	if sleepUnless(failed, o.warmup) {
		s0 = p.Stats()
		// The limit, each second of the measured period; s1 at its end.
		for next := o.warmup + time.Second; ; next += time.Second {
			end := min(next, o.warmup+o.duration)
			if !sleepUnless(failed, end-time.Since(begin)) {
				break
			}
			s := p.Stats()
			r.limits = append(r.limits, s.Limit)
			if end == o.warmup+o.duration {
				s1 = s
				break
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	r.wallPerRun = time.Since(begin)
	if err := p.Close(); err != nil {
		return r, fmt.Errorf("closing the pool: %w", err)
	}
	if failure != nil {
		return r, failure
	}

	var took []time.Duration
	for _, mine := range samples {
		r.total += len(mine)
		for _, s := range mine {
			if s.end >= o.warmup && s.end < o.warmup+o.duration {
				took = append(took, s.took)
			}
		}
	}
	if len(took) == 0 {
		return r, errors.New("no operation ended within -duration")
	}
	slices.Sort(took)
	r.ops = len(took)
	r.opsPerSec = float64(r.ops) / o.duration.Seconds()
	r.p50, r.p99 = work.Percentile(took, 500), work.Percentile(took, 990)
	if leases := s1.Leases - s0.Leases; leases > 0 {
		r.waitShare = float64(s1.Waits-s0.Waits) / float64(leases)
	}

	var after int64
	if err := admin.QueryRow(ctx, "SELECT sum(n) FROM hot").Scan(&after); err != nil {
		return r, err
	}
	r.sumGrowth = after - before
	if r.sumGrowth != int64(r.total) {
		return r, fmt.Errorf("hot's sum of n grew by %d, but %d operations completed", r.sumGrowth, r.total)
	}
	return r, nil
}

// sleepUnless sleeps for d, or until failed is closed; it reports whether
// it slept the whole d.
func sleepUnless(failed <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-failed:
		return false
	}
}

// operation is what one client does once and times: lease, statement,
// release. A connection whose statement failed is discarded.
func operation(ctx context.Context, timeout time.Duration, p *pool.Pool[*pgx.Conn], stmt statement, id int) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := p.Lease(ctx)
	if err != nil {
		return err
	}
	if err := stmt(ctx, l.Value(), id); err != nil {
		l.Discard()
		return err
	}
	l.Release()
	return nil
}

// printTable prints the markdown table, the runs in o's order: with one
// round each run's figures, with more the medians, ops/s with its range.
func printTable(o options, bySpec map[runSpec][]result) {
	fmt.Println("| MaxSize | ops/s | p50 | p99 | waited | limit |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: |")
	seen := map[runSpec]bool{}
	for _, spec := range o.runs {
		if seen[spec] {
			continue
		}
		seen[spec] = true
		rs := bySpec[spec]
		opsPerSec := median(rs, func(r result) float64 { return r.opsPerSec })
		cell := fmt.Sprintf("%.0f", opsPerSec)
		if len(rs) > 1 {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, r := range rs {
				lo, hi = min(lo, r.opsPerSec), max(hi, r.opsPerSec)
			}
			cell = fmt.Sprintf("%.0f (%.0f–%.0f)", opsPerSec, lo, hi)
		}
		p50 := time.Duration(median(rs, func(r result) float64 { return float64(r.p50) }))
		p99 := time.Duration(median(rs, func(r result) float64 { return float64(r.p99) }))
		waited := median(rs, func(r result) float64 { return r.waitShare })
		fmt.Printf("| %v | %s | %s | %s | %.0f %% | %s |\n", spec, cell, ms(p50), ms(p99), 100*waited, limitCell(rs))
	}
}

// limitCell is the limit column for rs: the median of every run's median
// sampled limit, and the range of all the samples when they are not all one.
func limitCell(rs []result) string {
	var all []int
	for _, r := range rs {
		all = append(all, r.limits...)
	}
	if len(all) == 0 {
		return "–"
	}
	m := median(rs, func(r result) float64 {
		xs := slices.Sorted(slices.Values(r.limits))
		if len(xs) == 0 {
			return math.NaN()
		}
		if n := len(xs); n%2 == 0 {
			return float64(xs[n/2-1]+xs[n/2]) / 2
		}
		return float64(xs[len(xs)/2])
	})
	lo, hi := slices.Min(all), slices.Max(all)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%g (%d–%d)", m, lo, hi)
}

// median is the median of f over rs (the mean of the middle two when even).
func median(rs []result, f func(result) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// ms formats d in milliseconds, to two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
