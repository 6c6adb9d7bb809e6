package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// defaultTimer is the -timer flag's default: the waiter that does not
// round idle waits up to a millisecond.
const defaultTimer = "timerfd"

// timerfd waits on a runtime timer, as sleeper does, and arms a Linux
// timer file descriptor, registered with the runtime's poller and never
// read, to expire with it. The descriptor is there only to wake the
// runtime: an idle runtime waits for its next timer in epoll_wait with a
// timeout in whole milliseconds (see sleeper), and the descriptor's
// expiry, an hrtimer's, ends that wait at the instant; the thread then
// finds the generator's timer due and runs it. While the processors are
// busy they run the timer themselves, whenever one schedules.
//
// The generator must be woken by its timer, not by the descriptor: a
// goroutine the timer readies goes to the next slot of the processor that
// ran the timer and runs next, but one the poller readies while every
// processor is busy goes to the global run queue, which a busy processor
// serves once in 61 schedulings, behind every goroutine queued there
// before it (msl's Release yields to the global queue after each
// hand-off, so under saturation the generator would wait behind them).
//
// While every processor is busy the descriptor is armed slack later (a
// hold, from the generator): a processor will run the timer when its hold
// ends, and the next wait re-arms the descriptor before it expires. Armed
// at the instant, each expiry interrupts a busy processor (through the
// hypervisor, in a VM) for nothing: at 85 % CPU load it made the holds
// about 8 % longer (the load carried 0.96–1.01 against 0.88–0.91 in
// alternate runs, 2026-12-06).
type timerfd struct {
	fd    int      // the descriptor, non-blocking, owned by f
	f     *os.File // holds the descriptor in the runtime's poller
	timer *time.Timer
}

func newTimerfd() (waiter, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	// os.NewFile registers a non-blocking descriptor with the poller; one
	// the poller did not take has no deadlines, and would wake nothing.
	f := os.NewFile(uintptr(fd), "timerfd")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("timerfd is not pollable here: %w", err)
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerfd{fd: fd, f: f, timer: t}, nil
}

// wait resets the timer to until, arms the descriptor for the same
// duration plus slack after the reset, and waits for the timer. Arming
// after the reset, with the clock the timer reads (CLOCK_MONOTONIC), makes
// the expiry no earlier than the timer's instant: a thread woken before
// the timer is due would wait for it another millisecond. Since Go 1.23 a
// Reset timer's channel holds no stale value; arming the descriptor
// clears any expiry left unread (timerfd_settime resets the count), so
// each expiry is a new event for the poller.
func (t *timerfd) wait(until time.Time, slack time.Duration) {
	d := time.Until(until)
	if d <= 0 {
		return
	}
	t.timer.Reset(d)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d + slack))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		panic(fmt.Sprintf("timerfd_settime: %v", err))
	}
	<-t.timer.C
}

func (t *timerfd) close() {
	t.timer.Stop()
	_ = t.f.Close()
}
