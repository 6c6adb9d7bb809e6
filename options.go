package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// DefaultMaxSize is the MaxSize a pool gets when Options.MaxSize is 0.
const DefaultMaxSize = 100

// Options configures a Pool. The zero value is valid: a pool of at most
// DefaultMaxSize items, created on demand, that waits for a permit until the
// caller's ctx ends and never expires an item.
//
// Options decodes from JSON (see UnmarshalJSON), so a pool can be configured
// from a file; the function- and interface-valued fields are set in code.
type Options[T any] struct {
	// Name identifies the pool in Stats and errors. Default: T's type name
	// without package path or pointer stars, plus ".Pool" ("*sql.Conn" gives
	// "Conn.Pool").
	Name string

	// MinSize items are created by New, and Clear refills the idle items to
	// it. Default 0: every item is created on demand.
	MinSize int

	// MaxSize is the hard cap on items in existence: leased, idle, being
	// created or being destroyed. Default DefaultMaxSize.
	MaxSize int

	// LeaseTimeout bounds the wait for a permit when all MaxSize are held;
	// it elapses as ErrLeaseTimeout. 0: wait until the caller's ctx ends.
	LeaseTimeout time.Duration

	// PreparationTimeout bounds IsReady plus Prepare on one item; it elapses
	// as ErrPreparationTimeout. 0: until the caller's ctx ends.
	PreparationTimeout time.Duration

	// CreateTimeout bounds one Factory.Create call, also one that finishes
	// in the background after its caller gave up. 0: until Close.
	CreateTimeout time.Duration

	// IdleTimeout: an item idle longer than this is destroyed by the next
	// lease that meets it (eviction is lazy: there is no background timer).
	// 0: never.
	IdleTimeout time.Duration

	// MaxLifetime: an item older than this (counted from the end of its
	// creation) is destroyed on release, or by the next lease that meets it
	// idle. 0: never.
	MaxLifetime time.Duration

	// Preparer checks and restores items on lease. nil: every item is ready.
	Preparer Preparer[T] `json:"-"`

	// CheckAfterIdle: the Preparer sees an idle item only when it sat idle
	// at least this long; fresh items are always checked. 0: every lease.
	CheckAfterIdle time.Duration

	// Reset runs on Release, before the item is reused; an error (or a
	// panic) destroys the item instead. nil: items are reused as they are.
	Reset func(item T) error `json:"-"`

	// Destroy disposes of an item the pool lets go of. nil: Close() when the
	// item is an io.Closer, nothing otherwise. The item counts as destroyed
	// however Destroy ends; a panic reaches the call that destroyed it
	// (Lease, Release, Discard, Clear, Close), except for an item that a
	// creation its caller gave up on delivers after Close: no caller
	// exists, and that panic is dropped.
	Destroy func(item T) error `json:"-"`

	// MeterProvider receives the pool's OpenTelemetry instruments (see the
	// README's Metrics section), under the instrumentation scope
	// "github.com/msl-armory/pool" and the attribute pool.name. nil (or a
	// no-op provider): nothing is registered and nothing recorded. A lease
	// and release of an idle item records nothing either way: the gauges
	// are observed when the provider collects.
	MeterProvider metric.MeterProvider `json:"-"`

	// OnLeak is called, on a goroutine of its own, for every leaked lease
	// the garbage collector finds: one that became unreachable without
	// Release, Discard or Detach. It must not refer to the pool, or a pool
	// dropped without Close could never be collected. Leaks are counted in
	// Stats.Leaked (and pool.leases.leaked) whether OnLeak is set or not.
	// nil: count only.
	OnLeak func(LeakReport) `json:"-"`

	// TrackLeaseSites records, on every lease, when and where (the stack of
	// the Lease call, up to 32 frames) it was taken, so that a LeakReport
	// can say. Off, leak detection costs nothing per lease. On, every lease
	// takes the slow path and calls runtime.Callers: a lease and release
	// cost about ten times as much (0.36 µs from a shallow stack, 1.0 µs
	// from 40 frames deep, against 35 ns; BenchmarkLeaseReleaseObserved),
	// and each item about 300 bytes more; still no allocation per lease. For
	// tests, debugging, or a service hunting a leak.
	TrackLeaseSites bool

	// Logger receives, at Warn, the errors that have no caller to return
	// to: a Destroy or Reset that fails on Release or Discard, on expiry or
	// in the background; a creation whose lease gave up on it; Clear's
	// refill. Each record carries the pool's name as pool.name and the
	// error as err. nil: not logged (they are still counted in Stats).
	Logger *slog.Logger `json:"-"`
}

