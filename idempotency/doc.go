// Package idempotency owns the key record of the seed: the idempotency_keys
// table, one row per (caller_id, idem_key).
//
// It parses the Idempotency-Key header ([ParseKey]), fingerprints a request
// ([Fingerprint] over [Canonical] JSON), and moves a record through its life:
//
//	Insert    started, written in the accept transaction together with the intent
//	Lease     a worker attempt takes the key (locked_until, a fresh lease_token)
//	Release   the attempt gives the lease back after an unknown carrier outcome
//	Complete  completed with the saved response, only if the lease is still ours
//	Purge     completed records past expires_at are deleted in batches
//
// Every function that writes takes a [pgx.Tx] (or a pool for the single-statement
// ones), so that the caller decides what commits together: the key and its intent
// at accept, the key, the label and the intent at completion.
//
// Leases use the database's clock (now()), not the worker's, so that a fleet of
// workers with drifting clocks agrees on who holds a key.
package idempotency
