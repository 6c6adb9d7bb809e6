// Command tracing adapts a pool's Tracer to OpenTelemetry spans: Tracer,
// below, is short enough to copy. It runs a short story on a pool of one
// connection, traced through the OpenTelemetry SDK into its in-memory
// exporter: a lease that creates its connection, one served at once by the
// idle connection, one that waits while another request holds it, and one
// that gives up after LeaseTimeout, each in a request span of its own. Then
// it prints the spans the exporter captured, durations only as zero or
// non-zero, so that the output is the same on every run.
//
//	cd examples/tracing && go run .
//
// It is a module of its own, so that the SDK's dependencies stay out of
// the library's go.mod.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Tracer is a pool.Tracer that makes OpenTelemetry spans. For each lease,
// a pool.lease span, child of the span in the caller's ctx, from the
// lease's start to its outcome: the time it waited for a connection, the
// factory's and the Preparer's as attributes, in seconds (0: it did not
// take that step), and its error as the span's status. For a granted lease,
// a pool.lease.held span, also a child of the caller's span, from the lease
// to its end, with how it ended. Set it as Options.Tracer:
//
//	pool.Options[*Conn]{Tracer: NewTracer(otel.GetTracerProvider())}
type Tracer struct{ tracer trace.Tracer }

// NewTracer returns a Tracer whose spans tp makes.
func NewTracer(tp trace.TracerProvider) Tracer {
	return Tracer{tracer: tp.Tracer("github.com/msl-armory/pool")}
}

// leaseKey is the ctx key of a lease's spans: LeaseStart puts them in the
// ctx it returns, which LeaseEnd and Released get, so that no map is needed.
type leaseKey struct{}

// leaseSpans are the caller's span, the parent of the hold's, and the
// hold's span once LeaseEnd has started it.
type leaseSpans struct{ caller, held trace.Span }

// LeaseStart starts the pool.lease span.
func (t Tracer) LeaseStart(ctx context.Context, pool string) context.Context {
	s := &leaseSpans{caller: trace.SpanFromContext(ctx)}
	ctx, _ = t.tracer.Start(ctx, "pool.lease", trace.WithAttributes(attribute.String("pool.name", pool)))
	return context.WithValue(ctx, leaseKey{}, s)
}

// LeaseEnd ends the pool.lease span, and starts the pool.lease.held span of
// a granted lease.
func (t Tracer) LeaseEnd(ctx context.Context, lt pool.LeaseTrace) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(
		attribute.Float64("pool.lease.wait", lt.Wait.Seconds()),
		attribute.Float64("pool.lease.create", lt.Create.Seconds()),
		attribute.Float64("pool.lease.prepare", lt.Prepare.Seconds()),
		attribute.Int("pool.lease.uses", lt.Uses),
	)
	if lt.Err != nil {
		span.RecordError(lt.Err)
		span.SetStatus(codes.Error, lt.Err.Error())
	}
	span.End()
	if s, ok := ctx.Value(leaseKey{}).(*leaseSpans); ok && lt.Err == nil {
		_, s.held = t.tracer.Start(trace.ContextWithSpan(ctx, s.caller), "pool.lease.held",
			trace.WithAttributes(attribute.String("pool.name", lt.Pool)))
	}
}

// Released ends the pool.lease.held span, with how the lease ended.
func (t Tracer) Released(ctx context.Context, rt pool.ReleaseTrace) {
	if s, ok := ctx.Value(leaseKey{}).(*leaseSpans); ok && s.held != nil {
		s.held.SetAttributes(attribute.String("pool.lease.end", rt.How), attribute.Float64("pool.lease.held", rt.Held.Seconds()))
		s.held.End()
	}
}

// The story's pool: one connection, dialed and pinged in a moment; a lease
// gives up after leaseTimeout.
const (
	dialTime     = 2 * time.Millisecond
	pingTime     = time.Millisecond
	holdTime     = time.Millisecond
	leaseTimeout = 20 * time.Millisecond
)

// conn stands in for a connection to a backend.
type conn struct{ id int64 }

func run(w io.Writer) error {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // exports each span as it ends
	defer func() { _ = tp.Shutdown(context.Background()) }()

	// The factory and the Preparer get the ctx LeaseStart returned: their
	// spans nest under the lease's.
	app := tp.Tracer("example")
	var dialed atomic.Int64
	dial := pool.FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		_, span := app.Start(ctx, "dial")
		defer span.End()
		time.Sleep(dialTime)
		return &conn{id: dialed.Add(1)}, nil
	})
	ping := pool.CheckFunc[*conn](func(ctx context.Context, _ *conn) error {
		_, span := app.Start(ctx, "ping")
		defer span.End()
		time.Sleep(pingTime)
		return nil
	})
	p, err := pool.New(context.Background(), dial, pool.Options[*conn]{
		Name:           "backend",
		MaxSize:        1,
		LeaseTimeout:   leaseTimeout,
		Preparer:       ping,        // pings every fresh connection,
		CheckAfterIdle: time.Minute, // and an idle one after a minute
		Tracer:         NewTracer(tp),
	})
	if err != nil {
		return err
	}
	defer p.Close()

	if err := story(p, app); err != nil {
		return err
	}
	return printSpans(w, exp.GetSpans())
}