// withDefaults returns o with the defaults filled in and checks the result.
func (o Options[T]) withDefaults() (Options[T], error) {
	if o.Name == "" {
		o.Name = defaultName[T]()
	}
	// A typed nil in an interface is no value: a nil *sdkmetric.MeterProvider
	// would panic inside the SDK, a nil Preparer on every lease.
	if isNil(o.MeterProvider) {
		o.MeterProvider = nil
	}
	if isNil(o.Preparer) {
		o.Preparer = nil
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxSize < 1 {
		return o, fmt.Errorf("%w: MaxSize is %d, must be at least 1 (0 means %d)", ErrInvalidOptions, o.MaxSize, DefaultMaxSize)
	}
	if o.MinSize < 0 || o.MinSize > o.MaxSize {
		return o, fmt.Errorf("%w: MinSize is %d, must be between 0 and MaxSize (%d)", ErrInvalidOptions, o.MinSize, o.MaxSize)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"LeaseTimeout", o.LeaseTimeout},
		{"PreparationTimeout", o.PreparationTimeout},
		{"CreateTimeout", o.CreateTimeout},
		{"IdleTimeout", o.IdleTimeout},
		{"MaxLifetime", o.MaxLifetime},
		{"CheckAfterIdle", o.CheckAfterIdle},
	} {
		if d.v < 0 {
			return o, fmt.Errorf("%w: %s is %v, must not be negative (0 means no limit)", ErrInvalidOptions, d.name, d.v)
		}
	}
	return o, nil
}

// defaultName is T's type name without package paths or leading pointer
// stars, plus ".Pool": *sql.Conn gives "Conn.Pool", Box[int] "Box[int].Pool".
func defaultName[T any]() string {
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer && t.Name() == "" {
		t = t.Elem()
	}
	name := t.Name()
	if name == "" {
		name = t.String() // an unnamed type: []byte, map[string]int, ...
	}
	return unqualify(name) + ".Pool"
}

// unqualify drops the package path from every qualified identifier in a
// type name: "Box[github.com/x/y.Item]" becomes "Box[Item]".
func unqualify(name string) string {
	var b strings.Builder
	start := 0
	flush := func(end int) {
		word := name[start:end]
		if slash := strings.LastIndexByte(word, '/'); slash >= 0 {
			word = word[slash+1:]
		}
		if dot := strings.LastIndexByte(word, '.'); dot >= 0 {
			word = word[dot+1:]
		}
		b.WriteString(word)
	}
	for i := 0; i < len(name); i++ {
		if strings.IndexByte("[](),* ", name[i]) >= 0 {
			flush(i)
			b.WriteByte(name[i])
			start = i + 1
		}
	}
	flush(len(name))
	return b.String()
}

// duration is a time.Duration that encodes as a Go duration string.
type duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// parseDuration decodes a JSON duration: a Go duration string ("1m30s") or
// a whole number of nanoseconds. null (or nothing) reports ok false.
func parseDuration(raw json.RawMessage) (d time.Duration, ok bool, err error) {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null":
		return 0, false, nil
	case strings.HasPrefix(s, `"`):
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return 0, false, err
		}
		d, err := time.ParseDuration(str)
		return d, err == nil, err
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n), true, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < math.MaxInt64 {
		return time.Duration(f), true, nil // 1e9: a whole number in exponent form
	}
	return 0, false, fmt.Errorf("invalid duration %s: want a string such as \"30s\" or whole nanoseconds", s)
}

