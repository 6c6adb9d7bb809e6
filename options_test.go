package pool

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// optBox is a generic item type, for the default names of instantiated types.
type optBox[V any] struct{ _ V }

// optItem is a named type of this package, as a type argument: its
// qualified name carries the module path, slashes, dots and a hyphen.
type optItem struct{}

// optPreparer is a Preparer set in code, to check that decoding keeps it.
type optPreparer struct{ calls int }

func (p *optPreparer) IsReady(context.Context, *conn) (bool, error) { p.calls++; return true, nil }

func (p *optPreparer) Prepare(context.Context, *conn) error { return nil }

func TestNewRejectsInvalidOptions(t *testing.T) {
	tr := &tracker{}
	cases := []struct {
		name    string
		factory Factory[*conn]
		opts    Options[*conn]
		want    []string // substrings of the message: the field, and the value where there is one
	}{
		{"negative MaxSize", tr, Options[*conn]{MaxSize: -1}, []string{"MaxSize", "-1"}},
		{"negative MinSize", tr, Options[*conn]{MinSize: -1, MaxSize: 5}, []string{"MinSize", "-1"}},
		{"MinSize above MaxSize", tr, Options[*conn]{MinSize: 6, MaxSize: 5}, []string{"MinSize", "6", "5"}},
		{"MinSize above the default MaxSize", tr, Options[*conn]{MinSize: DefaultMaxSize + 1}, []string{"MinSize", "101"}},
		{"negative LeaseTimeout", tr, Options[*conn]{MinSize: 1, LeaseTimeout: -time.Second}, []string{"LeaseTimeout", "-1s"}},
		{"negative PreparationTimeout", tr, Options[*conn]{MinSize: 1, PreparationTimeout: -time.Second}, []string{"PreparationTimeout", "-1s"}},
		{"negative CreateTimeout", tr, Options[*conn]{MinSize: 1, CreateTimeout: -time.Second}, []string{"CreateTimeout", "-1s"}},
		{"negative IdleTimeout", tr, Options[*conn]{MinSize: 1, IdleTimeout: -time.Second}, []string{"IdleTimeout", "-1s"}},
		{"negative MaxLifetime", tr, Options[*conn]{MinSize: 1, MaxLifetime: -time.Second}, []string{"MaxLifetime", "-1s"}},
		{"negative CheckAfterIdle", tr, Options[*conn]{MinSize: 1, CheckAfterIdle: -1}, []string{"CheckAfterIdle", "-1ns"}},
		{"negative DestroyTimeout", tr, Options[*conn]{DestroyTimeout: -time.Second}, []string{"DestroyTimeout", "-1s"}},
		{"negative MinIdle", tr, Options[*conn]{MinIdle: -1, MaxSize: 5}, []string{"MinIdle", "-1"}},
		{"MinIdle above MaxSize", tr, Options[*conn]{MinIdle: 6, MaxSize: 5}, []string{"MinIdle", "6", "5"}},
		{"negative MaxQueuedLeases", tr, Options[*conn]{MaxQueuedLeases: -1}, []string{"MaxQueuedLeases", "-1"}},
		{"nil Factory", nil, Options[*conn]{}, []string{"factory"}},
		{"nil FactoryFunc", FactoryFunc[*conn](nil), Options[*conn]{}, []string{"factory"}},
		{"typed nil pointer Factory", (*tracker)(nil), Options[*conn]{}, []string{"factory"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(context.Background(), tc.factory, tc.opts)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.ErrorIs(t, err, ErrInvalidOptions)
			for _, s := range tc.want {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
	// Validation comes before seeding: no case created an item.
	assert.Zero(t, tr.created.Load(), "items created by a New that refused its options")
	assert.Zero(t, tr.live.Load())
}

func TestMaxLifetimeJitterNeedsMaxLifetime(t *testing.T) {
	_, err := New(context.Background(), &tracker{}, Options[*conn]{MaxLifetimeJitter: time.Second})
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.ErrorContains(t, err, "MaxLifetimeJitter")
}

func TestNewAcceptsValidOptions(t *testing.T) {
	cases := []struct {
		name             string
		opts             Options[*conn]
		wantMin, wantMax int
	}{
		{"zero Options", Options[*conn]{}, 0, DefaultMaxSize},
		{"MaxSize 1", Options[*conn]{MaxSize: 1}, 0, 1},
		{"MinSize equal to MaxSize", Options[*conn]{MinSize: 3, MaxSize: 3}, 3, 3},
		{"MinSize equal to the default MaxSize", Options[*conn]{MinSize: DefaultMaxSize}, DefaultMaxSize, DefaultMaxSize},
		{"every duration set", Options[*conn]{
			LeaseTimeout: time.Second, PreparationTimeout: time.Second, CreateTimeout: time.Second,
			IdleTimeout: time.Minute, MaxLifetime: time.Hour, CheckAfterIdle: time.Second,
		}, 0, DefaultMaxSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, tr := newTracked(t, tc.opts)
			st := p.Stats()
			assert.Equal(t, tc.wantMin, st.MinSize)
			assert.Equal(t, tc.wantMax, st.MaxSize)
			assert.Equal(t, "conn.Pool", st.Name)
			assert.Equal(t, int64(tc.wantMin), tr.live.Load())
			require.NoError(t, p.Close())
			assert.Zero(t, tr.live.Load())
		})
	}
}

// noopPreparer is a Preparer whose typed nil a caller may pass.
type noopPreparer struct{}

func (*noopPreparer) IsReady(context.Context, *conn) (bool, error) { return true, nil }

func (*noopPreparer) Prepare(context.Context, *conn) error { return nil }

func TestTypedNilOptionsAreTreatedAsNil(t *testing.T) {
	var mp *sdkmetric.MeterProvider
	var prep *noopPreparer
	p, _ := newTracked(t, Options[*conn]{MeterProvider: mp, Preparer: prep})
	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	l.Release()
	assert.Nil(t, p.ob.m, "no metrics from a nil MeterProvider")
	assert.Nil(t, p.opts.Preparer)
}

func TestDefaultName(t *testing.T) {
	cases := []struct {
		name string
		got  func() string
		want string
	}{
		{"pointer to a named type", defaultName[*bytes.Buffer], "Buffer.Pool"},
		{"Options.Name's example *sql.Conn", defaultName[*sql.Conn], "Conn.Pool"},
		{"pointer to a pointer", defaultName[**bytes.Buffer], "Buffer.Pool"},
		{"named type of this package", defaultName[*conn], "conn.Pool"},
		{"predeclared type", defaultName[int], "int.Pool"},
		{"named non-struct type", defaultName[time.Duration], "Duration.Pool"},
		{"interface type", defaultName[io.Reader], "Reader.Pool"},
		{"generic type", defaultName[optBox[int]], "optBox[int].Pool"},
		// Leading stars go; a star inside a type argument is part of the
		// type (optBox[*Buffer] and optBox[Buffer] differ), so it stays,
		// while the argument's package path goes.
		{"pointer to a generic type over another package's pointer", defaultName[*optBox[*bytes.Buffer]], "optBox[*Buffer].Pool"},
		{"generic type over a type of this module", defaultName[optBox[optItem]], "optBox[optItem].Pool"},
		{"nested generic types", defaultName[optBox[map[string]*optBox[*sql.Conn]]], "optBox[map[string]*optBox[*Conn]].Pool"},
		{"unnamed type", defaultName[[]*bytes.Buffer], "[]*Buffer.Pool"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.got())
		})
	}
}

func TestNewName(t *testing.T) {
	cases := []struct {
		name string
		opts Options[*conn]
		want string
	}{
		{"default", Options[*conn]{}, "conn.Pool"},
		{"explicit Name is kept", Options[*conn]{Name: "orders-db"}, "orders-db"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTracked(t, tc.opts)
			assert.Equal(t, tc.want, p.Name())
			assert.Equal(t, tc.want, p.Stats().Name)
		})
	}
}

