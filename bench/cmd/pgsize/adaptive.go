package main

import (
	"github.com/jackc/pgx/v5"
	"github.com/msl-armory/pool"
)

// applyAdaptive is what -adaptive does to the options every run's pool is
// made with: it sets o.AdaptiveSize = true, so that the pool finds the
// limit in force by itself and each -size or -sizes entry is its ceiling
// (MaxSize). The pool this module builds against has no such field yet,
// so for now -adaptive fails, with exit status 2, before any run; once
// pool.Options has it, the body is that one assignment.
func applyAdaptive(o *pool.Options[*pgx.Conn]) {
	fail("this build of the pool has no AdaptiveSize option")
}
