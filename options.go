package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
)

// Options' configurable fields (not tagged json:"-") are read by reflection;
// a bad key or value is an error that names the key, never a silent zero.

// DefaultMaxSize is the MaxSize a pool gets when Options.MaxSize is 0.
const DefaultMaxSize = 100

// Options configures a Pool. The zero value is valid: at most DefaultMaxSize
// items, created on demand; a lease waits until the caller's ctx ends; no
// item expires. The function- and interface-valued fields are set in code,
// the others also from JSON (see UnmarshalJSON).
type Options[T any] struct {
	// Name identifies the pool in Stats and errors. Default: T's type name
	// without package path or pointer stars, plus ".Pool" (*sql.Conn: "Conn.Pool").
	Name string

	// MinSize items are created by New, concurrently (in the background with
	// SeedInBackground); Clear refills the idle items to it in the background.
	// With UpkeepInterval it is a lasting floor: the upkeep creates items
	// until MinSize exist, and idle expiry never goes below it. Default 0.
	MinSize int

	// SeedInBackground makes New return without waiting for the MinSize
	// items, while leases work as usual: they are created in the background,
	// several at once, failures logged and retried with backoff up to
	// UpkeepInterval (30 s without the upkeep), until they exist or the pool
	// closes. Off, New creates them and fails with the first failed creation.
	SeedInBackground bool

	// MaxSize is the hard cap on items in existence: leased, idle, being
	// created or being destroyed. Default DefaultMaxSize.
	MaxSize int

	// AdaptiveSize lets the pool find its size: a limit under MaxSize on the
	// items in existence, which the pool's background goroutine moves once a
	// second from the leases' use times, the leases that waited and the
	// failed creations (see Adaptive size in the package documentation). It
	// starts at MinSize (at least 1), and grows only while leases wait and
	// the use time grows more slowly than the items in use. Stats.Limit
	// shows it. Off, the default, the limit is MaxSize and costs nothing.
	AdaptiveSize bool

	// MinIdle items are kept idle as spares: at New, in every upkeep round and
	// after a lease that may have left fewer (one that did not reuse the item
	// its goroutine's processor released last), the pool creates items in the
	// background until MinIdle are idle or MaxSize exist, never while leases
	// wait. Failures are logged, counted in Stats.CreateErrors and retried as
	// for SeedInBackground until Close (or until a pool dropped without Close
	// is collected). Between 0 and MaxSize. Default 0: none.
	MinIdle int

	// MaxQueuedLeases caps the waiting leases: a Lease that would wait behind
	// that many fails at once with ErrExhausted (naming the cap), counted in
	// Stats.Refused. A lease whose item failed its check waits again ahead,
	// past the cap, so up to one such lease per item may exceed it. SetMaxSize
	// leaves it as it is. At least 0. Default 0: no cap.
	MaxQueuedLeases int

	// MaxConcurrentCreates caps the factory calls under way at once, the
	// leases' and the background's (seeding, Clear's refill, MinIdle's spares,
	// the upkeep's) together, so that a cold start or a Clear after a
	// failover dials at a bounded rate. A lease that would create past the
	// cap waits in FIFO order with the others, within its ctx and
	// LeaseTimeout, for an item released or created meanwhile, or for its
	// turn to create; TryLease then fails with ErrExhausted. A creation keeps
	// its turn until the factory returns, even after its lease gave up, so
	// New requires CreateTimeout with it. At least 0; default 0: no cap but
	// MaxSize.
	MaxConcurrentCreates int

	// LeaseTimeout bounds, from the Lease call, all of a lease's waits for an
	// item (all MaxSize being in use) together with its checks of items that
	// failed; it elapses as ErrLeaseTimeout. A check or creation under way
	// then is bounded by PreparationTimeout or CreateTimeout instead. 0: wait
	// until the caller's ctx ends.
	LeaseTimeout time.Duration

	// PreparationTimeout bounds IsReady plus Prepare on one item; it elapses
	// as ErrPreparationTimeout. 0: until the caller's ctx ends.
	PreparationTimeout time.Duration

	// CreateTimeout bounds one Factory.Create call, also one that finishes
	// in the background after its caller gave up. MaxConcurrentCreates and
	// FailFastAfter require it. 0: until Close.
	CreateTimeout time.Duration

	// FailFastAfter: after this many failed creations in a row (an error, a
	// nil item, CreateTimeout), the pool is down. Then a lease that would have
	// to create an item, also one waiting when a place comes free, fails at
	// once, whatever the probe is doing, with an error wrapping ErrBackendDown
	// and the last creation's error, taking no place under MaxSize and no turn
	// under MaxConcurrentCreates. A lease that finds an idle item still gets
	// it, and one waiting while every item is in use gets the next one
	// released. Only one creation, in the background, probes the backend, with
	// backoff doubling up to UpkeepInterval (30 s without the upkeep), so the
	// pool is up again within one backoff step of the backend's return,
	// however many leases come; the probe's item goes to the oldest waiting
	// lease, or idle. Stats.BackendDown and the metric pool.backend.down say
	// whether the pool is down; Logger gets a Warn when it goes down and an
	// Info when it comes back. It requires CreateTimeout, or a creation that
	// never returns would never count. At least 0; default 0: never down.
	FailFastAfter int

	// IdleTimeout: an item idle longer than this is destroyed; without
	// UpkeepInterval, by the first lease or release at least half an
	// IdleTimeout after the last sweep, which takes every idle item past its
	// time. 0: never.
	IdleTimeout time.Duration

	// MaxLifetime: an item older than this (counted from the end of its
	// creation) is destroyed on release, or while idle as for IdleTimeout.
	// 0, or a lifetime the clock cannot reach (math.MaxInt64): never.
	MaxLifetime time.Duration

	// MaxLifetimeJitter adds to each item's lifetime a random duration in
	// [0, MaxLifetimeJitter), drawn at its creation, so that items created
	// together do not all expire at once. Requires MaxLifetime. 0: none.
	MaxLifetimeJitter time.Duration

	// MaxUses: an item leased this many times is destroyed when its last
	// lease ends (Release; its Destroy runs on the pool's own goroutine, as
	// always), counted in Stats.UsesExpired. At least 0. Default 0: no limit.
	MaxUses int

	// Preparer checks and restores items on lease. nil: every item is ready.
	// A CheckFunc is a Preparer that only checks.
	Preparer Preparer[T] `json:"-"`

	// CheckAfterIdle: the Preparer sees an idle item only when it sat idle
	// at least this long; fresh items are always checked. 0: every lease.
	CheckAfterIdle time.Duration

	// Reset runs on Release, before the item is reused; an error (or a
	// panic) destroys the item instead. nil: items are reused as they are.
	Reset func(item T) error `json:"-"`

	// Destroy disposes of an item on a goroutine of the pool's own (Release,
	// Discard, Lease, Clear and SetMaxSize never wait for it). The item
	// counts against MaxSize until Destroy returns or DestroyTimeout passes,
	// and as destroyed however Destroy ends; an error or panic is logged and
	// counted in Stats.DestroyErrors (Close returns those of the idle items
	// it destroys). nil: Close() for an io.Closer, nothing otherwise.
	Destroy func(item T) error `json:"-"`

	// DestroyTimeout bounds the wait for one Destroy: past it the item counts
	// as destroyed (in Stats.Destroyed and DestroyErrors, and a Warn to
	// Logger), its place under MaxSize is free, and the call finishes on its
	// own. 0: no bound; a Destroy that never returns holds its place for good.
	DestroyTimeout time.Duration

	// MeterProvider receives the pool's OpenTelemetry instruments (see
	// Metrics in the package documentation), under the instrumentation scope
	// "github.com/msl-armory/pool" and the attribute pool.name. nil, or a
	// no-op provider: nothing is registered or recorded. A lease and release
	// of an idle item record nothing but pool.lease.use_time's sample (one
	// lease in 512); the gauges are observed when the provider collects.
	MeterProvider metric.MeterProvider `json:"-"`

	// StandardMetricNames publishes, in place of the pool's own instruments
	// for the same figures, the OpenTelemetry semantic conventions' for
	// connection pools, with db.client.connection.pool.name the pool's Name:
	// db.client.connection.count (state idle, or used: leased items only, not
	// those being created, checked or destroyed), .idle.max and .max
	// (MaxSize), .idle.min (MinIdle), .pending_requests, .timeouts
	// (ErrLeaseTimeout), and the histograms .create_time, .wait_time (every
	// lease that got an item, waits of 0 too) and .use_time (every lease, not
	// a sample). The pool's other instruments keep their pool.* names. Those
	// two histograms cost each lease two records: on the OpenTelemetry SDK,
	// a lease and release of an idle item takes about 9 times as long, some
	// 0.4 µs more (docs/DESIGN.md, "Standard names"). Off, the default, it
	// costs nothing. Without MeterProvider it does nothing.
	StandardMetricNames bool

	// OnLeak is called, on a goroutine of its own, for each lease the garbage
	// collector finds dropped without Release, Discard or Detach
	// (LeakReport.Held false) and, with LeakThreshold, each lease held that
	// long (Held true). It must not refer to the pool, or a pool dropped
	// without Close could never be collected. Stats.Leaked and LongLeases, and
	// pool.leases.leaked and .long, count both kinds, OnLeak or not. No report
	// of a long lease starts once Close has begun, and Close waits for those
	// under way. A panic in OnLeak is logged and dropped. nil: count only.
	OnLeak func(LeakReport) `json:"-"`

	// LeakThreshold: a lease held this long is reported once, LeakThreshold to
	// 1.5 × LeakThreshold after it began (plus scheduling delay; below 8 ms,
	// within LeakThreshold + 3 ms): to OnLeak, and to Logger at Warn with its
	// age (and, with TrackLeaseSites, the stack that took it) instead of err;
	// its end is logged at Info with its final age as age. Outstanding then
	// lists the leases with their ages. It costs each lease a clock read, each
	// release a load and a compare, and the background goroutine a read of the
	// leases' starts every LeakThreshold/8, at most once a ms. 0: never.
	LeakThreshold time.Duration

	// TrackLeaseSites records on every lease when and where it was taken (the
	// Lease call's stack, up to 32 frames), for LeakReport and for
	// Outstanding, which then lists the leases. Off, and without
	// LeakThreshold, Outstanding returns nil and leak detection costs nothing
	// per lease. On, every lease walks its caller's stack, making a lease and
	// release many times as costly, and each item is about 300 bytes bigger,
	// with still no allocation per lease: for tests, debugging, hunting leaks.
	TrackLeaseSites bool

	// UpkeepInterval runs the pool's upkeep this often (spread up to ±10 %,
	// from the previous round's start) on the pool's one background goroutine,
	// which Close stops, canceling its checks and creations. A round destroys
	// the idle items past IdleTimeout or their lifetime; with a Preparer and
	// CheckAfterIdle, checks the items idle that long; and creates items until
	// MinSize exist, never past MaxSize or while leases wait, failures logged
	// and retried with backoff up to UpkeepInterval. An item being checked or
	// created counts against MaxSize and is not lent. Close, Clear or
	// SetMaxSize called from a callback the upkeep runs returns at once (a
	// Shutdown there ends only with its ctx); a callback that panics or calls
	// runtime.Goexit leaves the upkeep running. 0: no upkeep.
	UpkeepInterval time.Duration

	// Tracer sees each lease in the caller's goroutine: its start; its
	// outcome, with how long it waited, created and checked; and its end,
	// with how long it was held (see Tracing in the package documentation).
	// nil: no tracing, and nothing on the lease and release fast path.
	Tracer Tracer `json:"-"`

	// Logger receives at Warn, with the pool's name as pool.name and the error
	// as err, the errors no caller gets: a failed Destroy or Reset, wherever
	// it ran; a creation whose lease gave up on it; the background's creations
	// (seeding, Clear's refill, MinIdle's spares, the upkeep's) and the
	// upkeep's checks; and the long leases of LeakThreshold. With
	// FailFastAfter, a Warn when the pool goes down and an Info when it comes
	// back. nil: not logged (still counted in Stats).
	Logger *slog.Logger `json:"-"`
}