func TestNameAppearsInErrorsAndStats(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	assert.Equal(t, "conn.Pool", p.Name())
	assert.Equal(t, "conn.Pool", p.Stats().Name)
	l, err := p.Lease(bg)
	require.NoError(t, err)
	_, err = p.TryLease(bg)
	assert.True(t, strings.Contains(err.Error(), "conn.Pool"), err.Error())
	l.Release()
}

// optConfigurable is the configurable part of Options, comparable with ==.
type optConfigurable struct {
	Name                                            string
	MinSize, MaxSize                                int
	LeaseTimeout, PreparationTimeout, CreateTimeout time.Duration
	IdleTimeout, MaxLifetime, CheckAfterIdle        time.Duration
	TrackLeaseSites                                 bool
}

func optConfig(o Options[*conn]) optConfigurable {
	return optConfigurable{
		o.Name, o.MinSize, o.MaxSize,
		o.LeaseTimeout, o.PreparationTimeout, o.CreateTimeout,
		o.IdleTimeout, o.MaxLifetime, o.CheckAfterIdle,
		o.TrackLeaseSites,
	}
}

// optFull has every configurable field set to a distinct value.
var optFull = Options[*conn]{
	Name: "full", MinSize: 2, MaxSize: 9,
	LeaseTimeout: 1 * time.Second, PreparationTimeout: 2 * time.Second, CreateTimeout: 3 * time.Second,
	IdleTimeout: 4 * time.Minute, MaxLifetime: 5 * time.Hour, CheckAfterIdle: 6 * time.Millisecond,
	TrackLeaseSites: true,
}

