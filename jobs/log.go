package jobs

import (
	"context"

	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"
)

// jobLogger is base with the fields every line about job carries: job_id,
// job_kind and job_attempt (River's). It is the one place a worker adds the
// per-job fields: each job's Work starts its logger here, and adds what only
// it knows (request_id, then caller and key once it has read them).
func jobLogger(_ context.Context, base zerolog.Logger, job *rivertype.JobRow) zerolog.Logger {
	if job == nil { // a Work called without River (a test), with no row
		return base
	}
	return base.With().Int64("job_id", job.ID).Str("job_kind", job.Kind).Int("job_attempt", job.Attempt).Logger()
}
