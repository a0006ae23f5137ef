package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// FinalRequestIDs returns those of requestIDs whose intent is final
// (succeeded or failed): the API's one read for all the requests it holds
// under Prefer: wait, in case a completion's notification was missed. One
// statement, one primary-key probe per id.
func FinalRequestIDs(ctx context.Context, db DB, requestIDs []string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT request_id FROM label_intents
		WHERE request_id = ANY ($1) AND status <> 'pending'`, requestIDs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