func TestOptionsUnmarshalJSON(t *testing.T) {
	cases := []struct {
		name  string
		start Options[*conn]
		in    string
		want  func(*Options[*conn])
	}{
		{"Options.UnmarshalJSON's example", Options[*conn]{}, `{"MaxSize": 20, "LeaseTimeout": "30s"}`, func(o *Options[*conn]) {
			o.MaxSize, o.LeaseTimeout = 20, 30*time.Second
		}},
		{"every field, durations as strings", Options[*conn]{}, `{"Name": "p", "MinSize": 1, "MaxSize": 2,
			"LeaseTimeout": "1s", "PreparationTimeout": "1.5s", "CreateTimeout": "2m",
			"IdleTimeout": "1h30m", "MaxLifetime": "24h", "CheckAfterIdle": "250ms", "TrackLeaseSites": true}`, func(o *Options[*conn]) {
			o.Name, o.MinSize, o.MaxSize, o.TrackLeaseSites = "p", 1, 2, true
			o.LeaseTimeout, o.PreparationTimeout, o.CreateTimeout = time.Second, 1500*time.Millisecond, 2*time.Minute
			o.IdleTimeout, o.MaxLifetime, o.CheckAfterIdle = 90*time.Minute, 24*time.Hour, 250*time.Millisecond
		}},
		{"a bare 0 means no limit, in any form", optFull, `{"LeaseTimeout": 0, "PreparationTimeout": 0.0,
			"CreateTimeout": -0, "IdleTimeout": 0e9, "MaxLifetime": "0s", "CheckAfterIdle": "0"}`, func(o *Options[*conn]) {
			o.LeaseTimeout, o.PreparationTimeout, o.CreateTimeout = 0, 0, 0
			o.IdleTimeout, o.MaxLifetime, o.CheckAfterIdle = 0, 0, 0
		}},
		{"the longest duration there is", Options[*conn]{}, `{"MaxLifetime": "2562047h47m16.854775807s"}`, func(o *Options[*conn]) {
			o.MaxLifetime = math.MaxInt64
		}},
		{"keys without regard to case", Options[*conn]{}, `{"maxsize": 7, "MINSIZE": 1, "leaseTimeout": "2s", "name": "lower"}`, func(o *Options[*conn]) {
			o.MaxSize, o.MinSize, o.LeaseTimeout, o.Name = 7, 1, 2*time.Second, "lower"
		}},
		{"null leaves every field as it was", optFull, `{"Name": null, "MinSize": null, "MaxSize": null,
			"LeaseTimeout": null, "PreparationTimeout": null, "CreateTimeout": null,
			"IdleTimeout": null, "MaxLifetime": null, "CheckAfterIdle": null, "TrackLeaseSites": null}`, func(*Options[*conn]) {}},
		{"absent keys leave their fields as they were", optFull, `{"MinSize": 3}`, func(o *Options[*conn]) { o.MinSize = 3 }},
		{"empty object changes nothing", optFull, `{}`, func(*Options[*conn]) {}},
		{"null document changes nothing", optFull, `null`, func(*Options[*conn]) {}},
		{"explicit zero overrides", optFull, `{"LeaseTimeout": 0, "IdleTimeout": "0s", "MinSize": 0, "Name": "", "TrackLeaseSites": false}`, func(o *Options[*conn]) {
			o.LeaseTimeout, o.IdleTimeout, o.MinSize, o.Name, o.TrackLeaseSites = 0, 0, 0, "", false
		}},
		{"negative duration decodes (New refuses it)", Options[*conn]{}, `{"IdleTimeout": "-1m"}`, func(o *Options[*conn]) { o.IdleTimeout = -time.Minute }},
		{"null for a code-only key leaves its field", optFull, `{"Preparer": null, "Reset": null, "Destroy": null,
			"MeterProvider": null, "OnLeak": null}`, func(*Options[*conn]) {}},
		{"a repeated key: the later wins, whatever its case", optFull, `{"MaxSize": 3, "maxsize": 4, "MAXSIZE": 5}`, func(o *Options[*conn]) {
			o.MaxSize = 5
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.start
			require.NoError(t, json.Unmarshal([]byte(tc.in), &got))
			want := tc.start
			tc.want(&want)
			assert.Equal(t, optConfig(want), optConfig(got))
		})
	}
}

