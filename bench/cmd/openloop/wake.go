package main

import (
	"fmt"
	"time"
)

// A waiter blocks the generator until the next arrival is due. Which one
// is a flag (-timer), so that a reader can see what the choice does to
// the arrivals' lateness.
type waiter interface {
	// wait returns at until or a little after. slack is how long after
	// until a wake-up from outside the scheduler may come, for a waiter
	// that has one.
	wait(until time.Time, slack time.Duration)
	close()
}

// newWaiter returns the waiter called name: "sleep" (time.Sleep, any
// system) or "timerfd" (Linux only, wake_linux.go).
func newWaiter(name string) (waiter, error) {
	switch name {
	case "sleep":
		return sleeper{}, nil
	case "timerfd":
		return newTimerfd()
	}
	return nil, fmt.Errorf("-timer %q: want timerfd or sleep", name)
}

// sleeper waits with time.Sleep. The Go runtime runs timers when a
// processor passes through its scheduler, which a busy processor does
// every time a goroutine blocks or ends; but once every processor is idle,
// the last thread waits for the next timer in epoll_wait, whose timeout is
// in whole milliseconds, rounded up (runtime/netpoll_epoll.go). So a
// Sleep of 30 µs takes about 30 µs while the processors are busy and
// about 1.1 ms while they idle: on a two-core machine at 34 000 arrivals a
// second, a millisecond's arrivals would start together.
type sleeper struct{}

func (sleeper) wait(until time.Time, _ time.Duration) { time.Sleep(time.Until(until)) }
func (sleeper) close()                                {}