// optionsJSON is the JSON form of Options that MarshalJSON writes: the
// fields that can come from configuration, durations as strings.
type optionsJSON struct {
	Name               string   `json:"Name,omitempty"`
	MinSize            int      `json:"MinSize"`
	MaxSize            int      `json:"MaxSize"`
	LeaseTimeout       duration `json:"LeaseTimeout"`
	PreparationTimeout duration `json:"PreparationTimeout"`
	CreateTimeout      duration `json:"CreateTimeout"`
	IdleTimeout        duration `json:"IdleTimeout"`
	MaxLifetime        duration `json:"MaxLifetime"`
	CheckAfterIdle     duration `json:"CheckAfterIdle"`
	TrackLeaseSites    bool     `json:"TrackLeaseSites"`
}

// optionsInput is what UnmarshalJSON reads: pointers and raw durations, so
// that an absent or null key can be told from a zero.
type optionsInput struct {
	Name               *string
	MinSize            *int
	MaxSize            *int
	LeaseTimeout       json.RawMessage
	PreparationTimeout json.RawMessage
	CreateTimeout      json.RawMessage
	IdleTimeout        json.RawMessage
	MaxLifetime        json.RawMessage
	CheckAfterIdle     json.RawMessage
	TrackLeaseSites    *bool
}

// UnmarshalJSON decodes o from a JSON object keyed by the field names
// (matched without regard to case, as encoding/json does): {"MaxSize": 20,
// "LeaseTimeout": "30s"}. Durations accept Go duration strings or whole
// numbers of nanoseconds. A key that is absent or null leaves its field as
// it was, so decoding a shared section and then a per-pool section into the
// same value overlays the second on the first. Function- and
// interface-valued fields are never read from JSON, and unknown keys are
// ignored, as encoding/json ignores them by default (a Decoder's
// DisallowUnknownFields does not reach into this method). On error o is
// left unchanged and the message names the field.
func (o *Options[T]) UnmarshalJSON(data []byte) error {
	var in optionsInput
	if err := json.Unmarshal(data, &in); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fmt.Errorf("pool: decode options: %s: JSON %s is not a %s", typeErr.Field, typeErr.Value, typeErr.Type)
		}
		if errors.As(err, &typeErr) {
			return fmt.Errorf("pool: decode options: want a JSON object, got %s", typeErr.Value)
		}
		return fmt.Errorf("pool: decode options: %w", err)
	}
	next := *o
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *time.Duration
	}{
		{"LeaseTimeout", in.LeaseTimeout, &next.LeaseTimeout},
		{"PreparationTimeout", in.PreparationTimeout, &next.PreparationTimeout},
		{"CreateTimeout", in.CreateTimeout, &next.CreateTimeout},
		{"IdleTimeout", in.IdleTimeout, &next.IdleTimeout},
		{"MaxLifetime", in.MaxLifetime, &next.MaxLifetime},
		{"CheckAfterIdle", in.CheckAfterIdle, &next.CheckAfterIdle},
	} {
		d, ok, err := parseDuration(f.raw)
		if err != nil {
			return fmt.Errorf("pool: decode options: %s: %w", f.name, err)
		}
		if ok {
			*f.dst = d
		}
	}
	if in.Name != nil {
		next.Name = *in.Name
	}
	if in.MinSize != nil {
		next.MinSize = *in.MinSize
	}
	if in.MaxSize != nil {
		next.MaxSize = *in.MaxSize
	}
	if in.TrackLeaseSites != nil {
		next.TrackLeaseSites = *in.TrackLeaseSites
	}
	*o = next
	return nil
}

// MarshalJSON encodes the configurable fields of o, durations as Go
// duration strings, in the form UnmarshalJSON reads.
func (o Options[T]) MarshalJSON() ([]byte, error) {
	return json.Marshal(optionsJSON{
		Name:               o.Name,
		MinSize:            o.MinSize,
		MaxSize:            o.MaxSize,
		LeaseTimeout:       duration(o.LeaseTimeout),
		PreparationTimeout: duration(o.PreparationTimeout),
		CreateTimeout:      duration(o.CreateTimeout),
		IdleTimeout:        duration(o.IdleTimeout),
		MaxLifetime:        duration(o.MaxLifetime),
		CheckAfterIdle:     duration(o.CheckAfterIdle),
		TrackLeaseSites:    o.TrackLeaseSites,
	})
}
