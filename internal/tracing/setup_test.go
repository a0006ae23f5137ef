package tracing

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "otlp"}, true},
	} {
		require.Equal(t, c.want, Enabled(func(k string) string { return c.env[k] }), "%v", c.env)
	}
}

func TestSamplerOf(t *testing.T) {
	for _, c := range []struct{ name, arg, want string }{
		{"", "", "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
		{"always_off", "", "AlwaysOffSampler"},
		{"traceidratio", "0.01", "TraceIDRatioBased{0.01}"},
		{"traceidratio", "", "TraceIDRatioBased{1}"},
		{"parentbased_traceidratio", "0.5", "ParentBased{root:TraceIDRatioBased{0.5},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
	} {
		s, err := samplerOf(c.name, c.arg)
		require.NoError(t, err)
		require.Equal(t, c.want, s.Description(), "%s %s", c.name, c.arg)
	}
	for _, c := range [][2]string{{"sometimes", ""}, {"traceidratio", "2"}, {"parentbased_traceidratio", "a lot"}} {
		_, err := samplerOf(c[0], c[1])
		require.Error(t, err, "%v", c)
	}
}
