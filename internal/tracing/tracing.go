// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables and gives the rest of the project the few pieces it
// needs: the wrappers of the HTTP server and clients (otelhttp), the pgx
// tracer (otelpgx), River's middleware (otelriver), and the W3C traceparent
// that carries a purchase's trace across the outbox.
//
// Tracing is off unless an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off again.
// Off, no SDK provider is installed and every wrapper here returns what it
// was given: the handler, the transport and the pool run as without this
// package, the hot paths check [On] (one atomic load) before doing anything,
// and no traceparent is stored or sent.
package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of the project's own spans.
const Name = "github.com/labelkit/labels"

var on atomic.Bool

// On says tracing is installed ([Setup] found an endpoint, or a test called
// [Install]).
func On() bool { return on.Load() }

// Tracer is the project's tracer (a no-op one while tracing is off).
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// propagator is W3C trace context: traceparent (and tracestate).
var propagator = propagation.TraceContext{}

// Vars are the variables [Setup] reads through its getenv.
var Vars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

// Enabled says what getenv asks for: tracing on when an OTLP endpoint is
// configured, unless the SDK or the traces exporter is turned off.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e != "" && e != "otlp" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs tracing when getenv configures it ([Enabled]): an OTLP
// exporter over HTTP/protobuf to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the
// URL as it is) or OTEL_EXPORTER_OTLP_ENDPOINT (its /v1/traces), a batching
// tracer provider sampling by OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on), and service.name
// OTEL_SERVICE_NAME (default defaultService). What the exporter and the SDK
// read themselves comes from the process's environment: the headers,
// timeout and TLS of OTEL_EXPORTER_OTLP_*, OTEL_BSP_*, and
// OTEL_RESOURCE_ATTRIBUTES. It returns the shutdown that flushes the spans
// still buffered and turns tracing off; off, it installs nothing and the
// shutdown does nothing.
func Setup(ctx context.Context, getenv func(string) string, defaultService string) (func(context.Context) error, error) {
	if !Enabled(getenv) {
		return func(context.Context) error { return nil }, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%s: only http/protobuf is supported", v, p)
			}
			break
		}
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = strings.TrimRight(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want an http:// or https:// URL", endpoint)
	}
	sampler, err := samplerOf(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	service := getenv("OTEL_SERVICE_NAME")
	if v, ok := res.Set().Value("service.name"); service == "" && ok {
		service = v.AsString()
	}
	res, err = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", cmp.Or(service, defaultService))))
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	restore := Install(tp)
	return func(ctx context.Context) error {
		restore()
		return tp.Shutdown(ctx)
	}, nil
}

// samplerOf is the sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// name (the specification's values; the ratio defaults to 1).
func samplerOf(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		ratio = r
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}

// Install makes tp the process's tracer provider, W3C trace context its
// propagator, and turns [On] on: what [Setup] does with its provider, and
// what a test does with one over an in-memory recorder. Clients, handlers
// and pools built before it are not traced. The function returned turns On
// off again, with a no-op provider and the propagator that was there (for
// tests).
func Install(tp trace.TracerProvider) (restore func()) {
	prevProp := otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagator, propagation.Baggage{}))
	on.Store(true)
	return func() {
		on.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(prevProp)
	}
}

// Handler wraps the API's handler in otelhttp's: a server span per request,
// continuing the caller's traceparent, but for the probes and the scrapes
// (/healthz, /readyz, /metrics), which would drown the traces. Off: h
// itself.
func Handler(h http.Handler) http.Handler {
	if !On() {
		return h
	}
	return otelhttp.NewHandler(h, "http.server", otelhttp.WithFilter(func(r *http.Request) bool {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			return false
		}
		return true
	}))
}

// Transport wraps an HTTP client's transport in otelhttp's: a client span
// per call, and the traceparent header. Off: rt itself.
func Transport(rt http.RoundTripper) http.RoundTripper {
	if !On() {
		return rt
	}
	return otelhttp.NewTransport(rt)
}

// Pool gives cfg's connections otelpgx's tracer: a span per statement run
// inside a sampled span (none for River's polling and the like). Off: cfg
// is left as it is.
func Pool(cfg *pgxpool.Config) {
	if On() && cfg.ConnConfig.Tracer == nil {
		cfg.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithTrimSQLInSpanName())
	}
}

// RiverMiddleware is River's middleware for a traced worker: a job's
// traceparent (its metadata, set by the relay) becomes the parent of
// otelriver's span of the job's work, so the job continues the trace of
// the request that asked for it. Off: none.
func RiverMiddleware() []rivertype.Middleware {
	if !On() {
		return nil
	}
	return []rivertype.Middleware{&jobParent{}, otelriver.NewMiddleware(nil)}
}

// Traceparent is the W3C traceparent of ctx's span: what is stored with an
// intent or an event and sent with a job. "" while tracing is off or ctx
// has no span.
func Traceparent(ctx context.Context) string {
	if !On() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// SpanContext is the span context a traceparent names (invalid for "" or
// a malformed one).
func SpanContext(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// WithParent is ctx with the remote span a traceparent names as the parent
// of the spans started in it; ctx itself for an invalid one.
func WithParent(ctx context.Context, traceparent string) context.Context {
	if sc := SpanContext(traceparent); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// TraceID is the trace id of ctx's span, for log lines; "" while tracing is
// off or ctx has no span.
func TraceID(ctx context.Context) string {
	if !On() {
		return ""
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// Start starts one of the project's spans in ctx. Off, it starts nothing:
// it returns ctx and ctx's span as it is (a no-op one), allocating nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return Tracer().Start(ctx, name, opts...)
}

// Fail marks span failed with err (nothing for nil).
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