func TestOptionsUnmarshalJSONNegativeDurationRefusedByNew(t *testing.T) {
	var o Options[*conn]
	require.NoError(t, json.Unmarshal([]byte(`{"IdleTimeout": "-1m"}`), &o))
	_, err := New[*conn](context.Background(), &tracker{}, o)
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.ErrorContains(t, err, "IdleTimeout")
}

func TestOptionsUnmarshalJSONOverlaysSections(t *testing.T) {
	var o Options[*conn]
	require.NoError(t, json.Unmarshal([]byte(`{"MaxSize": 10, "LeaseTimeout": "5s", "IdleTimeout": "1m"}`), &o))
	require.NoError(t, json.Unmarshal([]byte(`{"Name": "ReadPool", "MaxSize": 20}`), &o))
	assert.Equal(t, optConfigurable{
		Name:         "ReadPool",
		MaxSize:      20,              // the pool's own
		LeaseTimeout: 5 * time.Second, // inherited
		IdleTimeout:  time.Minute,     // inherited
	}, optConfig(o))
}

func TestOptionsUnmarshalJSONKeepsCodeFields(t *testing.T) {
	prep := &optPreparer{}
	var resets, destroys int
	o := Options[*conn]{
		Preparer: prep,
		Reset:    func(*conn) error { resets++; return nil },
		Destroy:  func(*conn) error { destroys++; return nil },
	}
	require.NoError(t, json.Unmarshal([]byte(`{"MaxSize": 3, "Preparer": null, "Reset": null, "Destroy": null}`), &o))
	assert.Equal(t, 3, o.MaxSize)
	assert.Same(t, prep, o.Preparer)
	require.NotNil(t, o.Reset)
	require.NotNil(t, o.Destroy)
	require.NoError(t, o.Reset(nil))
	require.NoError(t, o.Destroy(nil))
	assert.Equal(t, 1, resets)
	assert.Equal(t, 1, destroys)
}

// optBadCase is a JSON document UnmarshalJSON must refuse, and the exact
// message it must refuse it with.
type optBadCase struct {
	name string
	in   string
	msg  string
}

// checkRefused decodes each case into a copy of optFull, with a Preparer
// set in code, and asserts the refusal: ErrInvalidOptions, the message
// (which names the key), and nothing changed.
func checkRefused(t *testing.T, cases []optBadCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prep := &optPreparer{}
			o := optFull
			o.Preparer = prep
			err := json.Unmarshal([]byte(tc.in), &o)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidOptions)
			assert.EqualError(t, err, tc.msg)
			assert.Equal(t, optConfig(optFull), optConfig(o), "a failed decode changed the options")
			assert.Same(t, prep, o.Preparer, "a failed decode changed the Preparer")
		})
	}
}