// story runs the requests, each in a request span numbered by its
// request.n attribute, which orders the printed spans.
func story(p *pool.Pool[*conn], app trace.Tracer) error {
	request := func(n int, what string, handle func(ctx context.Context) error) error {
		ctx, span := app.Start(context.Background(), "request",
			trace.WithAttributes(attribute.Int("request.n", n), attribute.String("request.story", what)))
		defer span.End()
		return handle(ctx)
	}
	use := func(ctx context.Context) error {
		l, err := p.Lease(ctx)
		if err != nil {
			return err
		}
		defer l.Release()
		time.Sleep(holdTime)
		return nil
	}

	// The first lease dials the connection, and pings it.
	if err := request(1, "creates", use); err != nil {
		return err
	}
	// The next is served at once by the idle connection, not pinged.
	if err := request(2, "served at once", use); err != nil {
		return err
	}
	// One request holds the connection until another waits for it.
	leased, held := make(chan struct{}), make(chan error, 1)
	go func() {
		held <- request(3, "holds", func(ctx context.Context) error {
			l, err := p.Lease(ctx)
			close(leased)
			if err != nil {
				return err
			}
			defer l.Release()
			for p.Stats().QueuedLeases == 0 {
				time.Sleep(100 * time.Microsecond)
			}
			return nil
		})
	}()
	<-leased
	if err := errors.Join(request(4, "waits", use), <-held); err != nil {
		return err
	}
	// One request holds the connection longer than LeaseTimeout, and
	// another gives up.
	return request(5, "holds", func(ctx context.Context) error {
		l, err := p.Lease(ctx)
		if err != nil {
			return err
		}
		defer l.Release()
		return request(6, "times out", func(ctx context.Context) error {
			if _, err := p.Lease(ctx); !errors.Is(err, pool.ErrLeaseTimeout) {
				return fmt.Errorf("the lease should have timed out, got %v", err)
			}
			return nil
		})
	})
}

// printSpans prints each request span and, indented under it, the spans
// it is the parent of, theirs under them, each in the order they started,
// on a line: name, parent, status, events and attributes, every float
// attribute (a duration in seconds) as 0 or non-zero.
func printSpans(w io.Writer, spans tracetest.SpanStubs) error {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	var requests []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.IsValid() {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			requests = append(requests, s)
		}
	}
	slices.SortFunc(requests, func(a, b tracetest.SpanStub) int {
		return cmp.Compare(attr(a, "request.n"), attr(b, "request.n"))
	})
	printed := 0
	var tree func(parent tracetest.SpanStub, indent string)
	tree = func(parent tracetest.SpanStub, indent string) {
		kids := children[parent.SpanContext.SpanID()]
		slices.SortStableFunc(kids, func(a, b tracetest.SpanStub) int {
			return cmp.Or(a.StartTime.Compare(b.StartTime), cmp.Compare(a.Name, b.Name))
		})
		for _, s := range kids {
			fmt.Fprintf(w, "%s%s, child of %s, status %s", indent, s.Name, parent.Name, s.Status.Code)
			for _, e := range s.Events {
				fmt.Fprintf(w, ", event %s", e.Name)
			}
			if len(s.Attributes) > 0 {
				fmt.Fprintf(w, ": %s", attrs(s))
			}
			fmt.Fprintln(w)
			printed++
			tree(s, indent+"  ")
		}
	}
	for _, r := range requests {
		fmt.Fprintf(w, "%s %s (%s)\n", r.Name, attr(r, "request.n"), attr(r, "request.story"))
		printed++
		tree(r, "  ")
	}
	if printed != len(spans) {
		return fmt.Errorf("%d spans captured, %d printed: some have no request span above them", len(spans), printed)
	}
	return nil
}

// attr returns the value of s's attribute key, as text.
func attr(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

// attrs returns s's attributes, sorted by key, durations as 0 or non-zero.
func attrs(s tracetest.SpanStub) string {
	kvs := slices.Clone(s.Attributes)
	slices.SortFunc(kvs, func(a, b attribute.KeyValue) int { return cmp.Compare(a.Key, b.Key) })
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		v := kv.Value.String()
		if kv.Value.Type() == attribute.FLOAT64 && kv.Value.AsFloat64() != 0 {
			v = "non-zero"
		}
		out[i] = fmt.Sprintf("%s=%s", kv.Key, v)
	}
	return strings.Join(out, " ")
}
