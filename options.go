package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
)

// Options: defaults, validation, and decoding from configuration.
//
// The invariant: the Options struct is the one list of the configurable
// fields, those not tagged json:"-"; the JSON keys, the encoder and the
// duration checks read it by reflection, and a key that names no field, or a
// value of the wrong form, is an error that names the key, never a silent
// zero.

// DefaultMaxSize is the MaxSize a pool gets when Options.MaxSize is 0.
const DefaultMaxSize = 100

// Options configures a Pool. The zero value is valid: a pool of at most
// DefaultMaxSize items, created on demand, that waits for an item until the
// caller's ctx ends and never expires an item.
//
// Options decodes from JSON (see UnmarshalJSON), so a pool can be configured
// from a file; the function- and interface-valued fields are set in code.
type Options[T any] struct {
	// Name identifies the pool in Stats and errors. Default: T's type name
	// without package path or pointer stars, plus ".Pool" ("*sql.Conn" gives
	// "Conn.Pool").
	Name string

	// MinSize items are created by New, concurrently (or in the background,
	// with SeedInBackground), and Clear refills the idle items to it, in the
	// background. With UpkeepInterval set it is also a floor kept over time:
	// the upkeep creates items until MinSize exist, and idle expiry never
	// takes the pool below it. Default 0: every item is created on demand.
	MinSize int

	// SeedInBackground makes New return without waiting for the MinSize
	// items: they are created in the background, several at once, and a
	// failed creation is logged and retried, backing off up to
	// UpkeepInterval (30 s without the upkeep), until MinSize items exist or
	// the pool closes. Leases meanwhile work as usual. A service so starts
	// while its backend is down and keeps a warm floor once it is up. Off,
	// New creates the MinSize items itself and fails with the first failed
	// creation.
	SeedInBackground bool

	// MaxSize is the hard cap on items in existence: leased, idle, being
	// created or being destroyed. Default DefaultMaxSize.
	MaxSize int

	// MinIdle items are kept idle, spare, for the leases to come: when a lease
	// may have left fewer idle (one that did not reuse the item its own
	// goroutine's processor released last), at New, and with UpkeepInterval in
	// every round, the pool creates items in the background until MinIdle are idle
	// or MaxSize exist, never while leases wait (they create their own). A failed
	// creation is logged, counted in Stats.CreateErrors and retried with
	// SeedInBackground's backoff, until Close. So a busy pool has a spare ready
	// where MinSize, a floor on all the items, would leave the next lease to
	// create one in the caller. A pool dropped without Close stops making
	// spares once it is collected. Between 0 and MaxSize. Default 0: none.
	MinIdle int

	// MaxQueuedLeases caps the leases that wait for an item: a Lease that
	// would wait behind MaxQueuedLeases others fails at once with
	// ErrExhausted, whose message names the cap, and is counted in
	// Stats.Refused; a service under overload so fails fast rather than
	// piling up goroutines. A lease whose item failed its check waits
	// again ahead of the others, past the cap, so up to one such lease for
	// each item may wait beyond it.
	// SetMaxSize leaves it as it is. At least 0.
	// Default 0: no cap.
	MaxQueuedLeases int

	// LeaseTimeout bounds the wait for an item when all MaxSize are in use;
	// it elapses as ErrLeaseTimeout. It counts from the Lease call and
	// bounds all the lease's waits together, with its checks of items that
	// failed: a lease that waits again gets only what is left. A check or
	// creation under way when it elapses is bounded by PreparationTimeout
	// and CreateTimeout instead. 0: wait until the caller's ctx ends.
	LeaseTimeout time.Duration

	// PreparationTimeout bounds IsReady plus Prepare on one item; it elapses
	// as ErrPreparationTimeout. 0: until the caller's ctx ends.
	PreparationTimeout time.Duration

	// CreateTimeout bounds one Factory.Create call, also one that finishes
	// in the background after its caller gave up. 0: until Close.
	CreateTimeout time.Duration

	// IdleTimeout: an item idle longer than this is destroyed. Without
	// UpkeepInterval, eviction is lazy but reaches every idle item: a lease
	// or release that comes at least half an IdleTimeout after the last
	// such sweep destroys every idle item past its time. 0: never.
	IdleTimeout time.Duration

	// MaxLifetime: an item older than this (counted from the end of its
	// creation) is destroyed on release, or while idle as IdleTimeout
	// describes. 0, or a lifetime too long for the clock to reach
	// (math.MaxInt64): never.
	MaxLifetime time.Duration

	// MaxLifetimeJitter spreads lifetimes: each item lives MaxLifetime plus
	// a random duration in [0, MaxLifetimeJitter), drawn at its creation, so
	// that items created together are not all destroyed, and recreated, in
	// the same instant. 0: none. Requires MaxLifetime.
	MaxLifetimeJitter time.Duration

	// Preparer checks and restores items on lease. nil: every item is ready.
	// A CheckFunc is a Preparer that only checks.
	Preparer Preparer[T] `json:"-"`

	// CheckAfterIdle: the Preparer sees an idle item only when it sat idle
	// at least this long; fresh items are always checked. 0: every lease.
	CheckAfterIdle time.Duration

	// Reset runs on Release, before the item is reused; an error (or a
	// panic) destroys the item instead. nil: items are reused as they are.
	Reset func(item T) error `json:"-"`

	// Destroy disposes of an item the pool lets go of, on a goroutine of
	// the pool's own: Release, Discard, Lease, Clear and SetMaxSize never
	// wait for it, and the item counts against MaxSize until it returns
	// (or DestroyTimeout passes). The item counts as destroyed however
	// Destroy ends; an error or panic is logged and counted in
	// Stats.DestroyErrors (Close returns those of the idle items it
	// destroys). nil: Close() when the item is an io.Closer, nothing
	// otherwise.
	Destroy func(item T) error `json:"-"`

	// DestroyTimeout bounds how long the pool waits for one Destroy: past
	// it, the item counts as destroyed (in Stats.Destroyed and
	// DestroyErrors, with a Warn through Logger), its place under MaxSize
	// is free again, and the call is left to finish on its own. A peer
	// that has gone silent, and makes a close block, so takes one place
	// under MaxSize for at most DestroyTimeout. 0: the pool waits as long as Destroy takes, and
	// a Destroy that never returns holds its place for good.
	DestroyTimeout time.Duration

	// MeterProvider receives the pool's OpenTelemetry instruments (see
	// Metrics in the package documentation), under the instrumentation scope
	// "github.com/msl-armory/pool" and the attribute pool.name. nil (or a
	// no-op provider): nothing is registered and nothing recorded. A lease
	// and release of an idle item records nothing either way: the gauges
	// are observed when the provider collects.
	MeterProvider metric.MeterProvider `json:"-"`

	// OnLeak is called, on a goroutine of its own, for every leaked lease
	// the garbage collector finds: one that became unreachable without
	// Release, Discard or Detach (LeakReport.Held false); and, with
	// LeakThreshold, once for every lease still held that long after it
	// began (Held true). It must not refer to the pool, or a pool dropped
	// without Close could never be collected. Leaks are counted in
	// Stats.Leaked (and pool.leases.leaked), long leases in
	// Stats.LongLeases (and pool.leases.long), whether OnLeak is set or
	// not. A report of a long lease is part of the pool's background work:
	// none starts once Close has begun, and Close waits for those under
	// way; a panic in it is logged and dropped. nil: count only.
	OnLeak func(LeakReport) `json:"-"`

	// LeakThreshold: a lease still held this long after it began is
	// reported once as a possible leak, between LeakThreshold and 1.5 ×
	// LeakThreshold after it began (plus scheduling delay; below 8 ms,
	// within LeakThreshold + 3 ms): OnLeak with LeakReport.Held, a Warn
	// through Logger with its age (and, with TrackLeaseSites, the stack
	// that took it), Stats.LongLeases and pool.leases.long. When such a
	// lease ends, Logger says so at Info, with its final age. It also gives
	// Outstanding its ages; without TrackLeaseSites an age counts from the
	// first scan that saw the lease out, up to LeakThreshold/8 short. The
	// pool watches on a goroutine of its own, from New to Close, that scans
	// the items every LeakThreshold/8 (at most once a millisecond); a lease
	// pays nothing for it, a release a load and a compare. 0: never.
	LeakThreshold time.Duration

	// TrackLeaseSites records, on every lease, when and where (the stack of
	// the Lease call, up to 32 frames) it was taken, so that a LeakReport
	// and Outstanding can say. Off, leak detection costs nothing per lease.
	// On, every lease takes the slow path and walks its caller's stack,
	// which costs a lease and release many times as much, and each item
	// about 300 bytes; still no allocation per lease (docs/DESIGN.md, "What
	// TrackLeaseSites costs", has the figures). For tests, debugging, or a
	// service hunting a leak.
	TrackLeaseSites bool

	// UpkeepInterval runs the pool's upkeep this often (spread by up to
	// ±10 %, so that many pools do not tick in step; measured from the start
	// of the previous round), on one goroutine that Close stops, canceling
	// the upkeep's checks and creations. A round destroys the idle items
	// past IdleTimeout or their lifetime; with a Preparer and
	// CheckAfterIdle, checks the idle items
	// that sat idle that long, so a dead connection is found before a lease
	// meets it; and creates items until MinSize exist, never past MaxSize
	// and never while leases wait (failures are logged and retried sooner,
	// backing off up to UpkeepInterval). An item being checked or created
	// counts against MaxSize and is never lent meanwhile. Close, Clear or
	// SetMaxSize called from a callback the upkeep runs returns at once (a
	// Shutdown there ends only with its ctx), and a callback that panics or
	// calls runtime.Goexit leaves the upkeep running. 0: no upkeep.
	UpkeepInterval time.Duration

	// Tracer sees each lease in the caller's goroutine: its start, its
	// outcome with how long it waited, created and checked, and its end
	// with how long it was held (see Tracing in the package
	// documentation). nil: no tracing, and nothing on the lease and release
	// fast path.
	Tracer Tracer `json:"-"`

	// Logger receives, at Warn, the errors that have no caller to return
	// to: a Destroy or Reset that fails on Release or Discard, on expiry or
	// in the background; a creation whose lease gave up on it; the
	// background's creations (the seeding, Clear's refill, MinIdle's
	// spares, the upkeep's) and the upkeep's checks. Each record carries
	// the pool's name as pool.name and the error as err. With LeakThreshold it also receives, at Warn, each
	// lease held past it (with age and, with TrackLeaseSites, stack instead
	// of err), and at Info the end of such a lease (with age, its final
	// age). nil: not logged (they are still counted in Stats).
	Logger *slog.Logger `json:"-"`
}