func TestOptionsUnmarshalJSONRejectsInvalidDurations(t *testing.T) {
	const want = `want a duration such as "30s" or "1m30s", got `
	const bare = `want a duration string such as "30s", got the bare number `
	checkRefused(t, []optBadCase{
		{"unknown unit", `{"LeaseTimeout": "5 parsecs"}`, "pool: invalid options: LeaseTimeout: " + want + `"5 parsecs"`},
		{"missing unit", `{"IdleTimeout": "30"}`, "pool: invalid options: IdleTimeout: " + want + `"30"`},
		{"a bare number, meant as seconds", `{"LeaseTimeout": 30}`,
			"pool: invalid options: LeaseTimeout: " + bare + `30: durations need a unit ("30s" for 30 seconds, "30ms" for milliseconds)`},
		{"a bare number of nanoseconds", `{"MaxLifetime": 9223372036854775807}`,
			"pool: invalid options: MaxLifetime: " + bare + `9223372036854775807: durations need a unit ("9223372036854775807s" for 9223372036854775807 seconds, "9223372036854775807ms" for milliseconds)`},
		{"fractional number", `{"MaxLifetime": 1.5}`, "pool: invalid options: MaxLifetime: " + bare + "1.5: durations need a unit"},
		{"exponent form", `{"MaxLifetime": 1.5e9}`, "pool: invalid options: MaxLifetime: " + bare + "1.5e9: durations need a unit"},
		{"so small it is 0 as a number", `{"IdleTimeout": 1e-400}`, "pool: invalid options: IdleTimeout: " + bare + "1e-400: durations need a unit"},
		{"so small it is 0, negative", `{"IdleTimeout": -1e-400}`, "pool: invalid options: IdleTimeout: " + bare + "-1e-400: durations need a unit"},
		{"so small it rounds to 0 as a string", `{"IdleTimeout": "0.1ns"}`,
			`pool: invalid options: IdleTimeout: "0.1ns" rounds to 0, which means no limit; write "0s" for that, or a duration of at least 1ns`},
		{"boolean", `{"CreateTimeout": true}`, "pool: invalid options: CreateTimeout: " + want + "true"},
		{"object", `{"CheckAfterIdle": {}}`, "pool: invalid options: CheckAfterIdle: " + want + "{}"},
		{"beyond the range of a Duration, as a number", `{"PreparationTimeout": 1e19}`, "pool: invalid options: PreparationTimeout: " + bare + "1e19: durations need a unit"},
		{"beyond the range of a Duration, as a string", `{"MaxLifetime": "2562047h47m16.854775808s"}`,
			"pool: invalid options: MaxLifetime: " + want + `"2562047h47m16.854775808s"`},
		{"key in another case", `{"leasetimeout": "soon"}`, "pool: invalid options: LeaseTimeout: " + want + `"soon"`},
	})
}

func TestOptionsUnmarshalJSONRejectsWrongTypes(t *testing.T) {
	checkRefused(t, []optBadCase{
		{"string for a whole number", `{"MaxSize": "20"}`, `pool: invalid options: MaxSize: want a whole number, got "20"`},
		{"fraction for a whole number", `{"MinSize": 1.5}`, `pool: invalid options: MinSize: want a whole number, got 1.5`},
		{"string for a bool", `{"TrackLeaseSites": "yes"}`, `pool: invalid options: TrackLeaseSites: want true or false, got "yes"`},
		{"number for a bool", `{"TrackLeaseSites": 1}`, `pool: invalid options: TrackLeaseSites: want true or false, got 1`},
		{"number for a string", `{"Name": 5}`, `pool: invalid options: Name: want a string, got 5`},
		{"object for a string", `{"Name": {"first": "mail"}}`, `pool: invalid options: Name: want a string, got {"first": "mail"}`},
		{"long value cut short", `{"Name": ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc", "dddddddddd"]}`,
			`pool: invalid options: Name: want a string, got ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc...`},
		{"key in another case", `{"maxSize": true}`, `pool: invalid options: MaxSize: want a whole number, got true`},
		{"bad value after a good one", `{"MinSize": 1, "MaxSize": "20"}`, `pool: invalid options: MaxSize: want a whole number, got "20"`},
		{"array for the options", `[{"MaxSize": 20}]`, `pool: invalid options: want a JSON object such as {"MaxSize": 20}, got [{"MaxSize": 20}]`},
		{"string for the options", `"MaxSize=20"`, `pool: invalid options: want a JSON object such as {"MaxSize": 20}, got "MaxSize=20"`},
		{"number for the options", `20`, `pool: invalid options: want a JSON object such as {"MaxSize": 20}, got 20`},
	})
}

