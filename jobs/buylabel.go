package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/labelkit/labels"
	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/internal/group"
	"github.com/labelkit/labels/internal/tracing"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/postgres"
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

	// BatchMax bounds how many jobs share one lease statement and one
	// completion statement (WORKER_BATCH); 0 means [DefaultBatch], and a
	// negative value turns the sharing off (every job runs the statements
	// alone).
	BatchMax int

	// AfterCarrierFunc, when set, runs between the carrier's answer and the
	// completion transaction; an error makes the attempt stop there as if the
	// process had died (the lease is kept). For fault-injection tests.
	AfterCarrierFunc func(ctx context.Context, requestID string) error
}

// BuyLabelWorker buys the label of one intent: it leases the key (committed
// before the carrier call), calls the carrier with the intent's derived key,
// and saves the outcome together with the label, only if the lease is still
// its own. The jobs that run at the same time share their lease statement and
// their completion statement (group commit): one round trip and one commit
// per batch instead of per job, each job with the outcome it would have had
// alone.
type BuyLabelWorker struct {
	river.WorkerDefaults[BuyLabelArgs]
	cfg         BuyLabelConfig
	leases      *group.Group[postgres.LeaseRow, postgres.LeaseOutcome]     // nil: each job alone
	completions *group.Group[postgres.Completion, postgres.CompleteResult] // nil: each job alone
}

// DefaultBatch is BatchMax's default (WORKER_BATCH's): the most jobs of one
// shared statement.
const DefaultBatch = 64

// BatchLinger bounds how long a lease or completion statement waits for more
// jobs after one that was not full (internal/group's linger, until the batch
// is full): the jobs of one fetch take their leases within a few
// milliseconds of each other, and their carrier calls, started together, end
// within a few milliseconds of each other too. At a moderate rate a fetch of
// 40 then shares one statement instead of several, for at most BatchLinger
// more per attempt; under load the batches are full and nothing waits.
const BatchLinger = 5 * time.Millisecond

// NewBuyLabelWorker returns a worker.
func NewBuyLabelWorker(cfg BuyLabelConfig) *BuyLabelWorker {
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(metrics.Worker)
	}
	w := &BuyLabelWorker{cfg: cfg}
	if cfg.BatchMax >= 0 {
		n := cfg.BatchMax
		if n == 0 {
			n = DefaultBatch
		}
		w.leases = &group.Group[postgres.LeaseRow, postgres.LeaseOutcome]{Max: n, Flushers: 1, Timeout: cfg.LeaseDuration,
			Linger: BatchLinger, LingerFew: n,
			Run: func(ctx context.Context, rows []postgres.LeaseRow) ([]postgres.LeaseOutcome, error) {
				return postgres.TakeLeases(ctx, cfg.Pool, rows, cfg.LeaseDuration)
			}}
		w.completions = &group.Group[postgres.Completion, postgres.CompleteResult]{Max: n, Flushers: 1, Timeout: cfg.CarrierTimeout,
			Linger: BatchLinger, LingerFew: n,
			Run: func(ctx context.Context, cs []postgres.Completion) ([]postgres.CompleteResult, error) {
				return postgres.Complete(ctx, cfg.Pool, cs, cfg.KeyRetention)
			}}
	}
	return w
}

// Timeout bounds one attempt's database work by the lease. The carrier call
// and the completion run detached from this deadline (a started purchase is
// never abandoned), bounded by CarrierTimeout instead.
func (w *BuyLabelWorker) Timeout(*river.Job[BuyLabelArgs]) time.Duration { return w.cfg.LeaseDuration }

// outcome is what an attempt saves: the label bought, or the problem.
type outcome struct {
	label   *postgres.Label
	problem *labels.Problem
}

// Work implements river.Worker.
func (w *BuyLabelWorker) Work(ctx context.Context, job *river.Job[BuyLabelArgs]) error {
	start := time.Now()
	log := jobLogger(ctx, w.cfg.Log, job.JobRow).With().Str("request_id", job.Args.RequestID).Logger()
	result, err := w.work(ctx, job, &log)
	ev := log.Info()
	if err != nil && result != "snoozed" {
		ev = log.Warn().Err(err)
	}
	ev.Str("outcome", result).Dur("duration_ms", time.Since(start)).Msg("buy_label attempt")
	w.cfg.Metrics.JobOutcomes.WithLabelValues("buy_label", result).Inc()
	return err
}

