// Package e2e holds system tests that cross every part of the pipeline and
// disturb what is under it: losing the database (a PostgreSQL server of the
// test's own, stopped and started), the primary killed and its streaming
// standby promoted (internal/testutil/replicatest), a worker killed in the middle of a void
// or of a webhook delivery, PgBouncer in front of PostgreSQL, the rows of
// docs/failure-modes.md that no other test covers (that document maps every
// row to its test), and every time coming from the database's clock. Some
// start the real binaries (internal/fleet, built by
// internal/testutil/proctest); the others run the pipeline in process
// (internal/testutil/stacktest). TestFill runs 60 simulated hours of
// requests through the pipeline and the sweep, and checks that each table's
// size levels off at docs/capacity.md's steady state. With -short, the tests that start binaries
// or a server of their own are skipped. e2e/chaos holds the chaos run.
package e2e
