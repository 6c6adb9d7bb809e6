package main

import (
	"github.com/jackc/pgx/v5"
	"github.com/msl-armory/pool"
)

// applyAdaptive is what an adaptive run (-adaptive, or an a-prefixed
// -sizes entry) does to the options its pool is made with: it sets
// o.AdaptiveSize = true, so that the pool finds the limit in force by
// itself, under the run's MaxSize as its ceiling. The table's limit column
// is then Stats().Limit as sampled each second of the measured period.
func applyAdaptive(o *pool.Options[*pgx.Conn]) {
	o.AdaptiveSize = true
}