func TestOptionsUnmarshalJSONRejectsUnknownKeys(t *testing.T) {
	checkRefused(t, []optBadCase{
		{"swapped letters", `{"MaxSzie": 20}`, `pool: invalid options: unknown key "MaxSzie" (did you mean "MaxSize"?)`},
		{"missing letter, other case", `{"leasetimout": "5s"}`, `pool: invalid options: unknown key "leasetimout" (did you mean "LeaseTimeout"?)`},
		{"two letters off", `{"IdleTimeOot": "1m"}`, `pool: invalid options: unknown key "IdleTimeOot" (did you mean "IdleTimeout"?)`},
		{"nothing near", `{"Timeout": "5s"}`, `pool: invalid options: unknown key "Timeout"`},
		{"null for an unknown key", `{"MaxSzie": null}`, `pool: invalid options: unknown key "MaxSzie" (did you mean "MaxSize"?)`},
		{"unknown key after good ones", `{"MaxSize": 3, "Name": "x", "MinSzie": 1}`, `pool: invalid options: unknown key "MinSzie" (did you mean "MinSize"?)`},
		{"empty key", `{"": 1}`, `pool: invalid options: unknown key ""`},
		{"the Preparer", `{"Preparer": {"x": 1}}`, `pool: invalid options: Preparer can only be set in code, not from configuration`},
		{"Reset", `{"Reset": "r"}`, `pool: invalid options: Reset can only be set in code, not from configuration`},
		{"Destroy", `{"destroy": 5}`, `pool: invalid options: Destroy can only be set in code, not from configuration`},
		{"MeterProvider", `{"MeterProvider": {}}`, `pool: invalid options: MeterProvider can only be set in code, not from configuration`},
		{"OnLeak", `{"ONLEAK": "f"}`, `pool: invalid options: OnLeak can only be set in code, not from configuration`},
	})
}

// A config file decodes Options as a field of its own struct, where
// encoding/json calls UnmarshalJSON: the refusal must reach the caller.
func TestOptionsUnmarshalJSONRefusalReachesTheConfigDecoder(t *testing.T) {
	var cfg struct {
		Pools map[string]Options[*conn]
	}
	err := json.Unmarshal([]byte(`{"Pools": {"mail": {"MaxSzie": 4}}}`), &cfg)
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.ErrorContains(t, err, `unknown key "MaxSzie"`)

	dec := json.NewDecoder(bytes.NewReader([]byte(`{"Pools": {"mail": {"MaxSize": "4"}}}`)))
	err = dec.Decode(&cfg)
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.ErrorContains(t, err, `MaxSize: want a whole number, got "4"`)
}

// Called directly rather than by encoding/json, UnmarshalJSON gets no
// syntax check first: it refuses broken or trailing input itself.
func TestOptionsUnmarshalJSONRejectsMalformedInput(t *testing.T) {
	for _, in := range []string{``, `{`, `{"MaxSize": }`, `{"MaxSize" 1}`, `{} {}`, `null 1`, `{"MaxSize": 1,}`} {
		t.Run(in, func(t *testing.T) {
			o := optFull
			err := o.UnmarshalJSON([]byte(in))
			assert.ErrorIs(t, err, ErrInvalidOptions)
			assert.Equal(t, optConfig(optFull), optConfig(o), "a failed decode changed the options")
		})
	}
}

// Every Options field is either tagged json:"-" and refused as code-only,
// or a key UnmarshalJSON reads: a configurable field added to Options that
// UnmarshalJSON cannot decode, or that a key cannot name, fails here.
func TestOptionsUnmarshalJSONKnowsEveryField(t *testing.T) {
	typ := reflect.TypeFor[Options[*conn]]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			var o Options[*conn]
			err := json.Unmarshal([]byte(`{"`+f.Name+`": null}`), &o)
			require.NoError(t, err, "null for a field's own key is refused")
			err = json.Unmarshal([]byte(`{"`+f.Name+`": {}}`), &o)
			require.Error(t, err)
			if f.Tag.Get("json") == "-" {
				assert.EqualError(t, err, "pool: invalid options: "+f.Name+" can only be set in code, not from configuration")
			} else {
				assert.ErrorContains(t, err, "pool: invalid options: "+f.Name+": want ")
			}
		})
	}
}

