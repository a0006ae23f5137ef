package main

import (
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"
)

func reconcilePeriodicJob(spec string) (*river.PeriodicJob, error) {
	return nil, errors.New("TODO wire reconcile")
}

func addReconcileWorker(workers *river.Workers, pool *pgxpool.Pool, cfg Config, log zerolog.Logger) error {
	return nil
}
