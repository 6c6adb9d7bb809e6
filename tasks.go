package pool

import (
	"bytes"
	"context"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
)

// tasks runs the pool's own goroutines but the upkeep: the filler's rounds,
// the LeakThreshold watcher and its OnLeak calls (Pool.tasks), and the
// Destroy calls (Pool.destroys). Once stop has returned no task starts, and
// wait returns only when every task has ended (or its ctx has), so that none
// of the pool's own work runs after Close.
type tasks struct {
	mu      sync.Mutex
	n       int                 // running
	stopped bool                // stop has been called: no task starts
	waits   []taskWait          // made by wait; each closed once its tasks have ended
	ids     map[uint64]struct{} // goroutine ids of the running tasks: see wait
	// othersOnly: a task calling wait waits for the other tasks (Destroy
	// calls never wait for one another); else it returns at once, since
	// another task may be waiting for the very task that calls it.
	othersOnly bool
}

// taskWait ends when no more tasks run than within (1: the waiter itself).
type taskWait struct {
	within int
	done   chan struct{}
}

// start runs f on a goroutine of its own, or reports false after stop.
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

func (t *tasks) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

// wait waits until no task runs or ctx ends. Called from a task, it waits
// for the others with othersOnly, else returns at once.
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

// awaitOr waits until done is closed (nil) or ctx ends (ctx.Err()). Done
// wins when both are ready, not a select's random choice.
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

// goroutineID parses the caller's id from its stack trace (0 if it cannot),
// so that Close from a task's or the upkeep's callback skips waiting for itself.
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

// turnsOnStack counts the turns to create that the caller's goroutine
// holds: the frames of the functions that hold one throughout (turnHolders),
// from which user code is called (the factory, a ctx's methods, the
// Logger). A Close from inside such code cannot wait for that turn. It
// walks the stack, so only Close pays. A frame names the pool's type, not
// the pool: a Close of one pool from inside another's creation waits for
// one creation fewer.
func turnsOnStack() int {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	for n == len(pcs) {
		pcs = make([]uintptr, 2*len(pcs))
		n = runtime.Callers(2, pcs)
	}
	k := 0
	frames := runtime.CallersFrames(pcs[:n])
	for more := true; more; {
		var f runtime.Frame
		f, more = frames.Next()
		if slices.Contains(turnHolders[:], f.Function) {
			k++
		}
	}
	return k
}

// turnHolders are the names the frames of the functions that hold a turn to
// create have, for every T: a lease's creation, one its caller may abandon,
// and one of the pool's own.
var turnHolders = func() (names [3]string) {
	prefix := reflect.TypeFor[Pool[int]]().PkgPath() + ".(*Pool[...])."
	for i, f := range []string{"create", "createAsync", "createIdle"} {
		names[i] = prefix + f
	}
	return names
}()