// A refusal says what the field wants, whatever the field's type: a
// configurable field of a type UnmarshalJSON has no words for fails here.
func TestOptionsUnmarshalJSONSaysWhatEveryFieldWants(t *testing.T) {
	typ := reflect.TypeFor[Options[*conn]]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Tag.Get("json") != "-" {
			var o Options[*conn]
			err := json.Unmarshal([]byte(`{"`+f.Name+`": {}}`), &o)
			assert.Regexp(t, `^pool: invalid options: `+f.Name+`: want [^,]+, got \{\}$`, err)
		}
	}
}

func TestEditDistance(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"MaxSize", "MaxSize", 0},
		{"maxsize", "MaxSize", 0},
		{"MaxSzie", "MaxSize", 1}, // a swap is one edit
		{"MaxSiz", "MaxSize", 1},
		{"MaxSizes", "MaxSize", 1},
		{"MinSize", "MaxSize", 2},
		{"", "Name", 3}, // capped at the limit
		{"Timeout", "LeaseTimeout", 3},
		{"abc", "ca", 3},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, editDistance(tc.a, tc.b, 3), "%q, %q", tc.a, tc.b)
		assert.Equal(t, tc.want, editDistance(tc.b, tc.a, 3), "%q, %q", tc.b, tc.a)
	}
}

func TestOptionsMarshalJSONRoundTrips(t *testing.T) {
	for _, o := range []Options[*conn]{optFull, {}, {MaxSize: 20, LeaseTimeout: 30 * time.Second}} {
		b, err := json.Marshal(o)
		require.NoError(t, err)
		var back Options[*conn]
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, optConfig(o), optConfig(back), "%s", b)
	}
}

func TestOptionsMarshalJSONWritesDurationStrings(t *testing.T) {
	o := Options[*conn]{
		MaxSize: 20, LeaseTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second,
		Reset: func(*conn) error { return nil }, Preparer: &optPreparer{},
	}
	// Both as a value and behind a pointer, as a field of a config struct.
	for _, v := range []any{o, &o, struct{ Pool Options[*conn] }{o}} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		if inner, ok := m["Pool"].(map[string]any); ok {
			m = inner
		}
		assert.Equal(t, "30s", m["LeaseTimeout"], "%s", b)
		assert.Equal(t, "1m30s", m["IdleTimeout"], "%s", b)
		assert.Equal(t, "0s", m["MaxLifetime"], "%s", b)
		assert.Equal(t, float64(20), m["MaxSize"], "%s", b)
		assert.NotContains(t, m, "Reset")
		assert.NotContains(t, m, "Preparer")
	}
}

// MarshalJSON writes the configurable fields in the order Options declares
// them, and leaves out an empty Name (see Options.MarshalJSON).
func TestOptionsMarshalJSONWritesFieldsInOrder(t *testing.T) {
	var want []string
	typ := reflect.TypeFor[Options[*conn]]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Tag.Get("json") != "-" {
			want = append(want, f.Name)
		}
	}
	for _, o := range []Options[*conn]{optFull, {}} {
		b, err := json.Marshal(o)
		require.NoError(t, err)
		dec := json.NewDecoder(bytes.NewReader(b))
		_, err = dec.Token() // the opening brace
		require.NoError(t, err)
		var got []string
		for dec.More() {
			key, err := dec.Token()
			require.NoError(t, err)
			got = append(got, key.(string))
			require.NoError(t, dec.Decode(new(json.RawMessage)))
		}
		if o.Name == "" {
			assert.Equal(t, want[1:], got, "%s", b)
		} else {
			assert.Equal(t, want, got, "%s", b)
		}
	}
}

