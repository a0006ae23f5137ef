package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/labelkit/labels/internal/testutil/fixture"
	"github.com/labelkit/labels/internal/testutil/logtest"
	"github.com/labelkit/labels/jobs"
	"github.com/labelkit/labels/worker"
)

// A slog record comes out as one zerolog JSON line: the logger's fields,
// level and message, the attributes (a group's as "group.key", an error as
// its text, a duration in milliseconds under a name that ends in _ms) as fields; records below the minimum or the logger's level are
// dropped.
func TestSlogHandlerWritesZerolog(t *testing.T) {
	var buf logtest.Buffer
	zl := zerolog.New(&buf).Level(zerolog.InfoLevel).With().Str("service", "worker").Logger()
	log := slog.New(worker.NewSlogHandler(zl, slog.LevelInfo)).With("queue", "labels").WithGroup("job")

	log.Debug("dropped: below the minimum")
	log.Warn("Job appears to be stuck", slog.Int64("id", 7), slog.Group("args", slog.String("kind", "buy_label")),
		slog.Duration("after", 1500*time.Millisecond), slog.Duration("wait_ms", 2*time.Millisecond), slog.Any("err", errors.New("boom")), slog.Bool("ok", false))
	log.Error("failed")
	slog.New(worker.NewSlogHandler(zl, slog.LevelInfo)).Error("errored", slog.Any("err", errors.New("bang")))
	slog.New(worker.NewSlogHandler(zl, slog.LevelInfo)).Error("errored", slog.String("err", "bang"))
	slog.New(worker.NewSlogHandler(zl.Level(zerolog.ErrorLevel), slog.LevelDebug)).Warn("dropped: below the logger's level")

	lines := buf.Lines(t, "")
	require.Len(t, lines, 4, buf.String())
	require.Equal(t, map[string]any{
		"service": "worker", "level": "warn", "message": "Job appears to be stuck", "queue": "labels",
		"job.id": float64(7), "job.args.kind": "buy_label", "job.after_ms": float64(1500), "job.wait_ms": float64(2), "job.err": "boom", "job.ok": false,
	}, lines[0])
	require.Equal(t, map[string]any{"service": "worker", "level": "error", "message": "failed", "queue": "labels"}, lines[1])
	require.Equal(t, map[string]any{"service": "worker", "level": "error", "message": "errored", "error": "bang"}, lines[2])
	require.Equal(t, lines[2], lines[3], "River's err as an error or as its text")
}

type unknownArgs struct{}

func (unknownArgs) Kind() string { return "no_such_kind" }

// River's own log lines go through the logger the worker is given: a job
// of a kind no worker handles makes River log an error, which comes out of
// the injected logger as zerolog JSON.
func TestRiverLogsThroughTheWorkersLogger(t *testing.T) {
	t.Parallel()
	pool := fixture.DB(t)
	var buf logtest.Buffer
	w, err := worker.New(worker.Config{
		Pool: pool, SweepInterval: -1, FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 20 * time.Millisecond,
		RelayPollInterval: 50 * time.Millisecond, TestOnly: true,
		Log: zerolog.New(&buf).With().Str("service", "worker").Logger(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	})

	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	_, err = inserter.Insert(ctx, unknownArgs{}, &river.InsertOpts{Queue: jobs.QueueLabels})
	require.NoError(t, err)

	var line map[string]any
	require.Eventually(t, func() bool {
		for _, l := range buf.Lines(t, "") {
			if l["kind"] == "no_such_kind" {
				line = l
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "no River line about the unknown kind: %s", &buf)
	require.Equal(t, "error", line["level"])
	require.Equal(t, "worker", line["service"])
	require.Contains(t, line["message"], "Unhandled job kind")
	require.NotNil(t, line["job_id"])
}