// Validate returns the error New would return for o (which wraps
// ErrInvalidOptions and names the field), or nil, without changing o: a
// configuration reload can be checked before any of it is applied.
func (o Options[T]) Validate() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults returns o with the defaults filled in, checked as New checks it.
func (o Options[T]) withDefaults() (Options[T], error) {
	if o.Name == "" {
		o.Name = defaultName[T]()
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	v := reflect.ValueOf(&o).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Interface && isNil(f.Interface()) {
			f.SetZero() // a typed nil in an interface would panic on use
		}
		if d, ok := f.Interface().(time.Duration); ok && d < 0 {
			return o, fmt.Errorf("%w: %s is %v, must not be negative (0 means no limit)", ErrInvalidOptions, v.Type().Field(i).Name, d)
		}
	}
	return o, o.check()
}

// judges: an idle item may have expired or need a check before it is lent.
func (o *Options[T]) judges() bool {
	return o.Preparer != nil || o.IdleTimeout > 0 || o.MaxLifetime > 0
}

// stamps: a release reads the clock, to judge lifetimes and stamp idleAt.
func (o *Options[T]) stamps() bool {
	return o.IdleTimeout > 0 || o.MaxLifetime > 0 || o.Preparer != nil && o.CheckAfterIdle > 0
}

