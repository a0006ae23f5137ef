// Package idempotency is the request side of the key record: it parses the
// Idempotency-Key header ([ParseKey]) and fingerprints a request
// ([Fingerprint] over [Canonical] JSON: SHA-256 of method, path and the
// canonical body), so that a repeat with the same body is recognised and one
// with another body is refused.
//
// It holds no state and runs no SQL. The key record itself (table
// idempotency_keys, one row per (caller_id, idem_key)) and every statement on
// it live in package postgres: postgres.Accept writes it with the intent,
// postgres.TakeLeases and postgres.Release move its lease, postgres.Complete
// saves the outcome only while the lease is the attempt's own, and
// postgres.Purge deletes completed records past expires_at in batches,
// leaving a tombstone of each key (idempotency_tombstones) so that a key
// sent again after its record was purged is noticed.
package idempotency
