package postgres

// The statements and their settings, for the plan test.
const (
	PlanSettings          = planSettings
	SQLAccept             = sqlAccept
	SQLUnclaimParcelTaken = sqlUnclaimParcelTaken
	SQLLease              = sqlLease
	SQLComplete           = sqlComplete
	SQLDispatch           = sqlDispatch
	SQLNowRFC3339         = sqlNowRFC3339
	LabelCreatedAtZero    = labelCreatedAtZero
)