// Every Options field is either tagged json:"-" (function- and
// interface-valued fields, set in code) or written by MarshalJSON under its
// own name: a field added without JSON support fails here.
func TestOptionsJSONCoversEveryConfigurableField(t *testing.T) {
	b, err := json.Marshal(optFull)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))

	var want []string
	typ := reflect.TypeFor[Options[*conn]]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch f.Type.Kind() {
		case reflect.Func, reflect.Interface:
			assert.Equal(t, "-", f.Tag.Get("json"), "code-only field %s is not tagged json:\"-\"", f.Name)
			continue
		}
		if f.Tag.Get("json") == "-" { // code-only by choice, as Logger is
			continue
		}
		want = append(want, f.Name)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(want)
	sort.Strings(got)
	assert.Equal(t, want, got)
}

func TestOptionsFromConfigDocument(t *testing.T) {
	doc := `{
		"Shared": {"MaxSize": 10, "LeaseTimeout": "5s", "IdleTimeout": "1m"},
		"Pools": {
			"ReadPool":  {"MaxSize": 20},
			"WritePool": {"MaxSize": 4, "MinSize": 1, "LeaseTimeout": "1s"}
		}
	}`
	var cfg struct {
		Shared json.RawMessage
		Pools  map[string]json.RawMessage
	}
	require.NoError(t, json.Unmarshal([]byte(doc), &cfg))
	require.Len(t, cfg.Pools, 2)

	pools := map[string]*Pool[*conn]{}
	for name, section := range cfg.Pools {
		o := Options[*conn]{Name: name} // the section's key names the pool unless it says otherwise
		require.NoError(t, json.Unmarshal(cfg.Shared, &o))
		require.NoError(t, json.Unmarshal(section, &o))
		p, _ := newTracked(t, o)
		pools[name] = p
	}

	read, write := pools["ReadPool"], pools["WritePool"]
	require.NotNil(t, read)
	require.NotNil(t, write)
	rs, ws := read.Stats(), write.Stats()
	assert.Equal(t, "ReadPool", rs.Name)
	assert.Equal(t, "WritePool", ws.Name)
	assert.NotEqual(t, rs.Name, ws.Name)
	assert.Equal(t, 20, rs.MaxSize)
	assert.Equal(t, 4, ws.MaxSize)
	assert.Equal(t, 0, rs.MinSize)
	assert.Equal(t, 1, ws.MinSize)
	assert.Equal(t, 1, ws.ItemsAvailable, "WritePool's MinSize was not seeded")
	assert.Equal(t, 5*time.Second, read.opts.LeaseTimeout)
	assert.Equal(t, time.Second, write.opts.LeaseTimeout)
	assert.Equal(t, time.Minute, read.opts.IdleTimeout)
	assert.Equal(t, time.Minute, write.opts.IdleTimeout)
}

// Validate refuses a negative duration in every duration field of Options,
// naming the field (see the doc comments of the fields: 0 means none).
func TestOptionsValidateRefusesEveryNegativeDuration(t *testing.T) {
	typ := reflect.TypeFor[Options[*conn]]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Type == reflect.TypeFor[time.Duration]() {
			var o Options[*conn]
			reflect.ValueOf(&o).Elem().Field(i).SetInt(-1)
			err := o.Validate()
			assert.ErrorIs(t, err, ErrInvalidOptions, f.Name)
			assert.ErrorContains(t, err, f.Name+" is -1ns, must not be negative")
		}
	}
}

// Validate runs New's checks (doc.go, "Configuration"): what New refuses,
// Validate refuses with the same error.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options[*conn]{
		{MaxSize: -1},
		{MinSize: 5, MaxSize: 4},
		{LeaseTimeout: -time.Second},
		{MaxLifetimeJitter: time.Second},
	} {
		err := o.Validate()
		require.Error(t, err, "%+v", o)
		assert.ErrorIs(t, err, ErrInvalidOptions)
		_, newErr := New[*conn](context.Background(), &tracker{}, o)
		assert.Equal(t, newErr, err, "New refuses it with the same error")
	}
	assert.NoError(t, Options[*conn]{}.Validate())
	assert.NoError(t, Options[*conn]{MinSize: 2, MaxSize: 2, MaxLifetime: time.Hour, MaxLifetimeJitter: time.Minute}.Validate())
}
