package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// defaultTimer is the -timer flag's default: the waiter that does not
// round idle waits to milliseconds.
const defaultTimer = "timerfd"

// timerfd waits on a Linux timer file descriptor and, at the same instant,
// on the Go runtime's own timer, and returns at whichever fires first.
//
// Each covers the other's blind spot. The timerfd is an hrtimer with
// nanosecond resolution: armed, it makes the descriptor readable at the
// instant, and a thread blocked in epoll_wait, the idle runtime's, wakes
// then, where the runtime's own timers would wait out epoll_wait's
// millisecond (see sleeper). But while every processor is busy no thread
// sits in epoll_wait, and the runtime looks at the descriptor only when a
// processor runs out of work or the system monitor polls (every 10 ms);
// its timers, though, run whenever a busy processor schedules. The file
// is read through the runtime's poller with a read deadline at the same
// instant: the descriptor wakes an idle runtime, the deadline (a runtime
// timer) a busy one. Neither spins: the generator costs a processor only
// while it starts requests.
type timerfd struct {
	fd   int             // the descriptor, non-blocking, owned by f
	f    *os.File        // f.Fd would make the descriptor blocking, so fd is kept
	conn syscall.RawConn // reads f through the runtime's poller
	read func(uintptr) bool
	buf  [8]byte // the expiry count a read returns (ignored)
}

func newTimerfd() (waiter, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	t := &timerfd{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
	// A descriptor the poller did not take has no deadlines: fail now
	// rather than block without one in the first wait.
	if err := t.f.SetReadDeadline(time.Time{}); err != nil {
		_ = t.f.Close()
		return nil, fmt.Errorf("timerfd is not pollable here: %w", err)
	}
	if t.conn, err = t.f.SyscallConn(); err != nil {
		_ = t.f.Close()
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	// read is made once: a method value made in wait would be allocated
	// at every wait. It is done (true) unless the timer has not expired.
	t.read = func(uintptr) bool {
		_, err := unix.Read(t.fd, t.buf[:])
		return err != unix.EAGAIN
	}
	return t, nil
}

// wait arms the timerfd for until, relative to now (time.Time does not
// expose the runtime's CLOCK_MONOTONIC reading that an absolute arming
// would need; the few ns between reading the clock and arming are the
// error), sets the read deadline to until, and reads through the raw
// connection: os.File.Read would allocate the error of every wait the
// deadline ends. Arming clears any expiry a wait the deadline ended left
// unread (timerfd_settime resets the count), so a stale readiness costs
// the poller's read loop one more pass, never an early return.
func (t *timerfd) wait(until time.Time) {
	d := time.Until(until)
	if d <= 0 {
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		panic(fmt.Sprintf("timerfd_settime: %v", err))
	}
	if err := t.f.SetReadDeadline(until); err != nil {
		panic(fmt.Sprintf("timerfd: set read deadline: %v", err))
	}
	if err := t.conn.Read(t.read); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		panic(fmt.Sprintf("timerfd: read: %v", err))
	}
}

func (t *timerfd) close() { _ = t.f.Close() }
