package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/labelkit/labels/internal/tracing"
)

// TracingEnv reads the OTEL_* variables tracing.Setup takes (tracing.Vars)
// and returns them as its getenv: read with the configuration, so that
// --help reads them too.
func TracingEnv(e *Env) func(string) string {
	vals := make(map[string]string, len(tracing.Vars))
	for _, n := range tracing.Vars {
		vals[n] = e.String(n, "")
	}
	return func(n string) string { return vals[n] }
}

// Tracing sets up OpenTelemetry tracing from getenv, which [TracingEnv]
// returns (tracing.Setup; the service name defaults to labels-<name>) and returns
// the function that flushes the spans still buffered, to call when the
// service has stopped. ok is false, the reason written to stderr, when the
// settings are wrong.
func Tracing(ctx context.Context, name string, getenv func(string) string, log zerolog.Logger, stderr io.Writer) (stop func(), ok bool) {
	shutdown, err := tracing.Setup(ctx, getenv, "labels-"+name)
	if err != nil {
		fmt.Fprintf(stderr, "%s: tracing: %v\n", name, err)
		return nil, false
	}
	if tracing.On() {
		log.Info().Msg("tracing on: spans go to the OTLP endpoint")
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn().Err(err).Msg("tracing: spans not flushed")
		}
	}, true
}
