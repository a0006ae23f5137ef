package reconcile

// Categories of operations.md, in report order. Every invoice line and every
// label of a run's period lands in exactly one of them.
const (
	// Matched is one invoice line, one label, same amount (credits netted).
	Matched = "matched"
	// BilledWithoutLabel is a charge with no label of ours behind it.
	BilledWithoutLabel = "billed_without_label"
	// DuplicateCharge is a label or carrier key billed more than once.
	DuplicateCharge = "duplicate_charge"
	// AmountMismatch is a label billed at another amount than it cost.
	AmountMismatch = "amount_mismatch"
	// LabelNotBilled is a label of ours with no charge, older than the grace period.
	LabelNotBilled = "label_not_billed"
	// KeyWithoutLabel is a completed key whose saved outcome names a label that does not exist.
	KeyWithoutLabel = "key_without_label"
	// LabelWithoutKey is a label with no completed key behind it.
	LabelWithoutKey = "label_without_key"
	// StuckIntent is an accepted intent still not final after the stuck-after duration.
	StuckIntent = "stuck_intent"
	// CarrierIDConflict is an invoice line whose carrier label id (or
	// tracking number) is that of a label of ours bought for another request
	// than the one the line's reference or carrier key names: ids that
	// collide (a carrier numbering again, or two accounts), never matched.
	CarrierIDConflict = "carrier_id_conflict"
	// Voided is a charge netted against the credit of its label's void, and
	// that credit: money the carrier gave back, not a discrepancy. Reports
	// show it only when a run has such items.
	Voided = "voided"
)

// Categories lists every category in report order.
var Categories = []string{
	Matched, BilledWithoutLabel, DuplicateCharge, AmountMismatch,
	LabelNotBilled, KeyWithoutLabel, LabelWithoutKey, StuckIntent, CarrierIDConflict, Voided,
}

// IsDiscrepancy reports whether items of category c are discrepancies: every
// category but matched and voided.
func IsDiscrepancy(c string) bool {
	return c != Matched && c != Voided
}

// Subjects: what an item is about.
const (
	// SubjectLine is an invoice line of the run (with the label it bills, if any,
	// when that label is reported elsewhere or is not of the period).
	SubjectLine = "line"
	// SubjectPair is an invoice line of the run and the label of the period it bills.
	SubjectPair = "line+label"
	// SubjectLabel is a label of the period whose charge is not on this invoice.
	SubjectLabel = "label"
	// SubjectKey is a completed key record.
	SubjectKey = "key"
	// SubjectIntent is an accepted label intent.
	SubjectIntent = "intent"
)