// Validate reports whether New would accept o: it runs exactly the checks
// New runs on its options, after filling in the defaults, and returns the
// error New would, which wraps ErrInvalidOptions and names the field; nil
// when o is valid. A configuration reload can so be checked before any of
// it is applied (with SetMaxSize, say). Validate does not change o.
func (o Options[T]) Validate() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults returns o with the defaults filled in and checks the result:
// Validate's checks, and the ones New applies.
func (o Options[T]) withDefaults() (Options[T], error) {
	if o.Name == "" {
		o.Name = defaultName[T]()
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	// A typed nil in an interface is no value: a nil *sdkmetric.MeterProvider
	// would panic inside the SDK, a nil Preparer on every lease.
	if isNil(o.MeterProvider) {
		o.MeterProvider = nil
	}
	if isNil(o.Preparer) {
		o.Preparer = nil
	}
	if isNil(o.Tracer) {
		o.Tracer = nil
	}
	if err := o.checkCounts(); err != nil {
		return o, err
	}
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		if d, ok := v.Field(i).Interface().(time.Duration); ok && d < 0 {
			return o, fmt.Errorf("%w: %s is %v, must not be negative (0 means no limit)", ErrInvalidOptions, v.Type().Field(i).Name, d)
		}
	}
	if o.MaxLifetimeJitter > 0 && o.MaxLifetime == 0 {
		return o, fmt.Errorf("%w: MaxLifetimeJitter is %v but MaxLifetime is 0: there is no lifetime to spread", ErrInvalidOptions, o.MaxLifetimeJitter)
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

// checkCounts checks the fields that count items and leases.
func (o Options[T]) checkCounts() error {
	if o.MaxSize < 1 {
		return fmt.Errorf("%w: MaxSize is %d, must be at least 1 (0 means %d)", ErrInvalidOptions, o.MaxSize, DefaultMaxSize)
	}
	if o.MinSize < 0 || o.MinSize > o.MaxSize {
		return fmt.Errorf("%w: MinSize is %d, must be between 0 and MaxSize (%d)", ErrInvalidOptions, o.MinSize, o.MaxSize)
	}
	if o.MinIdle < 0 || o.MinIdle > o.MaxSize {
		return fmt.Errorf("%w: MinIdle is %d, must be between 0 and MaxSize (%d)", ErrInvalidOptions, o.MinIdle, o.MaxSize)
	}
	if o.MaxQueuedLeases < 0 {
		return fmt.Errorf("%w: MaxQueuedLeases is %d, must not be negative (0 means no limit)", ErrInvalidOptions, o.MaxQueuedLeases)
	}
	return nil
}

// configurable reports whether a configuration may set the Options field
// f: every field but those tagged json:"-", which are set in code only.
func configurable(f reflect.StructField) bool {
	return f.Tag.Get("json") != "-"
}

// wants says what a config file must hold for a field of each kind that
// Options has (TestOptionsUnmarshalJSONSaysWhatEveryFieldWants fails for a
// kind left out); durations are set by setDuration instead.
var wants = map[reflect.Kind]string{reflect.String: "a string", reflect.Int: "a whole number", reflect.Bool: "true or false"}

// setField decodes a JSON value other than null into the configurable
// field f (of an Options that is thrown away should it fail).
func setField(f reflect.Value, raw json.RawMessage) error {
	if d, ok := f.Addr().Interface().(*time.Duration); ok {
		return setDuration(d, raw)
	}
	if json.Unmarshal(raw, f.Addr().Interface()) != nil {
		return wantGot(wants[f.Kind()], raw)
	}
	return nil
}

// setDuration decodes a duration: a Go duration string ("1m30s"), within
// the range of time.Duration. A bare number is refused, 0 aside: read as
// nanoseconds, {"LeaseTimeout": 30} would make every wait time out at once,
// where its writer meant 30 seconds. So is a duration so small that it
// rounds to 0 ("0.1ns"): 0 means no limit, which it did not say.
func setDuration(dst *time.Duration, raw json.RawMessage) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return wantGot(wantDuration, raw)
		}
		if d == 0 && strings.ContainsAny(s, "123456789") {
			return fmt.Errorf("%s rounds to 0, which means no limit; write \"0s\" for that, or a duration of at least 1ns", shown(raw))
		}
		*dst = d
		return nil
	}
	num := string(bytes.TrimSpace(raw))
	if _, err := strconv.ParseFloat(num, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
		return wantGot(wantDuration, raw) // not a number either
	}
	if mantissa, _, _ := strings.Cut(strings.ToLower(num), "e"); !strings.ContainsAny(mantissa, "123456789") {
		*dst = 0 // 0, 0.0, -0, 0e9: no limit, whatever the unit
		return nil
	}
	hint := ""
	if _, err := strconv.ParseUint(num, 10, 64); err == nil {
		hint = fmt.Sprintf(" (\"%ss\" for %s seconds, \"%sms\" for milliseconds)", num, num, num)
	}
	return fmt.Errorf("want a duration string such as \"30s\", got the bare number %s: durations need a unit%s", shown(raw), hint)
}

