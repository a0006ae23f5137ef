// Package e2e holds system tests that cross every part of the pipeline and
// disturb what is under it: losing the database, a worker killed in the middle
// of a void or a webhook delivery, PgBouncer in front of PostgreSQL, the
// brief's failure table row by row, and the one clock. Some start the real
// binaries (internal/fleet); others run the pipeline in process
// (internal/testutil/stacktest). e2e/chaos holds the chaos run.
package e2e
