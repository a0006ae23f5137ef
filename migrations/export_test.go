package migrations

import "time"

// SetNow replaces g's clock, for tests of the recheck while behind.
func SetNow(g *Gate, now func() time.Time) { g.now = now }
