// Package sim is the carrier simulator: an [http.Handler] that serves the carrier
// protocol (docs/carrier.md) from memory, and can be told to misbehave in
// every way the protocol's table names, so that tests, the chaos run and the demo
// can show each failure on purpose. cmd/carrier serves it.
//
// # Purchases
//
// POST /v1/labels buys a label, deduplicated by Idempotency-Key: the first call
// for a key answers 201, every later call with the same key answers 200 with the
// same label. A later call with the same key and a different body is a replay
// too, the body is not compared: the key names the purchase, as with most real
// carriers that accept one. While a key's first call is still purchasing (see
// TimeoutRate) another call with it answers 409 in_progress. A key whose
// label was voided since (POST /v1/labels/{id}/void) replays the label with
// "status": "voided" and "voided_at"; a live label has no status.
//
// What a label looks like, fixed so that tests can predict it:
//
//   - carrier_label_id is "CL-" + a sequence from 1, never reused by one
//     simulator (not even after a reset, so a database that kept labels from
//     before the reset never sees the same id for two labels), nor across
//     restarts on one state file; a simulator started without one numbers
//     from CL-1 again, as a carrier recycling its ids would;
//   - tracking_no is the service's prefix (GRD ground, EXP express, OVN
//     overnight) + the order id zero-padded to 9 digits, e.g. GRD000918273; when
//     that number is taken already (a second parcel of the order, a second
//     purchase in NoKeys mode) a suffix "-2", "-3"… keeps it unique;
//   - cost_cents is [Cost]: ground 450 + weight_g/10, express 900 + weight_g/5,
//     overnight 1800 + weight_g/4 (integer division), in USD;
//   - purchased_at is the purchase time in UTC, truncated to the second, so the
//     JSON answer and the invoice's billed_at agree to the character.
//
// The shipping address is checked but not kept: the simulator holds no personal
// data, only what an invoice shows.
//
// # Misbehaviour
//
// [Options] sets it at construction; POST /sim/config changes it at run time and
// GET /sim/config reads it (see [Server.ServeHTTP] for the JSON). For every call
// to POST /v1/labels the simulator draws, from one random source seeded by
// Options.Seed, in this order: the latency jitter, whether to fail, whether to
// time out, whether to drop the reply. A run of sequential calls is therefore the
// same for the same seed. Then, in this order:
//
//  1. it waits Latency + a uniform share of LatencyJitter;
//  2. it answers 503 (with Retry-After: 1) for a share FailRate of calls, before
//     anything is bought;
//  3. it replays (200) or answers 409 for a known key, so a replay is never
//     rejected, timed out or dropped;
//  4. it rejects (422 address_invalid) a ship_to.postal_code equal to
//     RejectPostalCode;
//  5. for a share TimeoutRate of new purchases it waits TimeoutDelay, or until the
//     client hangs up, and then buys anyway: the label exists although the
//     client saw a timeout;
//  6. it buys, and for a share DropReplyRate of purchases hijacks the connection
//     and closes it without a word.
//
// With NoKeys the Idempotency-Key is ignored: it is not required, and every call
// buys again. The key a call sent is still recorded in /sim/purchases and counted
// in /sim/stats by_key, so a test can see the double purchases, but the invoice
// bills such a label with an empty idempotency_key, as a carrier without keys
// would.
//
// With Token set, every endpoint but /healthz requires "Authorization: Bearer
// <Token>" and answers 401 otherwise. The token is write-only: GET /sim/config
// does not show it.
//
// # Invoices
//
// GET /v1/invoices?date=YYYY-MM-DD bills every purchase made that UTC day, in
// purchase order, one line each, invoice_no INV-YYYYMMDD, line_no from 1,
// billed_at = purchased_at. The billing errors of [BillingMix] are decided per
// label by a random source seeded with Seed and the label id, so the same day
// fetched twice is the same file byte for byte, and a line once billed keeps its
// line_no when later purchases of the day append theirs. [WriteSyntheticInvoice]
// writes the same kind of file for made-up labels without a server, and returns
// the [Truth] behind it.
//
// # Persistence
//
// With Options.StateFile set, purchases are kept in a JSON Lines journal: the
// file is read at [New], and each purchase is appended to it before its answer is
// sent, so a label the simulator answered for survives a restart (a crash of the
// machine may lose the last writes: nothing is fsynced). A reset truncates it.
// Counters (calls, replays…) and the configuration are not kept.
//
// GET /sim/purchases, GET /sim/stats and POST /sim/reset let tests look inside.
package sim
