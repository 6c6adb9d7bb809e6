package pool

// The idle ring holds the items waiting to be reused.
//
// This part is the FIFO queue behind it: a circular buffer of entries,
// guarded by the gate's mutex (gate.mu), so that taking a permit and taking
// an idle item are one critical section and a release can choose between a
// waiter and the queue atomically. Items leave from the head, the one idle
// longest, so lazy eviction meets the oldest first; they join at the tail.
//
// The queue never keeps a reference to an entry it gave out: pop clears the
// slot it read. That matters beyond tidiness: a leased entry must be
// reachable only from its Lease handles, so that the garbage collector can
// find a lease that was dropped without being released.
type idleQueue[T any] struct {
	buf  []*entry[T] // len(buf) is a power of two, or zero before first use
	head int         // index of the oldest entry
	n    int         // entries in the queue
}

// len returns the number of idle entries. Caller holds gate.mu.
func (q *idleQueue[T]) len() int { return q.n }

// push appends e at the tail. Caller holds gate.mu.
func (q *idleQueue[T]) push(e *entry[T]) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = e
	q.n++
}

// pop removes and returns the oldest entry, or nil when the queue is empty.
// Caller holds gate.mu.
func (q *idleQueue[T]) pop() *entry[T] {
	if q.n == 0 {
		return nil
	}
	e := q.buf[q.head]
	q.buf[q.head] = nil // the queue keeps no reference to an entry it gave out
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return e
}

// grow doubles the buffer. The queue never holds more than MaxSize entries,
// but MaxSize may be large and mostly unused, so it grows on demand rather
// than being sized up front.
func (q *idleQueue[T]) grow() {
	size := 2 * len(q.buf)
	if size == 0 {
		size = 8
	}
	buf := make([]*entry[T], size)
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = buf, 0
}
