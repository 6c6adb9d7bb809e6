package pool_test

// Example of several named pools configured, and reloaded, from one JSON file.

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/msl-armory/pool"
)

// nmConn stands in for a database connection in Example_namedPools.
type nmConn struct {
	server string // the server it was dialed to
}

// nmConfig is a configuration file: settings shared by every pool, and a
// section per pool that overrides some of them.
const nmConfig = `{
	"Shared":    {"MaxSize": 10, "LeaseTimeout": "2s", "IdleTimeout": "5m"},
	"ReadPool":  {"MinSize": 2, "MaxSize": 8},
	"WritePool": {"MaxSize": 2, "LeaseTimeout": "500ms"}
}`

// nmServers says where each pool's connections go.
var nmServers = map[string]string{"ReadPool": "replica", "WritePool": "primary"}

// nmOptions returns the options of the pool named name: the shared section
// decoded first, then the pool's own section on top of it. The name comes
// from the section's key unless the section sets one.
func nmOptions(file map[string]json.RawMessage, name string) (pool.Options[*nmConn], error) {
	opts := pool.Options[*nmConn]{Name: name}
	for _, section := range []string{"Shared", name} {
		if err := json.Unmarshal(file[section], &opts); err != nil {
			return opts, fmt.Errorf("config %s: %w", section, err)
		}
	}
	return opts, nil
}

// Example_namedPools loads two pools of one item type from one
// configuration file: a shared section, and a section per pool on top of
// it. Each pool has its own Name, which tells them apart in Stats and in
// their errors. On a reload, Options.Validate checks every pool's new
// options before SetMaxSize applies any of them.
func Example_namedPools() {
	var file map[string]json.RawMessage
	if err := json.Unmarshal([]byte(nmConfig), &file); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	pools := map[string]*pool.Pool[*nmConn]{}
	for _, name := range []string{"ReadPool", "WritePool"} {
		opts, err := nmOptions(file, name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: MinSize %d, MaxSize %d, LeaseTimeout %v, IdleTimeout %v\n",
			opts.Name, opts.MinSize, opts.MaxSize, opts.LeaseTimeout, opts.IdleTimeout)
		server := nmServers[name]
		dial := pool.FactoryFunc[*nmConn](func(ctx context.Context) (*nmConn, error) {
			return &nmConn{server: server}, nil // a real factory would dial, within ctx
		})
		p, err := pool.New(ctx, dial, opts)
		if err != nil {
			log.Fatal(err)
		}
		defer p.Close()
		pools[name] = p
	}

	// Reads go to the replica, writes to the primary.
	for _, name := range []string{"ReadPool", "WritePool"} {
		l, err := pools[name].Lease(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s lent a connection to the %s\n", name, l.Value().server)
		l.Release()
	}

	for _, p := range []*pool.Pool[*nmConn]{pools["ReadPool"], pools["WritePool"]} {
		s := p.Stats()
		fmt.Printf("%s: %d item(s), %d idle, %d lease(s) so far\n", s.Name, s.ItemsAllocated, s.ItemsAvailable, s.Leases)
	}

	// Errors name the pool too: hold both of WritePool's connections and
	// try for a third.
	w := pools["WritePool"]
	for range 2 {
		l, err := w.Lease(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer l.Release()
	}
	if _, err := w.TryLease(ctx); err != nil {
		fmt.Println(err)
	}

	// A reload: the file changes, and each pool's new options are checked
	// before any of them is applied. A bad value keeps the old settings.
	for _, reload := range []string{
		`{"Shared": {"MaxSize": 10}, "ReadPool": {"MinSize": 12}, "WritePool": {}}`,
		`{"Shared": {"MaxSize": 10}, "ReadPool": {"MinSize": 2, "MaxSize": 6}, "WritePool": {"MaxSize": 4}}`,
	} {
		if err := json.Unmarshal([]byte(reload), &file); err != nil {
			log.Fatal(err)
		}
		next := map[string]pool.Options[*nmConn]{}
		var invalid error
		for name := range pools {
			opts, err := nmOptions(file, name)
			if err == nil {
				err = opts.Validate()
			}
			if err != nil {
				invalid = err
				break
			}
			next[name] = opts
		}
		if invalid != nil {
			fmt.Println("reload refused:", invalid)
			continue
		}
		for _, name := range []string{"ReadPool", "WritePool"} {
			if err := pools[name].SetMaxSize(next[name].MaxSize); err != nil {
				log.Fatal(err)
			}
			fmt.Printf("%s: MaxSize now %d\n", name, pools[name].Stats().MaxSize)
		}
	}
	// Output:
	// ReadPool: MinSize 2, MaxSize 8, LeaseTimeout 2s, IdleTimeout 5m0s
	// WritePool: MinSize 0, MaxSize 2, LeaseTimeout 500ms, IdleTimeout 5m0s
	// ReadPool lent a connection to the replica
	// WritePool lent a connection to the primary
	// ReadPool: 2 item(s), 2 idle, 1 lease(s) so far
	// WritePool: 1 item(s), 1 idle, 1 lease(s) so far
	// pool: exhausted: pool "WritePool": every item is in use (MaxSize 2)
	// reload refused: pool: invalid options: MinSize is 12, must be between 0 and MaxSize (10)
	// ReadPool: MaxSize now 6
	// WritePool: MaxSize now 4
}
