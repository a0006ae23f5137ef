package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/reconcile"
)

// QueueVoids is the queue of the voids of `reconcile void`: apart from the
// purchases, so that a batch of voids never delays a label.
const QueueVoids = "voids"

// VoidLabelArgs names one carrier label to void. Jobs are unique per label
// while one is queued, retrying or running: a rerun, or two operators at
// once, add no second job; once one has finished, a new request (after a
// failed void) may enqueue another.
type VoidLabelArgs struct {
	CarrierLabelID string `json:"carrier_label_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (VoidLabelArgs) Kind() string { return "void_label" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (VoidLabelArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueVoids, UniqueOpts: river.UniqueOpts{
		ByArgs: true,
		ByState: []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending,
			rivertype.JobStateRetryable, rivertype.JobStateRunning, rivertype.JobStateScheduled},
	}}
}

// EnqueueVoids returns reconcile.VoidOpts.Enqueue: one unique void_label job
// per carrier label, inserted in the request's transaction.
func EnqueueVoids(client *river.Client[pgx.Tx]) reconcile.EnqueueVoids {
	return InsertByID(client, func(id string) river.JobArgs { return VoidLabelArgs{CarrierLabelID: id} })
}

// InsertByID returns a function that inserts, in tx, one job per id with
// the args newArgs makes of it, in one round trip (River's InsertManyTx):
// the relays' and the void's enqueue, inside the transaction that takes the
// ids.
func InsertByID(client *river.Client[pgx.Tx], newArgs func(id string) river.JobArgs) func(ctx context.Context, tx pgx.Tx, ids []string) error {
	return func(ctx context.Context, tx pgx.Tx, ids []string) error {
		params := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			params[i] = river.InsertManyParams{Args: newArgs(id)}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	}
}

// Voider is what the void job needs of the carrier.
type Voider interface {
	Void(ctx context.Context, carrierKey, carrierLabelID string) (*carrier.VoidedLabel, error)
}

// VoidLabelWorker voids one carrier label that `reconcile void` asked for:
// it counts the attempt, checks once more that no label or completed key of
// ours names the label and that no intent that may still receive it is
// pending (reconcile.GuardVoid), calls the
// carrier with the label's void key (carrier.DeriveVoidKey), and records
// the outcome. A job run again after a crash calls the carrier again with
// the same key, which the carrier answers as a replay: the label is voided
// once.
type VoidLabelWorker struct {
	river.WorkerDefaults[VoidLabelArgs]
	Pool    *pgxpool.Pool
	Carrier Voider
	// CarrierTimeout bounds one carrier call.
	CarrierTimeout time.Duration
	// MaxAttempts is how many carrier calls with an unknown outcome make the
	// void failed.
	MaxAttempts int
	Metrics     *metrics.Metrics
	Log         zerolog.Logger

	// AfterCarrierFunc, when set, runs between the carrier's answer and the
	// record of the outcome; an error makes the attempt stop there, as if the
	// process had died. For fault-injection tests.
	AfterCarrierFunc func(ctx context.Context, carrierLabelID string) error
}

// Work implements river.Worker.
func (w *VoidLabelWorker) Work(ctx context.Context, job *river.Job[VoidLabelArgs]) error {
	start := time.Now()
	log := jobLogger(ctx, w.Log, job.JobRow).With().Str("carrier_label_id", job.Args.CarrierLabelID).Logger()
	result, err := w.work(ctx, job.Args.CarrierLabelID, &log)
	ev := log.Info()
	if err != nil {
		ev = log.Warn().Err(err)
	}
	ev.Str("outcome", result).Dur("duration_ms", time.Since(start)).Msg("void_label attempt")
	if w.Metrics != nil {
		w.Metrics.JobOutcomes.WithLabelValues("void_label", result).Inc()
	}
	return err
}

func (w *VoidLabelWorker) work(ctx context.Context, cl string, log *zerolog.Logger) (string, error) {
	a, ok, err := reconcile.TakeVoidAttempt(ctx, w.Pool, cl)
	if err != nil {
		return "error", err
	}
	if !ok {
		return "already_answered", nil
	}
	*log = log.With().Int("carrier_attempt", a.Attempts).Logger()
	// Detached from the job's cancellation from here on: a void asked of the
	// carrier is recorded whatever happens to the job.
	dctx := context.WithoutCancel(ctx)
	if reason, err := reconcile.GuardVoid(ctx, w.Pool, a); err != nil {
		return "error", err
	} else if reason != "" {
		log.Error().Str("reason", reason).Msg("refusing to void a carrier label of ours")
		return w.record(dctx, cl, reconcile.VoidResult{Outcome: reconcile.VoidFailed, Detail: "refused: " + reason}, a)
	}

	cctx, cancel := context.WithTimeout(dctx, w.timeout())
	voided, cerr := w.Carrier.Void(cctx, a.VoidKey, cl)
	cancel()
	if w.AfterCarrierFunc != nil {
		if err := w.AfterCarrierFunc(ctx, cl); err != nil {
			return "crashed", err
		}
	}
	var rejected *carrier.RejectedError
	switch {
	case cerr == nil:
		detail := "voided at " + voided.VoidedAt.UTC().Format(time.RFC3339)
		if voided.Replayed {
			detail += " (the carrier replayed the void)"
		}
		return w.record(dctx, cl, reconcile.VoidResult{Outcome: reconcile.VoidVoided, Detail: detail,
			VoidedAt: voided.VoidedAt, CreditCents: voided.CostCents}, a)
	case carrier.IsVoidWindowClosed(cerr):
		rejected, _ = carrier.IsRejected(cerr)
		return w.record(dctx, cl, reconcile.VoidResult{Outcome: reconcile.VoidWindowClosed, Detail: rejected.Message}, a)
	case carrier.IsNotFound(cerr):
		rejected, _ = carrier.IsRejected(cerr)
		return w.record(dctx, cl, reconcile.VoidResult{Outcome: reconcile.VoidNotFound, Detail: rejected.Message}, a)
	case errors.As(cerr, &rejected):
		return w.record(dctx, cl, reconcile.VoidResult{Outcome: reconcile.VoidFailed,
			Detail: fmt.Sprintf("the carrier refused the void (%d %s): %s", rejected.Status, rejected.Code, rejected.Message)}, a)
	case !carrier.IsRetryable(cerr):
		return w.record(dctx, cl, reconcile.VoidResult{Outcome: reconcile.VoidFailed, Detail: cerr.Error()}, a)
	case a.Attempts >= w.maxAttempts():
		return w.record(dctx, cl, reconcile.VoidResult{Outcome: reconcile.VoidFailed,
			Detail: fmt.Sprintf("no answer from the carrier through %d attempts: %v", a.Attempts, cerr)}, a)
	}
	// Outcome unknown: River retries with the same void key.
	return "carrier_unknown", cerr
}

// record saves the outcome and counts it once, by the attempt that saved it.
func (w *VoidLabelWorker) record(ctx context.Context, cl string, res reconcile.VoidResult, a reconcile.VoidAttempt) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout())
	defer cancel()
	recorded, err := reconcile.RecordVoid(rctx, w.Pool, cl, res)
	if err != nil {
		return "error", err
	}
	if recorded && w.Metrics != nil {
		w.Metrics.VoidOutcomes.WithLabelValues(res.Outcome).Inc()
		if res.Outcome == reconcile.VoidVoided {
			w.Metrics.VoidRecoveredCents.WithLabelValues(a.Currency).Add(float64(a.ChargeCents))
		}
	}
	return res.Outcome, nil
}

func (w *VoidLabelWorker) timeout() time.Duration {
	if w.CarrierTimeout > 0 {
		return w.CarrierTimeout
	}
	return 20 * time.Second
}

func (w *VoidLabelWorker) maxAttempts() int {
	if w.MaxAttempts > 0 {
		return w.MaxAttempts
	}
	return 20
}