const wantDuration = `a duration such as "30s" or "1m30s"`

// maxShown bounds how much of a bad value an error quotes.
const maxShown = 40

// wantGot is the error for a value of the wrong form: what was wanted, and
// the value as it was written, cut short when long.
func wantGot(want string, raw []byte) error {
	return fmt.Errorf("want %s, got %s", want, shown(raw))
}

// shown is raw as an error quotes it: trimmed, and cut to maxShown runes.
func shown(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if utf8.RuneCountInString(s) > maxShown {
		s = string([]rune(s)[:maxShown]) + "..."
	}
	return s
}

// UnmarshalJSON decodes o from a JSON object keyed by the field names,
// matched without regard to case as encoding/json matches them:
// {"MaxSize": 20, "LeaseTimeout": "30s"}. A duration is a Go duration
// string ("30s", "1m30s", "250ms"), within the range of time.Duration
// ("2562047h47m16.854775807s" at most); a bare number is refused, but for
// 0, since {"LeaseTimeout": 30} would mean 30 ns, not the 30 s its writer
// meant, and so is a duration that rounds to 0 ("0.1ns"). A key that is
// absent or null
// leaves its field as it was, so decoding a shared section and then a
// per-pool section into the same value overlays the second on the first.
// When a key appears twice, the later one wins, as with encoding/json.
//
// Decoding is strict, so that a typo in a config file does not pass
// silently: a key that names no field, a value of the wrong type, an
// invalid duration, or a document that is neither an object nor null is an
// error that wraps ErrInvalidOptions and names the key, such as
//
//	pool: invalid options: unknown key "MaxSzie" (did you mean "MaxSize"?)
//	pool: invalid options: MaxSize: want a whole number, got "20"
//	pool: invalid options: LeaseTimeout: want a duration string such as "30s", got the bare number 30: durations need a unit ("30s" for 30 seconds, "30ms" for milliseconds)
//
// The fields tagged json:"-" (function- and interface-valued, such as
// Preparer and Destroy) are set in code only: a key naming one is an error
// that says so, unless its value is null, which leaves the field as it is,
// as for any other field. On error o is left unchanged; the first offending
// key, in document order, is reported.
func (o *Options[T]) UnmarshalJSON(data []byte) error {
	next := *o
	fields := reflect.ValueOf(&next).Elem()
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	switch tok {
	case nil: // null: nothing to change
	case json.Delim('{'):
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
			}
			key, _ := tok.(string) // inside an object, a key
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, key, err)
			}
			if err := setKey(fields, key, raw); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing brace
			return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	default:
		return fmt.Errorf("%w: want a JSON object such as {\"MaxSize\": 20}, got %s", ErrInvalidOptions, shown(data))
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: more data after the options", ErrInvalidOptions)
	}
	*o = next
	return nil
}

// setKey decodes one key's value into the field of fields (an Options) it
// names. No two fields of Options differ only in case, so matching without
// regard to case finds at most one, the one encoding/json would.
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
	if err := setField(fields.FieldByIndex(f.Index), raw); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, f.Name, err)
	}
	return nil
}

// nearestKey returns the configurable field of the struct type t closest to
// an unknown key, when it is a likely typo of it (at most two edits away),
// or "".
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

// editDistance is the optimal string alignment distance between a and b,
// ignoring case: the fewest insertions, deletions, substitutions and swaps
// of adjacent letters that turn one into the other, so that "MaxSzie" is
// one edit from "MaxSize". Distances of limit or more are reported as
// limit.
func editDistance(a, b string, limit int) int {
	s, t := []rune(strings.ToLower(a)), []rune(strings.ToLower(b))
	if n := len(s) - len(t); n >= limit || -n >= limit {
		return limit
	}
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

// MarshalJSON encodes the configurable fields of o, in the order Options
// declares them, durations as Go duration strings, in the form
// UnmarshalJSON reads. An empty Name is left out.
func (o Options[T]) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
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
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", f.Name)
		b.Write(js)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
