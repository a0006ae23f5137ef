package outbox

// The relay's statements, transactions and inserts, for the tests of the
// take and of its plan.
type (
	DispatchOpts = dispatchOpts
	Dispatched   = dispatched
)

var (
	DispatchIntents = dispatchIntents
	InsertBuyLabels = insertBuyLabels
	InsertWebhooks  = insertWebhooks
	// NewRelayInserting is NewRelay with the insert of the jobs given.
	NewRelayInserting = newRelay
	// NewEventRelayInserting is NewEventRelay with the insert of the jobs given.
	NewEventRelayInserting = newEventRelay
)

const SQLDispatch = sqlDispatch
