package tracing

import (
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// MetadataKey is the member of a River job's metadata that holds the
// traceparent of the trace the job continues.
const MetadataKey = "traceparent"

// JobMetadata is a job's metadata carrying traceparent; nil for "".
func JobMetadata(traceparent string) []byte {
	if traceparent == "" {
		return nil
	}
	b, _ := json.Marshal(map[string]string{MetadataKey: traceparent})
	return b
}

// jobParent is the River middleware that makes a job's traceparent (its
// metadata) the parent of what runs inside the job's work: placed before
// otelriver's, whose span of the work then joins the trace.
type jobParent struct {
	river.MiddlewareDefaults
}

func (*jobParent) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if len(job.Metadata) > 0 {
		var meta struct {
			Traceparent string `json:"traceparent"`
		}
		if json.Unmarshal(job.Metadata, &meta) == nil {
			ctx = WithParent(ctx, meta.Traceparent)
		}
	}
	return doInner(ctx)
}
