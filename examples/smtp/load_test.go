package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoad sends 64 senders × 50 messages through a pool of 4 sessions to
// a fresh server, and checks what the example claims: the server never
// holds more than MaxSize sessions (checked while the load runs, and by
// the server's own peak), every message arrives exactly once, no send
// fails, the pool's Stats agree with the server's counts, and a busy
// pool sends next to no NOOP.
func TestLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := newMailServer()
	require.NoError(t, err)
	require.NoError(t, srv.start())
	defer func() { assert.NoError(t, srv.stop(ctx)) }()
	m := srv.newMailer()
	p, err := newPool(ctx, m)
	require.NoError(t, err)
	defer p.Close()

	// Watch the cap while the load runs: the server's open sessions and
	// the pool's items, every millisecond, until the load is done.
	var (
		watch         sync.WaitGroup
		samples       int
		overServer    int // samples with more than MaxSize sessions open
		overAllocated int // samples with more than MaxSize items in the pool
		done          = make(chan struct{})
	)
	watch.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			samples++
			if cur, _, _ := srv.be.sessions(); cur > maxSessions {
				overServer++
			}
			if p.Stats().ItemsAllocated > maxSessions {
				overAllocated++
			}
		}
	})
	failed, first := sendLoad(ctx, p, "load")
	close(done)
	watch.Wait()

	assert.Zero(t, failed, "sends failed; the first with: %v", first)
	assert.Positive(t, samples, "the watcher never sampled")
	assert.Zero(t, overServer, "samples with more than %d sessions open on the server", maxSessions)
	assert.Zero(t, overAllocated, "samples with more than %d items in the pool", maxSessions)

	cur, peak, opened := srv.be.sessions()
	assert.LessOrEqual(t, peak, maxSessions, "the most sessions the server held at once")
	total, repeated := srv.be.messages()
	assert.Equal(t, senders*each, total, "messages the server received")
	assert.Zero(t, repeated, "messages the server received more than once")
	missing := 0
	for s := range senders {
		for i := range each {
			if srv.be.count(messageID(loadID("load", s, i))) != 1 {
				missing++
			}
		}
	}
	assert.Zero(t, missing, "messages not received exactly once")

	s := p.Stats()
	t.Logf("server: %d messages, %d repeated, peak %d sessions, %d opened; pool: %d leases, %d waits, %d created; %d NOOPs",
		total, repeated, peak, opened, s.Leases, s.Waits, s.Created, m.noops.Load())
	assert.Equal(t, uint64(senders*each), s.Leases, "Stats.Leases")
	assert.Equal(t, uint64(opened), s.Created, "server sessions opened == Stats.Created")
	assert.Equal(t, cur, s.ItemsAllocated, "server sessions open == Stats.ItemsAllocated")
	assert.Zero(t, m.reconnects.Load(), "reconnects: no session sat idle past the server's timeout")
	// CheckAfterIdle keeps NOOPs off a busy pool: without it every lease
	// would send one. Not none at all: an item's idle time runs from its
	// release, also when the release hands it straight to a waiter, so a
	// waiter the scheduler leaves unscheduled for CheckAfterIdle (a loaded
	// 2-core machine under -race) checks the session it was handed.
	assert.Less(t, m.noops.Load(), int64(senders*each/100), "NOOPs: at most one per 100 messages")
	assert.Zero(t, s.Destroyed+s.PrepareFailed+s.Timeouts+s.Canceled, "destroyed, failed preparation, timed out or canceled")
	assert.Zero(t, m.rsets.Load(), "RSETs: every transaction finished")

	require.NoError(t, p.Close())
	require.NoError(t, srv.be.waitSessions(ctx, 0), "Close QUITs every session")
	s = p.Stats()
	assert.Equal(t, s.Created, s.Destroyed, "Close destroyed every session")
	assert.Zero(t, s.ItemsAllocated)
}
