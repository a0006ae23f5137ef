package postgres

import (
	"context"
	"time"
)

// ClockSkew measures how far the process clock now (nil: time.Now) is from
// the database's: skew is the database's time minus the process's (positive:
// the process is behind), and uncertainty half the round trip of the
// measurement, within which the true skew lies.
func ClockSkew(ctx context.Context, db DB, now func() time.Time) (skew, uncertainty time.Duration, err error) {
	if now == nil {
		now = time.Now
	}
	var at time.Time
	before := now()
	if err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		return 0, 0, err
	}
	after := now()
	half := after.Sub(before) / 2
	return at.Sub(before.Add(half)), half, nil
}
