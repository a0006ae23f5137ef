package main

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/labelkit/labels/carrier"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/metrics"
	"github.com/labelkit/labels/reconcile"
)

// reconcilePeriodicJob reconciles the previous UTC day on RECONCILE_SCHEDULE.
// River runs periodic jobs on its elected leader only: once across the fleet.
func reconcilePeriodicJob(spec string) (*river.PeriodicJob, error) {
	schedule, err := jobs.ReconcileSchedule(spec)
	if err != nil {
		return nil, err
	}
	return river.NewPeriodicJob(schedule, jobs.ReconcilePeriodicArgs(nil), &river.PeriodicJobOpts{RunOnStart: false}), nil
}

// addReconcileWorker registers the reconcile job's worker on every worker
// process, scheduled or not, so that a run enqueued by hand (or by the leader)
// is worked wherever it lands.
func addReconcileWorker(workers *river.Workers, pool *pgxpool.Pool, cfg Config, m *metrics.Metrics, log zerolog.Logger) error {
	return river.AddWorkerSafely(workers, &jobs.ReconcileWorker{
		Pool:    pool,
		Carrier: carrier.NewClient(cfg.CarrierURL, &carrier.ClientOpts{Token: cfg.CarrierToken}),
		Log:     log,
		ReportFunc: func(rep *reconcile.Report) {
			for _, c := range reconcile.Categories {
				if reconcile.IsDiscrepancy(c) && rep.Counts[c] > 0 {
					m.ReconcileDiscrepancies.WithLabelValues(c).Add(float64(rep.Counts[c]))
				}
			}
		},
	})
}
