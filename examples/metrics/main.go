// Command metrics shows a pool's observability: it runs a pool under a
// small load with its metrics going through the OpenTelemetry SDK to a
// Prometheus exporter, served on a loopback port; leaks a lease, which the
// garbage collector finds and OnLeak reports with the stack that took it;
// then scrapes its own /metrics endpoint and prints the pool's series, the
// saturation a dashboard computes from them, and the hold-time histogram.
//
//	cd examples/metrics && go run .
//
// It is a module of its own, so that the exporter's dependencies stay out
// of the library's go.mod.
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/msl-armory/pool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// The load: workers × leasesEach leases, each holding its item for hold.
const (
	workers    = 6
	leasesEach = 20
	hold       = time.Millisecond
	maxSize    = 4
)

// conn stands in for a connection to a backend.
type conn struct{ id int }

// dialer is the pool's Factory: it counts its dials, each of which takes a
// moment, as a real one would.
type dialer struct {
	mu     sync.Mutex
	dialed int
}

func (d *dialer) Create(ctx context.Context) (*conn, error) {
	select {
	case <-time.After(2 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dialed++
	return &conn{id: d.dialed}, nil
}

// pinger is the pool's Preparer: every connection answers its ping.
type pinger struct{}

func (pinger) IsReady(context.Context, *conn) (bool, error) { return true, nil }
func (pinger) Prepare(context.Context, *conn) error         { return nil }

func run(w io.Writer) error {
	ctx := context.Background()

	// The OpenTelemetry SDK, reading through a Prometheus exporter that
	// registers with its own registry, served on a loopback port.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	leaks := make(chan pool.LeakReport, 1)
	p, err := pool.New[*conn](ctx, &dialer{}, pool.Options[*conn]{
		Name:            "backend",
		MinSize:         2,
		MaxSize:         maxSize,
		LeaseTimeout:    50 * time.Millisecond,
		Preparer:        pinger{},
		MeterProvider:   mp,
		OnLeak:          func(r pool.LeakReport) { leaks <- r },
		TrackLeaseSites: true,
	})
	if err != nil {
		return err
	}
	defer p.Close()

	if err := load(ctx, p); err != nil {
		return err
	}
	fmt.Fprintf(w, "load: %d leases by %d workers, then one lease timed out and one item was discarded\n\n", workers*leasesEach, workers)

	leakOne(ctx, p)
	r, err := awaitLeak(leaks)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "leak report: pool %q, out for %v, taken at:\n", r.Pool, r.Age.Round(time.Millisecond))
	frames := strings.Split(strings.TrimSpace(r.Stack), "\n")
	for _, f := range frames[:min(len(frames), 4)] { // the top two frames
		fmt.Fprintf(w, "  %s\n", f)
	}
	fmt.Fprintln(w)

	lines, err := scrape("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "exported (the pool_ series, without histogram buckets):")
	var buckets []string
	for _, l := range lines {
		if strings.Contains(l, "_bucket{") {
			if strings.HasPrefix(l, "pool_lease_use_time_seconds_bucket{") {
				buckets = append(buckets, l)
			}
			continue
		}
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	return dashboard(w, lines, buckets)
}

// The queries a dashboard makes of these series: saturation, how full the
// pool is against its cap (near 1 before the timeouts: the pool was too
// small, or its items held too long), and the hold time's quantiles, from
// the histogram of a sample of the leases.
const (
	saturationQuery = `max by (pool_name) (pool_leases_active / pool_items_max)`
	holdTimeQuery   = `histogram_quantile(0.99, sum by (le, pool_name) (rate(pool_lease_use_time_seconds_bucket[5m])))`
)

// dashboard prints what those queries compute, from one scrape: lines are
// its pool_ samples, buckets those of pool_lease_use_time_seconds.
func dashboard(w io.Writer, lines, buckets []string) error {
	active, err := sample(lines, `pool_leases_active{pool_name="backend"}`)
	if err != nil {
		return err
	}
	maxItems, err := sample(lines, `pool_items_max{pool_name="backend"}`)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "saturation, %s:\n  %v / %v = %.2f\n", saturationQuery, active, maxItems, active/maxItems)

	count, err := sample(lines, `pool_lease_use_time_seconds_count{pool_name="backend"}`)
	if err != nil {
		return err
	}
	granted, err := sample(lines, `pool_leases_granted_total{pool_name="backend"}`)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "hold time, %s:\n", holdTimeQuery)
	fmt.Fprintf(w, "  pool_lease_use_time_seconds holds a sample of the leases: %v of the %v granted\n", count, granted)
	slices.SortFunc(buckets, func(a, b string) int { return cmp.Compare(le(a), le(b)) })
	for _, b := range buckets {
		fmt.Fprintf(w, "  %s\n", b)
	}
	return nil
}

// le returns a bucket sample's upper bound.
func le(bucket string) float64 {
	_, v, _ := strings.Cut(bucket, `le="`)
	v, _, _ = strings.Cut(v, `"`)
	f, _ := strconv.ParseFloat(v, 64) // "+Inf" parses too
	return f
}

// sample returns the value of the series named exactly so in lines.
func sample(lines []string, series string) (float64, error) {
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no series %s", series)
}

// load runs the workers, then makes one lease time out (every item held)
// and discards one item.
func load(ctx context.Context, p *pool.Pool[*conn]) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range leasesEach {
				l, err := p.Lease(ctx)
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(hold) // use the connection
				l.Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("load: %w", err)
	}

	var held []pool.Lease[*conn]
	for range maxSize {
		l, err := p.Lease(ctx)
		if err != nil {
			return err
		}
		held = append(held, l)
	}
	if _, err := p.Lease(ctx); !errors.Is(err, pool.ErrLeaseTimeout) {
		return fmt.Errorf("want a lease timeout, got %v", err)
	}
	held[0].Discard() // broken: destroyed
	for _, l := range held[1:] {
		l.Release()
	}
	return nil
}

// leakOne takes a lease and drops it without Release: the bug OnLeak finds.
//
//go:noinline
func leakOne(ctx context.Context, p *pool.Pool[*conn]) {
	l, err := p.Lease(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_ = l.Value()
}

// awaitLeak prompts the garbage collector until OnLeak has reported. A
// service would let the collector run on its own schedule.
func awaitLeak(leaks <-chan pool.LeakReport) (pool.LeakReport, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		select {
		case r := <-leaks:
			return r, nil
		case <-time.After(time.Millisecond):
		}
	}
	return pool.LeakReport{}, errors.New("no leak reported")
}

// scrape fetches a Prometheus text endpoint and returns its pool_ samples,
// sorted.
func scrape(url string) ([]string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "pool_") {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.Sort(lines)
	return lines, nil
}
