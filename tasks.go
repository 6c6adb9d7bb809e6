package pool

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
)

// The pool's own goroutines, besides the upkeep's: the filler's rounds
// (create.go), the watcher of LeakThreshold and its OnLeak calls
// (Pool.tasks); and the Destroy calls (Pool.destroys).
//
// The invariant: once stop has returned, no task starts; and wait returns
// only when every task has returned (or its ctx has ended), so that Close
// can promise that no callback of the pool's own work runs after it.

// tasks is the runner of a pool's own goroutines.
type tasks struct {
	mu      sync.Mutex
	n       int                 // running
	stopped bool                // stop has been called: no task starts
	waits   []taskWait          // made by wait; each closed once its tasks have ended
	ids     map[uint64]struct{} // goroutine ids of the running tasks: see wait
	// othersOnly: a task that waits waits for the other tasks (the Destroy
	// calls, none of which waits for another); else it returns at once,
	// since a background task may wait for the very task that calls it.
	othersOnly bool
}

// taskWait is one wait: until no task runs but, when within is 1, the
// waiting task itself.
type taskWait struct {
	within int
	done   chan struct{}
}

// start runs f on a goroutine of its own, unless stop has been called:
// then it reports false.
func (t *tasks) start(f func()) bool {
	return t.startID(func(uint64) { f() })
}

// startID is start for an f that may end the wait for itself before it
// returns: it gets its task's id, for done.
func (t *tasks) startID(f func(id uint64)) bool {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return false
	}
	t.n++
	t.mu.Unlock()
	go func() {
		id := goroutineID()
		t.mu.Lock()
		if t.ids == nil {
			t.ids = make(map[uint64]struct{})
		}
		t.ids[id] = struct{}{}
		t.mu.Unlock()
		defer t.done(id) // after a Goexit in f too
		f(id)
	}()
	return true
}

// done counts a task that has returned, or that nobody waits for any more
// (a Destroy past DestroyTimeout): once per task, whichever comes first.
func (t *tasks) done(id uint64) {
	t.mu.Lock()
	if _, ok := t.ids[id]; !ok {
		t.mu.Unlock()
		return
	}
	delete(t.ids, id)
	t.n--
	t.waits = slices.DeleteFunc(t.waits, func(w taskWait) bool {
		if t.n <= w.within {
			close(w.done)
			return true
		}
		return false
	})
	t.mu.Unlock()
}

// stop keeps tasks from starting.
func (t *tasks) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

// wait waits until no task runs, or ctx ends (then it returns ctx.Err()).
// Called from a task, it cannot wait for its own caller: with othersOnly
// (the Destroy calls) it waits for every other task, else it returns at once.
func (t *tasks) wait(ctx context.Context) error {
	id := goroutineID()
	t.mu.Lock()
	within := 0
	if _, mine := t.ids[id]; mine {
		if !t.othersOnly {
			t.mu.Unlock()
			return nil
		}
		within = 1
	}
	if t.n <= within {
		t.mu.Unlock()
		return nil
	}
	w := taskWait{within: within, done: make(chan struct{})}
	t.waits = append(t.waits, w)
	t.mu.Unlock()
	return awaitOr(ctx, w.done)
}

// awaitOr waits until done is closed, and returns nil, or until ctx ends,
// and returns ctx.Err(). When both are ready, done wins: the outcome never
// depends on a select's random choice.
func awaitOr(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // both at once: done it is
			return nil
		default:
			return ctx.Err()
		}
	}
}

// goroutineID returns the id of the calling goroutine, read from the first
// line of its stack trace ("goroutine 7 [running]:"); 0 if it cannot. Go
// offers no cheaper way. Tasks and the upkeep note theirs, so that a Close
// called from one of their callbacks does not wait for itself.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); ok && i > 0 {
		if id, err := strconv.ParseUint(string(b[:i]), 10, 64); err == nil {
			return id
		}
	}
	return 0
}