// defaultName is Name's default: *sql.Conn gives "Conn.Pool".
func defaultName[T any]() string {
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer && t.Name() == "" {
		t = t.Elem()
	}
	name := t.Name()
	if name == "" {
		name = t.String() // an unnamed type: []byte, map[string]int, ...
	}
	return qualifier.ReplaceAllString(name, "") + ".Pool"
}

// qualifier matches a package path with its dot ("github.com/x/y." in
// "Box[github.com/x/y.Item]"): a word's run up to its last dot or slash.
var qualifier = regexp.MustCompile(`[^\[\](),* ]*[./]`)

// check refuses a count out of its range, and a field set without another
// it needs.
func (o Options[T]) check() error {
	const none = ", must not be negative (0 means no limit)"
	const hangs = " but CreateTimeout is 0: a creation that never returns "
	const set = `; set CreateTimeout too, to the longest a healthy dial takes (for example "10s")`
	between := fmt.Sprintf(", must be between 0 and MaxSize (%d)", o.MaxSize)
	for _, c := range []struct {
		name string
		v    any
		ok   bool
		must string // what the value must be, or why it cannot be
	}{
		{"MaxSize", o.MaxSize, o.MaxSize >= 1, fmt.Sprintf(", must be at least 1 (0 means %d)", DefaultMaxSize)},
		{"MinSize", o.MinSize, 0 <= o.MinSize && o.MinSize <= o.MaxSize, between},
		{"MinIdle", o.MinIdle, 0 <= o.MinIdle && o.MinIdle <= o.MaxSize, between},
		{"MaxQueuedLeases", o.MaxQueuedLeases, o.MaxQueuedLeases >= 0, none},
		{"MaxConcurrentCreates", o.MaxConcurrentCreates, o.MaxConcurrentCreates >= 0, none},
		{"FailFastAfter", o.FailFastAfter, o.FailFastAfter >= 0, ", must not be negative (0 means never down)"},
		{"MaxUses", o.MaxUses, o.MaxUses >= 0, none},
		{"MaxLifetimeJitter", o.MaxLifetimeJitter, o.MaxLifetimeJitter == 0 || o.MaxLifetime > 0, " but MaxLifetime is 0: there is no lifetime to spread"},
		{"MaxConcurrentCreates", o.MaxConcurrentCreates, o.MaxConcurrentCreates == 0 || o.CreateTimeout > 0,
			hangs + "would keep its turn to create for good, and leases would wait behind it" + set},
		{"FailFastAfter", o.FailFastAfter, o.FailFastAfter == 0 || o.CreateTimeout > 0,
			hangs + "never fails, so a backend that stops answering would never put the pool down" + set},
	} {
		if !c.ok {
			return fmt.Errorf("%w: %s is %v%s", ErrInvalidOptions, c.name, c.v, c.must)
		}
	}
	return nil
}