func (w *BuyLabelWorker) work(ctx context.Context, job *river.Job[BuyLabelArgs], log *zerolog.Logger) (string, error) {
	cfg := w.cfg
	// Transaction 1: take the lease and count the attempt (one update of the key), committed before the carrier call.
	token := uuid.New()
	lease, err := w.lease(ctx, postgres.LeaseRow{RequestID: job.Args.RequestID, Token: token})
	if err != nil {
		return "error", err
	}
	if lease.Key != "" {
		*log = log.With().Str("caller", lease.CallerID).Str("key", lease.Key).Logger()
	}
	switch lease.Result {
	case postgres.LeaseGone:
		return "cancelled", river.JobCancel(postgres.ErrNotFound)
	case postgres.LeaseFinal:
		return "already_final", nil
	case postgres.LeaseHeld:
		// Another attempt runs; come back when its lease ends. Snoozing does not use up an attempt.
		return "snoozed", river.JobSnooze(clamp(time.Until(lease.HeldUntil)+100*time.Millisecond, time.Second, cfg.LeaseDuration))
	case postgres.LeaseBusy:
		// Another session holds the key's row: this job alone tries again shortly.
		return "snoozed", river.JobSnooze(time.Second)
	}
	in, attempt := lease.Intent, lease.Attempt
	*log = log.With().Int("carrier_attempt", attempt).Logger()
	if lease.Takeover {
		cfg.Metrics.LeaseTakeovers.Inc()
		log.Warn().Msg("took over an expired lease")
	}

	// Between the transactions: the carrier call, detached from the job's
	// cancellation so that shutdown or the job timeout never abandons it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.CarrierTimeout)
	callStart := time.Now()
	cctx, span := tracing.Start(cctx, "carrier.buy", trace.WithSpanKind(trace.SpanKindClient))
	bought, cerr := cfg.Carrier.Buy(cctx, in.CarrierKey, purchaseRequest(in))
	cancel()
	if cerr == nil {
		// Whatever carrier answered: a label it says is voided ships nothing
		// and is never recorded (carrier.Client.Buy already refuses one).
		cerr = carrier.CheckStatus(bought)
	}
	callOutcome := classify(bought, cerr)
	endCarrierSpan(span, callOutcome, attempt, cerr)
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
		out.label = newLabel(in, bought)
	case carrier.IsLabelVoided(cerr):
		// The key bought a label the carrier has voided since (a void that
		// reached it while this intent retried): the key will only ever
		// name that label, so the intent fails for good, and the caller is
		// told why instead of being handed a dead label.
		rejected, _ = carrier.IsRejected(cerr)
		p := labels.NewProblem(labels.CodeCarrierRejected,
			"the carrier voided the label this request bought: it ships nothing, and this key only ever names it; ask again under a new key for a new label")
		p.CarrierCode, p.CarrierMessage = labels.CarrierCodeLabelVoided, rejected.Message
		out.problem = p
	case errors.As(cerr, &rejected):
		p := labels.NewProblem(labels.CodeCarrierRejected, "the carrier rejected the parcel for good")
		p.CarrierCode, p.CarrierMessage = rejected.Code, rejected.Message
		out.problem = p
	case attempt >= cfg.MaxAttempts:
		out.problem = labels.NewProblem(labels.CodeCarrierUnavailable,
			fmt.Sprintf("the carrier's outcome stayed unknown through %d attempts", attempt))
	default:
		// Outcome unknown: give the lease back and let River retry with the same carrier key.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.CarrierTimeout)
		err := postgres.Release(rctx, cfg.Pool, []postgres.Lease{{CallerID: in.CallerID, Key: in.Key, Token: token}}, cfg.CarrierTimeout/4)
		rcancel()
		if err != nil {
			log.Warn().Err(err).Msg("could not release the lease; the next attempt waits for it to expire")
		}
		return "carrier_" + callOutcome, cerr
	}

	// Transaction 2: the outcome commits with the label, only if the lease is still ours.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.CarrierTimeout)
	defer dcancel()
	dctx, span = tracing.Start(dctx, "buy_label.complete")
	defer span.End()
	result, err := w.complete(dctx, completionOf(in, token, out))
	if result == postgres.CompleteParcelLabelled {
		// Unreachable while the intents' natural key holds; if it happens the
		// purchase just made is an orphan that reconciliation reports.
		log.Error().Msg("the parcel already has a label: saving parcel_already_labelled")
		out = outcome{problem: labels.NewProblem(labels.CodeParcelAlreadyLabelled, "the parcel and version already have a label")}
		result, err = w.complete(dctx, completionOf(in, token, out))
	}
	switch {
	case err != nil:
		return "error", err
	case result == postgres.CompleteFenced:
		cfg.Metrics.FencingRejections.Inc()
		log.Warn().Msg("lost the lease before completing: wrote nothing")
		// The attempt that took over finishes the intent; come back to check.
		return "fenced", river.JobSnooze(cfg.LeaseDuration)
	case result != postgres.Completed:
		return "error", fmt.Errorf("completion not saved (outcome %d)", result)
	}
	if out.label != nil {
		return "succeeded", nil
	}
	return "failed_" + out.problem.Code, nil
}

