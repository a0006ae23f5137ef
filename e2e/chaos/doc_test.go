// Package chaos runs the label service as a small fleet of its real binaries
// and disturbs it while two callers send it a few hundred intents, then checks
// what the seed promises: every accepted intent reaches a final state, the
// carrier sells exactly one label per intent, every replay of a completed
// intent is byte-identical, no answer is a 5xx other than 503, and every
// final intent's completion webhook reaches the receiver under exactly one
// webhook-id, none lost.
//
// It owns nothing that outlives a run. Each [Run] starts a PostgreSQL server
// of its own in a temporary directory (so that it may restart it), a database
// on it, the carrier simulator (latency, 503s, replies dropped after the
// purchase, timeouts after which the purchase still happens), the API and
// [Config.Workers] workers, all on loopback, built once and run by
// internal/fleet. Where the data comes from: the callers' answers, the
// simulator's GET /sim/purchases and /sim/stats, and the run's database.
//
// # The run
//
// The intents come in pairs, one per caller, for the same parcel; two pairs in
// three use the parcel's derived key, the same string for both callers. Each
// intent's first request is sent in the first three quarters of the window
// [Config.Duration]; some intents are sent two or three times at once, some
// again a few seconds later, some again once their outcome is final, each
// repeat with the members reordered, other whitespace, escaped characters,
// explicit defaults, and the key bare or in its quoted form. A caller retries
// a request with the same key and body after no answer, a 503, a 409
// request_in_progress or a 429.
//
// Meanwhile a worker is killed with SIGKILL every [Config.KillEvery] (at a
// moment when some worker is in the middle of a purchase, waited for up to a
// second) and a new one started in its place, the API is killed once (30 %
// into the window) and started again on its address, and PostgreSQL is
// stopped (fast shutdown) and started again once (55 % into the window). The
// simulator takes 0.1 to 0.5 s per purchase, so kills often interrupt one:
// the figure of leases taken over counts them.
//
// After the window the run waits for the drain. A killed worker leaves its
// jobs running in River, which rescues them LEASE_DURATION + 15 s after they
// started on a rescuer pass every 30 s, so the drain after the last kill can
// take most of a minute. Then every completed intent is replayed twice (the
// plain body under the bare key, another rendering under the quoted key) and
// read with GET /v1/labels/{id}: the three bodies and every 201 seen during
// the run must be the same bytes.
//
// # Webhooks
//
// Both callers have an endpoint (`api webhook set`, the secrets sealed with
// the run's WEBHOOK_SECRET_KEY) on a receiver in the run's own process, which verifies every delivery with the caller's
// printed secret and answers the first delivery of one event in seven 503
// with Retry-After: 1. The kills interrupt deliveries as well as purchases.
// After the intents, the run waits until no event is pending, then checks
// that every final intent has exactly one event, delivered, and that the
// receiver saw exactly one distinct webhook-id per final intent (a
// redelivery of the same id is allowed: delivery is at least once).
//
// # Failover
//
// With [Config.HA] the run takes a pg_auto_failover formation
// (internal/testutil/failovertest: a monitor, a primary and a standby,
// synchronous unless asked otherwise) instead of a private server: two APIs
// and two workers get its multi-host DATABASE_URL, the simulator only takes
// 0.2 to 0.5 s per purchase, and nothing of the fleet is killed. From a
// quarter into the window the formation is disturbed, step after step
// ([Step]): the primary killed with SIGKILL (its postmaster and its keeper)
// while purchases are in flight, or right after a burst of creates is sent;
// the killed node rejoining as a standby; a planned switchover. A tail of
// creates follows the last step. Every check above holds, and more: every
// 202 the callers got names an intent and a key the primary holds at the
// end, every 503 carries Retry-After, the workers are the processes started
// first, each connected to the final primary. With an asynchronous standby
// the acknowledged creates missing at the end are counted instead: what
// asynchronous replication loses. Each step's figures: until the formation
// was ready, until the first 202 to a create sent after it, until the last
// intent accepted before it was final.
//
// It is a test: chaos_test.go holds two short runs, failover_test.go a short
// failover run, all part of go test ./...; TestFullRun (main_test.go) the
// full one, which go tool task chaos runs with its flags, and with HA=1 the
// full failover runs.
package chaos
