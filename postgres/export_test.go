package postgres

// The statements and their settings, for the plan test.
var (
	SQLAccept   = sqlAccept
	SQLLease    = sqlLease
	SQLComplete = sqlComplete
)

const (
	PlanSettings          = planSettings
	SQLUnclaimParcelTaken = sqlUnclaimParcelTaken
	SQLNowRFC3339         = sqlNowRFC3339
	LabelCreatedAtZero    = labelCreatedAtZero
)

// SQLOutcome is sqlOutcome, for the round-trip test.
func SQLOutcome[T AcceptResult | LeaseResult | CompleteResult](r T) string { return sqlOutcome(r) }