// configurable: fields tagged json:"-" are set in code only.
func configurable(f reflect.StructField) bool {
	return f.Tag.Get("json") != "-"
}

// wants names the JSON form of each kind of Options field but durations;
// TestOptionsUnmarshalJSONSaysWhatEveryFieldWants fails for a kind left out.
var wants = map[reflect.Kind]string{reflect.String: "a string", reflect.Int: "a whole number", reflect.Bool: "true or false"}

// setField decodes a JSON value other than null into dst, a configurable
// field; a duration as UnmarshalJSON describes.
func setField(dst any, raw json.RawMessage) error {
	d, ok := dst.(*time.Duration)
	if !ok {
		if json.Unmarshal(raw, dst) != nil {
			return fmt.Errorf("want %s, got %s", wants[reflect.TypeOf(dst).Elem().Kind()], shown(raw))
		}
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want %s, got %s", wantDuration, shown(raw))
		}
		if v == 0 && strings.ContainsAny(s, "123456789") {
			return fmt.Errorf("%s rounds to 0, which means no limit; write \"0s\" for that, or a duration of at least 1ns", shown(raw))
		}
		*d = v
		return nil
	}
	num := string(bytes.TrimSpace(raw))
	if _, err := strconv.ParseFloat(num, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("want %s, got %s", wantDuration, shown(raw)) // not a number either
	}
	if mantissa, _, _ := strings.Cut(strings.ToLower(num), "e"); !strings.ContainsAny(mantissa, "123456789") {
		*d = 0 // 0, 0.0, -0, 0e9: no limit, whatever the unit
		return nil
	}
	hint := ""
	if _, err := strconv.ParseUint(num, 10, 64); err == nil {
		hint = fmt.Sprintf(" (\"%ss\" for %s seconds, \"%sms\" for milliseconds)", num, num, num)
	}
	return fmt.Errorf("want a duration string such as \"30s\", got the bare number %s: durations need a unit%s", shown(raw), hint)
}

