//go:build !linux

package main

import "errors"

// defaultTimer is the -timer flag's default: off Linux only time.Sleep is
// there, with its idle rounding (see sleeper), which the printed lateness
// of the arrivals shows.
const defaultTimer = "sleep"

func newTimerfd() (waiter, error) {
	return nil, errors.New("-timer timerfd needs Linux; use -timer sleep")
}
