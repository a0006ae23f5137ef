package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/idempotency"
	"github.com/labelkit/labels/internal/group"
	"github.com/labelkit/labels/label"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/notify"
	"github.com/labelkit/labels/outbox"
)

// QueueLabels is the queue of label purchases.
const QueueLabels = "labels"

// BuyLabelArgs names one intent. Jobs are unique by args, so one intent has
// one job however often it is dispatched.
type BuyLabelArgs struct {
	RequestID string `json:"request_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (BuyLabelArgs) Kind() string { return "buy_label" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (BuyLabelArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueLabels, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// DispatchBuyLabels returns the relay's dispatch function: one unique
// buy_label job per request id, inserted in the relay's transaction.
func DispatchBuyLabels(client *river.Client[pgx.Tx]) outbox.DispatchFunc {
	return func(ctx context.Context, tx pgx.Tx, requestIDs []string) error {
		params := make([]river.InsertManyParams, len(requestIDs))
		for i, id := range requestIDs {
			params[i] = river.InsertManyParams{Args: BuyLabelArgs{RequestID: id}}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	}
}

// Carrier is what the worker needs of the carrier: a purchase under a key.
type Carrier interface {
	Buy(ctx context.Context, carrierKey string, req carrier.PurchaseRequest) (*carrier.Label, error)
}

// BuyLabelConfig configures a [BuyLabelWorker].
type BuyLabelConfig struct {
	Pool           *pgxpool.Pool
	Carrier        Carrier
	CarrierTimeout time.Duration // one carrier call; must be below LeaseDuration
	LeaseDuration  time.Duration // how long one attempt owns a key
	KeyRetention   time.Duration // how long a completed key is kept
	MaxAttempts    int           // carrier calls before the saved 502 carrier_unavailable
	Metrics        *metrics.Metrics
	Log            zerolog.Logger
	// Notifier wakes Prefer: wait after a completion; nil means waiters poll.
	Notifier *notify.Notifier

	// BatchMax bounds how many jobs share one lease statement and one
	// completion statement (see batch.go); 0 means 64, and a negative value
	// turns the sharing off (every job runs its own transactions).
	BatchMax int

	// AfterCarrierFunc, when set, runs between the carrier's answer and the
	// completion transaction; an error makes the attempt stop there as if the
	// process had died (the lease is kept). For fault-injection tests.
	AfterCarrierFunc func(ctx context.Context, requestID string) error
}

// BuyLabelWorker buys the label of one intent: it leases the key (committed
// before the carrier call), calls the carrier with the intent's derived key,
// and saves the outcome together with the label, only if the lease is still its own.
type BuyLabelWorker struct {
	river.WorkerDefaults[BuyLabelArgs]
	cfg         BuyLabelConfig
	leases      *group.Group[leaseIn, leaseOut] // nil: no batching
	completions *group.Group[completion, bool]
}

// NewBuyLabelWorker returns a worker.
func NewBuyLabelWorker(cfg BuyLabelConfig) *BuyLabelWorker {
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	w := &BuyLabelWorker{cfg: cfg}
	if cfg.BatchMax >= 0 {
		n := cfg.BatchMax
		if n == 0 {
			n = batchMax
		}
		w.leases = &group.Group[leaseIn, leaseOut]{Max: n, Flushers: batchFlushers, Timeout: cfg.LeaseDuration, Run: leaseMany(cfg.Pool, cfg.LeaseDuration)}
		w.completions = &group.Group[completion, bool]{Max: n, Flushers: batchFlushers, Timeout: cfg.CarrierTimeout, Run: completeMany(cfg.Pool, cfg.KeyRetention)}
	}
	return w
}

// Timeout bounds one attempt's database work by the lease. The carrier call
// and the completion run detached from this deadline (a started purchase is
// never abandoned), bounded by CarrierTimeout instead.
func (w *BuyLabelWorker) Timeout(*river.Job[BuyLabelArgs]) time.Duration { return w.cfg.LeaseDuration }

// outcome is what an attempt saves.
type outcome struct {
	bought  *carrier.Label
	label   *label.Record // what is saved of bought (made once, by complete)
	problem *labels.Problem
}

// Work implements river.Worker.
func (w *BuyLabelWorker) Work(ctx context.Context, job *river.Job[BuyLabelArgs]) error {
	start := time.Now()
	log := w.cfg.Log.With().Str("request_id", job.Args.RequestID).Int64("job_id", job.ID).Int("job_attempt", job.Attempt).Logger()
	result, err := w.work(ctx, job, &log)
	ev := log.Info()
	if err != nil && result != "snoozed" {
		ev = log.Warn().Err(err)
	}
	ev.Str("outcome", result).Dur("duration", time.Since(start)).Msg("buy_label attempt")
	w.cfg.Metrics.JobOutcomes.WithLabelValues("buy_label", result).Inc()
	return err
}

func (w *BuyLabelWorker) work(ctx context.Context, job *river.Job[BuyLabelArgs], log *zerolog.Logger) (string, error) {
	cfg := w.cfg
	// Transaction 1: take the lease and count the attempt (one update of the key), committed before the carrier call.
	in, token, takeover, attempt, result, err := w.lease(ctx, job, log)
	if in == nil {
		return result, err
	}
	*log = log.With().Int("carrier_attempt", attempt).Logger()
	if takeover {
		cfg.Metrics.LeaseTakeovers.Inc()
		log.Warn().Msg("took over an expired lease")
	}

	// Between the transactions: the carrier call, detached from the job's
	// cancellation so that shutdown or the job timeout never abandons it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.CarrierTimeout)
	callStart := time.Now()
	bought, cerr := cfg.Carrier.Buy(cctx, in.CarrierKey, purchaseRequest(in))
	cancel()
	callOutcome := classify(bought, cerr)
	cfg.Metrics.CarrierCalls.WithLabelValues(callOutcome).Inc()
	cfg.Metrics.CarrierDuration.WithLabelValues(callOutcome).Observe(time.Since(callStart).Seconds())

	if cfg.AfterCarrierFunc != nil {
		if err := cfg.AfterCarrierFunc(ctx, in.RequestID); err != nil {
			return "crashed", err
		}
	}

	var out outcome
	var rejected *carrier.RejectedError
	switch {
	case cerr == nil:
		out.bought = bought
	case errors.As(cerr, &rejected):
		p := labels.NewProblem(422, labels.CodeCarrierRejected, "the carrier rejected the parcel for good")
		p.CarrierCode, p.CarrierMessage = rejected.Code, rejected.Message
		out.problem = p
	case attempt >= cfg.MaxAttempts:
		out.problem = labels.NewProblem(502, labels.CodeCarrierUnavailable,
			fmt.Sprintf("the carrier's outcome stayed unknown through %d attempts", attempt))
	default:
		// Outcome unknown: give the lease back and let River retry with the same carrier key.
		if err := idempotency.Release(context.WithoutCancel(ctx), cfg.Pool, in.CallerID, in.Key, token); err != nil {
			log.Warn().Err(err).Msg("could not release the lease; the next attempt waits for it to expire")
		}
		return "carrier_" + callOutcome, cerr
	}

	// Transaction 2: the outcome commits with the label, only if the lease is still ours.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.CarrierTimeout)
	defer dcancel()
	err = w.complete(dctx, job, in, token, out)
	if err == nil {
		cfg.Notifier.Notify(notify.ChannelFinal, in.RequestID)
	}
	if errors.Is(err, label.ErrParcelAlreadyLabelled) {
		// Unreachable while the intents' natural key holds; if it happens the
		// purchase just made is an orphan that reconciliation reports.
		log.Error().Msg("the parcel already has a label: saving parcel_already_labelled")
		out = outcome{problem: labels.NewProblem(409, labels.CodeParcelAlreadyLabelled, "the parcel and version already have a label")}
		err = w.complete(dctx, job, in, token, out)
		if err == nil {
			cfg.Notifier.Notify(notify.ChannelFinal, in.RequestID)
		}
	}
	switch {
	case errors.Is(err, idempotency.ErrFenced):
		cfg.Metrics.FencingRejections.Inc()
		log.Warn().Msg("lost the lease before completing: wrote nothing")
		// The attempt that took over finishes the intent; come back to check.
		return "fenced", river.JobSnooze(cfg.LeaseDuration)
	case err != nil:
		return "error", err
	case out.bought != nil:
		return "succeeded", nil
	default:
		return "failed_" + out.problem.Code, nil
	}
}

// lease leases the intent's key for this attempt: with other jobs in one
// statement, or alone when that statement did not lease it. A nil intent
// means the attempt ends here with result and err.
func (w *BuyLabelWorker) lease(ctx context.Context, job *river.Job[BuyLabelArgs], log *zerolog.Logger) (
	in *outbox.Intent, token uuid.UUID, takeover bool, attempt int, result string, err error,
) {
	cfg := w.cfg
	if w.leases != nil {
		token = uuid.New()
		out, err := w.leases.Do(leaseIn{requestID: job.Args.RequestID, token: token})
		if err != nil {
			log.Debug().Err(err).Msg("the shared lease statement failed: leasing alone")
		}
		if err == nil && out.intent != nil {
			*log = log.With().Str("caller", out.intent.CallerID).Str("key", out.intent.Key).Logger()
			return out.intent, token, out.takeover, out.attempt, "", nil
		}
	}
	in, err = outbox.Get(ctx, cfg.Pool, "", job.Args.RequestID)
	if errors.Is(err, outbox.ErrNotFound) {
		return nil, token, false, 0, "cancelled", river.JobCancel(err)
	}
	if err != nil {
		return nil, token, false, 0, "error", err
	}
	*log = log.With().Str("caller", in.CallerID).Str("key", in.Key).Logger()
	if in.Status != labels.StatusPending {
		return nil, token, false, 0, "already_final", nil
	}
	err = pgx.BeginFunc(ctx, cfg.Pool, func(tx pgx.Tx) error {
		var err error
		token, takeover, attempt, err = idempotency.Lease(ctx, tx, in.CallerID, in.Key, cfg.LeaseDuration)
		return err
	})
	var held *idempotency.LeaseHeldError
	switch {
	case errors.Is(err, idempotency.ErrCompleted):
		return nil, token, false, 0, "already_final", nil
	case errors.As(err, &held):
		// Another attempt runs; come back when its lease ends. Snoozing does not use up an attempt.
		return nil, token, false, 0, "snoozed", river.JobSnooze(clamp(time.Until(held.Until)+100*time.Millisecond, time.Second, cfg.LeaseDuration))
	case err != nil:
		return nil, token, false, 0, "error", err
	}
	return in, token, takeover, attempt, "", nil
}

// complete saves the outcome, only if the lease is still the attempt's: with
// other jobs in one statement (River then completes the job when Work
// returns), or, when that statement did not save it, alone.
func (w *BuyLabelWorker) complete(ctx context.Context, job *river.Job[BuyLabelArgs], in *outbox.Intent, token uuid.UUID, out outcome) error {
	if out.bought != nil && out.label == nil {
		out.label = newLabel(in, out.bought)
	}
	if w.completions != nil {
		saved, err := w.completions.Do(completionOf(in, token, out))
		if err == nil && saved {
			return nil
		}
		if err != nil {
			w.cfg.Log.Debug().Err(err).Str("request_id", in.RequestID).Msg("the shared completion statement failed: completing alone")
		}
	}
	return w.completeAlone(ctx, job, in, token, out)
}

// newLabel is the label an attempt saves for what the carrier sold.
func newLabel(in *outbox.Intent, bought *carrier.Label) *label.Record {
	rec := &label.Record{
		Label: labels.Label{
			LabelID:        "lbl_" + ulid.Make().String(),
			OrderID:        in.Parcel.OrderID,
			ParcelNo:       in.Parcel.ParcelNo,
			LabelVersion:   in.Parcel.LabelVersion,
			Service:        in.Parcel.Service,
			TrackingNo:     bought.TrackingNo,
			CarrierLabelID: bought.CarrierLabelID,
			CostCents:      bought.CostCents,
			Currency:       bought.Currency,
			CreatedAt:      time.Now().UTC().Truncate(time.Microsecond),
		},
		CallerID:     in.CallerID,
		RequestID:    in.RequestID,
		CarrierKey:   in.CarrierKey,
		CreatedByKey: in.Key,
	}
	if !bought.PurchasedAt.IsZero() {
		rec.PurchasedAt = &bought.PurchasedAt
	}
	return rec
}

func completionOf(in *outbox.Intent, token uuid.UUID, out outcome) completion {
	c := completion{requestID: in.RequestID, callerID: in.CallerID, key: in.Key, token: token, label: out.label}
	if rec := out.label; rec != nil {
		c.status, c.body = 201, rec.Label.Body()
	} else {
		c.status, c.body = out.problem.Status, out.problem.Body()
	}
	return c
}

// completeAlone is the completion of one job in a transaction of its own.
func (w *BuyLabelWorker) completeAlone(ctx context.Context, job *river.Job[BuyLabelArgs], in *outbox.Intent, token uuid.UUID, out outcome) error {
	cfg := w.cfg
	return pgx.BeginFunc(ctx, cfg.Pool, func(tx pgx.Tx) error {
		if out.bought != nil {
			rec := out.label
			// The fenced update goes first: a stale attempt stops before writing anything else.
			if err := idempotency.Complete(ctx, tx, in.CallerID, in.Key, token, 201, rec.Label.Body(), cfg.KeyRetention); err != nil {
				return err
			}
			if err := label.Insert(ctx, tx, rec); err != nil {
				return err
			}
			if err := outbox.MarkSucceeded(ctx, tx, in.RequestID, rec.LabelID); err != nil {
				return err
			}
		} else {
			body := out.problem.Body()
			if err := idempotency.Complete(ctx, tx, in.CallerID, in.Key, token, out.problem.Status, body, cfg.KeyRetention); err != nil {
				return err
			}
			if err := outbox.MarkFailed(ctx, tx, in.RequestID, body); err != nil {
				return err
			}
		}
		// Complete the job in the same commit. River only checks that the job is
		// running, not that this attempt runs it; when a rescued attempt already
		// moved the job on, there is nothing to complete, and the lease check
		// above has already decided that this attempt may write.
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return err
		}
		return nil
	})
}

func purchaseRequest(in *outbox.Intent) carrier.PurchaseRequest {
	p := in.Parcel
	return carrier.PurchaseRequest{
		Reference: in.RequestID,
		OrderID:   p.OrderID,
		ParcelNo:  p.ParcelNo,
		WeightG:   p.WeightG,
		Service:   p.Service,
		ShipTo: carrier.Address{
			Name: p.ShipTo.Name, Line1: p.ShipTo.Line1, Line2: p.ShipTo.Line2,
			City: p.ShipTo.City, PostalCode: p.ShipTo.PostalCode, Country: p.ShipTo.Country,
		},
	}
}

func classify(l *carrier.Label, err error) string {
	var rejected *carrier.RejectedError
	var inProgress *carrier.InProgressError
	switch {
	case err == nil && l.Replayed:
		return "replayed"
	case err == nil:
		return "bought"
	case errors.As(err, &rejected):
		return "rejected"
	case errors.As(err, &inProgress):
		return "in_progress"
	default:
		return "unknown"
	}
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}