const wantDuration = `a duration such as "30s" or "1m30s"`

const maxShown = 40

// shown is raw as an error quotes it: trimmed, and cut to maxShown runes.
func shown(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if utf8.RuneCountInString(s) > maxShown {
		s = string([]rune(s)[:maxShown]) + "..."
	}
	return s
}

// UnmarshalJSON decodes o from a JSON object keyed by field name, matched
// case-insensitively as encoding/json does: {"MaxSize": 20, "LeaseTimeout":
// "30s"}. A duration is a Go duration string ("1m30s") within time.Duration's
// range; a bare number but 0 ({"LeaseTimeout": 30} would be 30 ns) and a
// duration that rounds to 0 ("0.1ns") are refused. A key absent or null leaves
// its field as it was, so decoding a shared section and then a per-pool one
// overlays the second on the first; of a repeated key, the later wins.
//
// Decoding is strict: an unknown key, a value of the wrong type, an invalid
// duration, a value other than null for a field tagged json:"-" (set in code
// only, such as Preparer), or a document that is neither an object nor null is
// an error that wraps ErrInvalidOptions and names the first offending key in
// document order; o is then left unchanged. For example:
//
//	pool: invalid options: unknown key "MaxSzie" (did you mean "MaxSize"?)
//	pool: invalid options: LeaseTimeout: want a duration string such as "30s", got the bare number 30: durations need a unit ("30s" for 30 seconds, "30ms" for milliseconds)
func (o *Options[T]) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err) // not JSON
	}
	next := *o
	fields := reflect.ValueOf(&next).Elem()
	dec := json.NewDecoder(bytes.NewReader(data))
	switch tok, _ := dec.Token(); tok {
	case nil:
		return nil // null: nothing to change
	case json.Delim('{'):
	default:
		return fmt.Errorf("%w: want a JSON object such as {\"MaxSize\": 20}, got %s", ErrInvalidOptions, shown(data))
	}
	for dec.More() {
		// Valid JSON, checked above: Token gives a key, Decode its value.
		key, _ := dec.Token()
		var raw json.RawMessage
		_ = dec.Decode(&raw)
		if err := setKey(fields, key.(string), raw); err != nil {
			return err
		}
	}
	*o = next
	return nil
}

// setKey decodes raw into the field of fields (an Options) that key names.
// No two Options fields differ only in case, so the match is encoding/json's.
func setKey(fields reflect.Value, key string, raw json.RawMessage) error {
	f, ok := fields.Type().FieldByNameFunc(func(name string) bool { return strings.EqualFold(name, key) })
	switch {
	case !ok:
		if near := nearestKey(fields.Type(), key); near != "" {
			return fmt.Errorf("%w: unknown key %q (did you mean %q?)", ErrInvalidOptions, key, near)
		}
		return fmt.Errorf("%w: unknown key %q", ErrInvalidOptions, key)
	case string(bytes.TrimSpace(raw)) == "null":
		return nil
	case !configurable(f):
		return fmt.Errorf("%w: %s can only be set in code, not from configuration", ErrInvalidOptions, f.Name)
	}
	if err := setField(fields.FieldByIndex(f.Index).Addr().Interface(), raw); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, f.Name, err)
	}
	return nil
}

// nearestKey is t's configurable field nearest key, within two edits, or "".
func nearestKey(t reflect.Type, key string) string {
	best, bestDist := "", 3
	for i := range t.NumField() {
		f := t.Field(i)
		if d := editDistance(key, f.Name, bestDist); d < bestDist && configurable(f) {
			best, bestDist = f.Name, d
		}
	}
	return best
}

// editDistance is the case-insensitive optimal string alignment distance
// ("MaxSzie" is one edit from "MaxSize"), capped at limit.
func editDistance(a, b string, limit int) int {
	s, t := []rune(strings.ToLower(a)), []rune(strings.ToLower(b))
	// d[i][j] is the distance between s[:i] and t[:j].
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return min(d[len(s)][len(t)], limit)
}

// MarshalJSON encodes the configurable fields of o in declaration order, in
// the form UnmarshalJSON reads; an empty Name is left out.
func (o Options[T]) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		f, value := v.Type().Field(i), v.Field(i).Interface()
		if !configurable(f) || f.Name == "Name" && o.Name == "" {
			continue
		}
		if d, ok := value.(time.Duration); ok {
			value = d.String()
		}
		js, err := json.Marshal(value)
		if err != nil {
			return nil, err
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%q:%s", f.Name, js)
	}
	return append(b, '}'), nil
}