// lease takes the lease of one job, in the statement it shares with the
// jobs leasing at the same time.
func (w *BuyLabelWorker) lease(ctx context.Context, row postgres.LeaseRow) (postgres.LeaseOutcome, error) {
	if w.leases != nil {
		return w.leases.Do(ctx, row)
	}
	outs, err := postgres.TakeLeases(ctx, w.cfg.Pool, []postgres.LeaseRow{row}, w.cfg.LeaseDuration)
	if err != nil {
		return postgres.LeaseOutcome{}, err
	}
	return outs[0], nil
}

// complete saves one job's outcome, in the statement it shares with the jobs
// completing at the same time. A row another session holds is tried again
// until ctx ends: the purchase is made, and its outcome must be saved.
//
// With tracing on, the webhook event the completion writes stores the
// traceparent of ctx's span, for its delivery to link to.
func (w *BuyLabelWorker) complete(ctx context.Context, c postgres.Completion) (postgres.CompleteResult, error) {
	c.Traceparent = tracing.Traceparent(ctx)
	wait := 50 * time.Millisecond
	for {
		var r postgres.CompleteResult
		var err error
		if w.completions != nil {
			r, err = w.completions.Do(ctx, c)
		} else {
			var rs []postgres.CompleteResult
			if rs, err = postgres.Complete(ctx, w.cfg.Pool, []postgres.Completion{c}, w.cfg.KeyRetention); err == nil {
				r = rs[0]
			}
		}
		if err != nil || r != postgres.CompleteBusy {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// endCarrierSpan ends the span of a carrier call with its outcome.
func endCarrierSpan(span trace.Span, outcome string, attempt int, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("labels.carrier_outcome", outcome), attribute.Int("labels.carrier_attempt", attempt))
		tracing.Fail(span, err)
	}
	span.End()
}

// newLabel is the label an attempt saves for what the carrier sold.
func newLabel(in *postgres.Intent, bought *carrier.Label) *postgres.Label {
	rec := &postgres.Label{
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
			// CreatedAt is the database's: the completion writes it.
		},
		CallerID:     in.CallerID,
		RequestID:    in.RequestID,
		CarrierKey:   in.CarrierKey,
		CreatedByKey: in.Key,
	}
	if !bought.PurchasedAt.IsZero() {
		rec.PurchasedAt = &bought.PurchasedAt
	}
	if bought.HasDocument() {
		rec.Document = &labels.Document{URL: bought.LabelURL, ContentType: bought.LabelContentType, SizeBytes: *bought.LabelSizeBytes}
	}
	return rec
}

// completionOf is what the completion statement saves for out.
func completionOf(in *postgres.Intent, token uuid.UUID, out outcome) postgres.Completion {
	c := postgres.Completion{RequestID: in.RequestID, CallerID: in.CallerID, Key: in.Key, Token: token, Label: out.label}
	if out.label != nil {
		c.Status = 201 // the completion renders the label, with the database's time
	} else {
		c.Status, c.Body = out.problem.Status, out.problem.Body()
	}
	return c
}

func purchaseRequest(in *postgres.Intent) carrier.PurchaseRequest {
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
