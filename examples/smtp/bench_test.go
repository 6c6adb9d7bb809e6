package main

import (
	"context"
	"testing"
	"time"

	"github.com/msl-armory/pool"
)

// BenchmarkSend measures one message, sent by one sender at a time to the
// in-process server over loopback, by two paths (named path=..., so that
// benchstat -col /path sets them side by side):
//
//   - pooled: Lease, MAIL, RCPT, DATA, Release, through the example's pool
//     (MaxSize 4, a NOOP only after 100 ms idle, RSET only after an
//     abandoned transaction). It also reports pool-ns/msg, the time spent
//     inside Lease and Release, read from the clock around each call, and
//     pool-%, that time's share of the whole.
//   - dial-per-message: what the pool saves: dial, greeting, EHLO,
//     STARTTLS and the TLS handshake, EHLO, AUTH, the message, QUIT, per
//     message.
//
// The server runs in the same process and shares the machine's cores, so
// each figure includes the server's work for the message too.
func BenchmarkSend(b *testing.B) {
	msg := message("bench")
	b.Run("path=pooled", func(b *testing.B) {
		_, p, ctx := benchPool(b)
		var inPool time.Duration
		n := 0
		b.ReportAllocs()
		for b.Loop() {
			t0 := time.Now()
			l, err := p.Lease(ctx)
			t1 := time.Now()
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Value().send(ctx, from, to, msg); err != nil {
				l.Discard()
				b.Fatal(err)
			}
			t2 := time.Now()
			l.Release()
			inPool += t1.Sub(t0) + time.Since(t2)
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msg/s")
		b.ReportMetric(float64(inPool.Nanoseconds())/float64(n), "pool-ns/msg")
		b.ReportMetric(100*inPool.Seconds()/b.Elapsed().Seconds(), "pool-%")
	})
	b.Run("path=dial-per-message", func(b *testing.B) {
		m, _, ctx := benchPool(b)
		n := 0
		b.ReportAllocs()
		for b.Loop() {
			mc, err := m.Create(ctx)
			if err != nil {
				b.Fatal(err)
			}
			err = mc.send(ctx, from, to, msg)
			_ = destroy(mc)
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msg/s")
	})
}

// BenchmarkLeaseRelease is Lease and Release of a pooled session with no
// send between: the pool's own cost with the example's options (a Preparer
// with CheckAfterIdle, so each lease and release reads the clock; a Reset
// that finds no transaction open), in a tight loop, without the cold
// caches a send between the two leaves. Set against BenchmarkSend's
// pooled path it is the pool's share of a send, measured a second way.
func BenchmarkLeaseRelease(b *testing.B) {
	_, p, ctx := benchPool(b)
	b.ReportAllocs()
	for b.Loop() {
		l, err := p.Lease(ctx)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
}

// benchPool starts a server and returns a mailer for it, the example's
// pool over that mailer with one session already made, and a ctx for the
// sends. Everything stops when b ends.
func benchPool(b *testing.B) (*mailer, *pool.Pool[*mailConn], context.Context) {
	b.Helper()
	srv, err := newMailServer()
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.start(); err != nil {
		b.Fatal(err)
	}
	// A deadline, as a real sender's ctx has one: each send then pays for
	// bounding its exchange by it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	m := srv.newMailer()
	p, err := newPool(ctx, m)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		p.Close()
		if err := srv.stop(ctx); err != nil {
			b.Error(err)
		}
		cancel()
	})
	// The first lease dials: keep that out of the loop.
	l, err := p.Lease(ctx)
	if err != nil {
		b.Fatal(err)
	}
	l.Release()
	return m, p, ctx
}
