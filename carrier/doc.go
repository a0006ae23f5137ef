// Package carrier is the client the worker uses to buy shipping labels from the
// carrier, as the carrier protocol (docs/carrier.md) describes.
//
// # Keys
//
// Every purchase carries an idempotency key of the carrier's own, derived by
// [DeriveKey] from the caller-scoped intent:
//
//	"carrier:" + base64url-no-padding(SHA-256(callerID || 0x00 || idemKey))
//
// The derivation is deterministic, so every attempt, every worker and every
// restart sends the same key for the same intent, and a purchase whose reply was
// lost comes back as a replay instead of a second label. Hashing binds the caller,
// so two callers that happen to pick the same key of their own never share a
// carrier key, and keeps personal data that a caller may have put in its own key
// away from the carrier. The 0x00 separator cannot be forged as long as caller
// ids contain no NUL byte, which holds for the ids this system issues. The
// result is always 51 characters of visible ASCII.
//
// # Outcomes
//
// [Client.Buy] turns every carrier answer into one of four results, exactly as
// the protocol's table:
//
//   - a [Label] (201 first purchase, 200 replay, [Label.Replayed] tells which);
//   - a [*RejectedError] (400, 404, 422, or a label the carrier says it has
//     voided, code [CodeLabelVoided]): permanent, the caller saves it;
//   - an [*InProgressError] (409): the carrier is still working on the key;
//   - an [*UnknownOutcomeError] (408, 429, 5xx, any other status, a timeout, a
//     reset or refused connection, a truncated or undecodable success body, or
//     the caller's own context ending): the label may or may not have been
//     bought, so the only safe move is to try again later with the same key.
//
// [IsRetryable] tells the last two from the first. Nothing here retries by
// itself: the worker owns the schedule (River's attempts and backoff). One
// exception lives below us: Go's HTTP transport resends a request whose reused
// keep-alive connection broke, when the request carries an Idempotency-Key
// header. That is safe for exactly the reason the key exists.
package carrier
