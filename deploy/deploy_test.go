package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/labelkit/labels/metrics"
)

// The invocations of operations.md that a deployment runs, by workload.
var wantInvocation = map[string]string{
	"Job/labels-migrate":       "api migrate",
	"Deployment/labels-api":    "api",
	"Deployment/labels-worker": "worker",
	"CronJob/labels-reconcile": "reconcile",
}

// documentedVars returns the variables of the configuration table of a
// Markdown page: the first column of the table under "## Configuration".
func documentedVars(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	vars := map[string]bool{}
	in := false
	row := regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]*)` \\|")
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.TrimSpace(line) == "## Configuration"
		case in:
			if m := row.FindStringSubmatch(line); m != nil {
				vars[m[1]] = true
			}
		}
	}
	require.NotEmpty(t, vars, "no configuration table in %s", path)
	return vars
}

// k8sObject is the part of a Kubernetes object this test reads; Spec is
// decoded by kind.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Resources  []string          `yaml:"resources"`
	Spec       yaml.Node         `yaml:"spec"`

	file string
}

func (o *k8sObject) id() string { return o.Kind + "/" + o.Metadata.Name }

type podTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
		RestartPolicy                 string      `yaml:"restartPolicy"`
		Containers                    []container `yaml:"containers"`
		InitContainers                []container `yaml:"initContainers"`
	} `yaml:"spec"`
}

type keyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
			ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// workload is a Deployment, Job or CronJob with its pod template.
type workload struct {
	obj      *k8sObject
	pod      podTemplate
	selector map[string]string // Deployment only
	schedule string            // CronJob only
}

func readManifests(t *testing.T, dir string) []*k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var objs []*k8sObject
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			o := &k8sObject{file: filepath.Base(f)}
			err := dec.Decode(o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			require.NotEmpty(t, o.APIVersion, "%s: a document without apiVersion", f)
			require.NotEmpty(t, o.Kind, "%s: a document without kind", f)
			if o.Kind != "Kustomization" {
				require.NotEmpty(t, o.Metadata.Name, "%s: a %s without a name", f, o.Kind)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

func decodeWorkload(t *testing.T, o *k8sObject) *workload {
	t.Helper()
	w := &workload{obj: o}
	switch o.Kind {
	case "Deployment":
		var spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template podTemplate `yaml:"template"`
		}
		require.NoError(t, o.Spec.Decode(&spec), o.id())
		w.pod, w.selector = spec.Template, spec.Selector.MatchLabels
	case "Job":
		var spec struct {
			Template podTemplate `yaml:"template"`
		}
		require.NoError(t, o.Spec.Decode(&spec), o.id())
		w.pod = spec.Template
	case "CronJob":
		var spec struct {
			Schedule    string `yaml:"schedule"`
			JobTemplate struct {
				Spec struct {
					Template podTemplate `yaml:"template"`
				} `yaml:"spec"`
			} `yaml:"jobTemplate"`
		}
		require.NoError(t, o.Spec.Decode(&spec), o.id())
		w.pod, w.schedule = spec.JobTemplate.Spec.Template, spec.Schedule
	default:
		return nil
	}
	return w
}

// invocation returns the program and arguments a container runs; a
// `sh -c 'exec prog args'` wrapper (for a computed date) is looked through.
func invocation(c container) []string {
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(argv) == 3 && strings.HasSuffix(argv[0], "sh") && argv[1] == "-c" {
		script := strings.Fields(argv[2])
		if len(script) > 1 && script[0] == "exec" {
			return script[1:]
		}
	}
	return argv
}

// subcommand returns the invocation without its flags, the program by its
// base name: "api migrate", "reconcile".
func subcommand(argv []string) string {
	out := []string{filepath.Base(argv[0])}
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") {
			break
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

func duration(t *testing.T, name, v string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "%s=%q", name, v)
	return d
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	documented := documentedVars(t, "../docs/operations.md")
	objs := readManifests(t, "kubernetes")

	byID := map[string]*k8sObject{}
	var kustomization *k8sObject
	files := map[string]bool{}
	for _, o := range objs {
		if o.Kind == "Kustomization" {
			require.Nil(t, kustomization, "one kustomization")
			kustomization = o
			continue
		}
		require.NotContains(t, byID, o.id(), "%s twice", o.id())
		byID[o.id()] = o
		files[o.file] = true
	}
	apiVersions := map[string]string{
		"ConfigMap": "v1", "Secret": "v1", "Service": "v1",
		"Deployment": "apps/v1", "Job": "batch/v1", "CronJob": "batch/v1",
	}
	var ids []string
	for id, o := range byID {
		ids = append(ids, id)
		require.Equal(t, apiVersions[o.Kind], o.APIVersion, "%s in %s", id, o.file)
		require.Equal(t, "labels", o.Metadata.Labels["app.kubernetes.io/part-of"], id)
	}
	slices.Sort(ids)
	require.Equal(t, []string{
		"ConfigMap/labels-config", "CronJob/labels-reconcile", "Deployment/labels-api", "Deployment/labels-worker",
		"Job/labels-migrate", "Secret/labels-secrets", "Service/labels-api",
	}, ids)

	// kubectl apply -k applies every file.
	require.NotNil(t, kustomization)
	require.Equal(t, "kustomize.config.k8s.io/v1beta1", kustomization.APIVersion)
	var listed []string
	for f := range files {
		listed = append(listed, f)
	}
	slices.Sort(listed)
	resources := slices.Sorted(slices.Values(kustomization.Resources))
	require.Equal(t, listed, resources, "kustomization.yaml lists every manifest file, and only those")

	configMaps, secrets := map[string]map[string]string{}, map[string]map[string]string{}
	for _, o := range byID {
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		case "Secret":
			secrets[o.Metadata.Name] = o.StringData
		}
	}
	for name, data := range configMaps {
		for k := range data {
			require.True(t, documented[k], "ConfigMap %s: %s is not documented in docs/operations.md", name, k)
		}
	}
	for name, data := range secrets {
		for k := range data {
			require.True(t, documented[k], "Secret %s: %s is not documented in docs/operations.md", name, k)
		}
	}

	image := ""
	for id, want := range wantInvocation {
		o := byID[id]
		require.NotNil(t, o, id)
		w := decodeWorkload(t, o)
		require.Len(t, w.pod.Spec.Containers, 1, "%s: one container", id)
		require.Empty(t, w.pod.Spec.InitContainers, id)
		c := w.pod.Spec.Containers[0]

		// One image holds every binary.
		require.NotEmpty(t, c.Image, id)
		if image == "" {
			image = c.Image
		}
		require.Equal(t, image, c.Image, "%s: every workload runs the same image", id)
		require.NotContains(t, c.Image, ":latest", id)

		argv := invocation(c)
		require.NotEmpty(t, argv, "%s: the command is named, not left to the image", id)
		require.Equal(t, want, subcommand(argv), "%s runs %q", id, argv)
		if want == "reconcile" {
			require.True(t, slices.Contains(argv, "--date") || slices.Contains(argv, "--invoice"), "%s: reconcile needs --date or --invoice: %q", id, argv)
		}

		// The environment: every variable documented, every reference resolved.
		env := map[string]string{}
		for _, ef := range c.EnvFrom {
			switch {
			case ef.ConfigMapRef != nil:
				data, ok := configMaps[ef.ConfigMapRef.Name]
				require.True(t, ok, "%s: no ConfigMap %s", id, ef.ConfigMapRef.Name)
				for k, v := range data {
					env[k] = v
				}
			case ef.SecretRef != nil:
				data, ok := secrets[ef.SecretRef.Name]
				require.True(t, ok, "%s: no Secret %s", id, ef.SecretRef.Name)
				for k, v := range data {
					env[k] = v
				}
			default:
				t.Fatalf("%s: an envFrom of an unknown kind", id)
			}
		}
		seen := map[string]bool{}
		for _, e := range c.Env {
			require.True(t, documented[e.Name], "%s: %s is not documented in docs/operations.md", id, e.Name)
			require.False(t, seen[e.Name], "%s: %s twice", id, e.Name)
			seen[e.Name] = true
			switch {
			case e.ValueFrom == nil:
				env[e.Name] = e.Value
			case e.ValueFrom.SecretKeyRef != nil:
				ref := e.ValueFrom.SecretKeyRef
				v, ok := secrets[ref.Name][ref.Key]
				require.True(t, ok, "%s: %s refers to a missing secret key %s/%s", id, e.Name, ref.Name, ref.Key)
				env[e.Name] = v
			case e.ValueFrom.ConfigMapKeyRef != nil:
				ref := e.ValueFrom.ConfigMapKeyRef
				v, ok := configMaps[ref.Name][ref.Key]
				require.True(t, ok, "%s: %s refers to a missing ConfigMap key %s/%s", id, e.Name, ref.Name, ref.Key)
				env[e.Name] = v
			default:
				t.Fatalf("%s: %s has a valueFrom of an unknown kind", id, e.Name)
			}
		}
		require.Contains(t, env, "DATABASE_URL", id)

		ports := map[string]int{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for _, p := range []*probe{c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.HTTPGet != nil {
				require.Contains(t, ports, p.HTTPGet.Port, "%s: a probe on an unnamed port", id)
			}
		}

		switch o.Kind {
		case "Deployment":
			for k, v := range w.selector {
				require.Equal(t, v, w.pod.Metadata.Labels[k], "%s: the selector matches the pods", id)
			}
			require.NotNil(t, c.ReadinessProbe, id)
			require.NotNil(t, c.LivenessProbe, id)
			require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, id)
			require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, id)
		case "Job", "CronJob":
			require.Contains(t, []string{"Never", "OnFailure"}, w.pod.Spec.RestartPolicy, id)
		}
		if o.Kind == "CronJob" {
			require.Len(t, strings.Fields(w.schedule), 5, "%s: a cron schedule", id)
		}

		switch want {
		case "api":
			_, port, err := net.SplitHostPort(env["API_ADDR"])
			require.NoError(t, err, "%s: API_ADDR", id)
			require.Equal(t, port, strconv.Itoa(ports["http"]), "%s: API_ADDR listens on the container port", id)
		case "worker":
			timeout, lease := duration(t, "CARRIER_TIMEOUT", env["CARRIER_TIMEOUT"]), duration(t, "LEASE_DURATION", env["LEASE_DURATION"])
			require.Less(t, timeout, lease, "%s: CARRIER_TIMEOUT must be below LEASE_DURATION", id)
			grace := w.pod.Spec.TerminationGracePeriodSeconds
			require.NotNil(t, grace, "%s: terminationGracePeriodSeconds", id)
			require.Greater(t, time.Duration(*grace)*time.Second, timeout+lease,
				"%s: a stop must be given longer than CARRIER_TIMEOUT + LEASE_DURATION, or a carrier call is abandoned", id)

			addr := env["METRICS_ADDR"]
			require.False(t, addr == "" || isLoopback(addr), "%s: METRICS_ADDR=%q must be reachable by Prometheus and the probes", id, addr)
			_, port, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			require.Equal(t, port, strconv.Itoa(ports["metrics"]), "%s: METRICS_ADDR listens on the container port", id)
			if a := env["ADMIN_ADDR"]; a != "" {
				require.True(t, isLoopback(a), "%s: ADMIN_ADDR=%q: keep the River UI on loopback (kubectl port-forward)", id, a)
				require.NotEmpty(t, env["ADMIN_USER"], "%s: ADMIN_ADDR needs ADMIN_USER", id)
				require.NotEmpty(t, env["ADMIN_PASSWORD"], "%s: ADMIN_ADDR needs ADMIN_PASSWORD", id)
			}
		}
	}

	// The Service reaches the API pods on a port they declare.
	var svc struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	}
	require.NoError(t, byID["Service/labels-api"].Spec.Decode(&svc))
	api := decodeWorkload(t, byID["Deployment/labels-api"])
	require.NotEmpty(t, svc.Selector)
	for k, v := range svc.Selector {
		require.Equal(t, v, api.pod.Metadata.Labels[k], "the Service selects the API pods")
	}
	require.Len(t, svc.Ports, 1)
	require.Equal(t, "http", svc.Ports[0].TargetPort)
}

// unit is a systemd unit file: every key's values, by section.
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok && section != "", "%s:%d: not a key=value in a section: %q", path, n, line)
			u[section][k] = append(u[section][k], v)
		}
	}
	require.NoError(t, sc.Err())
	return u
}

// readEnvFile reads NAME=value lines.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	env := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q", path, line)
		require.NotContains(t, env, k, "%s: %s twice", path, k)
		env[k] = v
	}
	return env
}

// execArgv splits an ExecStart line, looking through `/bin/sh -c '...'`.
func execArgv(line string) []string {
	if rest, ok := strings.CutPrefix(line, "/bin/sh -c '"); ok {
		script := strings.Fields(strings.TrimSuffix(rest, "'"))
		if len(script) > 1 && script[0] == "exec" {
			return script[1:]
		}
		return script
	}
	return strings.Fields(line)
}

func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	documented := documentedVars(t, "../docs/operations.md")
	env := readEnvFile(t, "systemd/labels.env")
	for k := range env {
		require.True(t, documented[k], "labels.env: %s is not documented in docs/operations.md", k)
	}
	timeout, lease := duration(t, "CARRIER_TIMEOUT", env["CARRIER_TIMEOUT"]), duration(t, "LEASE_DURATION", env["LEASE_DURATION"])
	require.Less(t, timeout, lease, "labels.env: CARRIER_TIMEOUT must be below LEASE_DURATION")

	want := map[string]string{
		"labels-migrate.service":   "api migrate",
		"labels-api.service":       "api",
		"labels-worker@.service":   "worker",
		"labels-reconcile.service": "reconcile",
	}
	services, err := filepath.Glob("systemd/*.service")
	require.NoError(t, err)
	require.Len(t, services, len(want))
	for _, path := range services {
		name := filepath.Base(path)
		u := readUnit(t, path)
		svc := u["Service"]
		require.NotNil(t, svc, "%s: a [Service] section", name)
		require.Len(t, svc["ExecStart"], 1, name)
		argv := execArgv(svc["ExecStart"][0])
		require.Equal(t, want[name], subcommand(argv), "%s runs %q", name, argv)
		require.Equal(t, "/usr/local/bin/"+argv[0][strings.LastIndex(argv[0], "/")+1:], argv[0], "%s: the installed binary", name)
		if want[name] == "reconcile" {
			require.Contains(t, argv, "--date", name)
		}
		require.Equal(t, []string{"/etc/labels/labels.env"}, svc["EnvironmentFile"], name)
		for _, e := range svc["Environment"] {
			k, _, _ := strings.Cut(e, "=")
			require.True(t, documented[k], "%s: %s is not documented in docs/operations.md", name, k)
		}
		if want[name] == "worker" {
			stop, err := strconv.Atoi(svc["TimeoutStopSec"][0])
			require.NoError(t, err)
			require.Greater(t, time.Duration(stop)*time.Second, timeout+lease,
				"%s: TimeoutStopSec must exceed CARRIER_TIMEOUT + LEASE_DURATION, or a carrier call is abandoned", name)
			require.Equal(t, []string{"SIGTERM"}, svc["KillSignal"], name)
		}
	}

	// The admin drop-in of worker 1: the River UI on loopback, with credentials.
	admin := readUnit(t, "systemd/labels-worker@1.service.d/admin.conf")
	require.Len(t, admin["Service"]["Environment"], 1)
	k, addr, _ := strings.Cut(admin["Service"]["Environment"][0], "=")
	require.Equal(t, "ADMIN_ADDR", k)
	require.True(t, isLoopback(addr), addr)
	require.NotEmpty(t, env["ADMIN_USER"])
	require.NotEmpty(t, env["ADMIN_PASSWORD"])

	timer := readUnit(t, "systemd/labels-reconcile.timer")
	require.NotEmpty(t, timer["Timer"]["OnCalendar"])
	require.FileExists(t, "systemd/labels-reconcile.service", "the timer starts the service of its name")
}

// contractVars are the variables of the operators' contract, which outside
// tests and deployments set by these names: docs/operations.md states the
// contract, so it must keep documenting every one of them.
var contractVars = []string{
	"DATABASE_URL", "API_ADDR", "CARRIER_URL", "CARRIER_TOKEN", "CARRIER_TIMEOUT",
	"LEASE_DURATION", "WORKER_CONCURRENCY", "MAX_ATTEMPTS", "RETRY_BASE", "RETRY_MAX",
	"KEY_RETENTION", "SWEEP_INTERVAL", "METRICS_ADDR", "LOG_LEVEL", "LOG_FORMAT",
	"CARRIER_ADDR",
}

// docs/operations.md documents every variable of the contract.
func TestRunbookCoversTheContract(t *testing.T) {
	t.Parallel()
	documented := documentedVars(t, "../docs/operations.md")
	for _, v := range contractVars {
		require.True(t, documented[v], "docs/operations.md does not document %s of the contract", v)
	}
}

// Every metric the runbook names exists.
func TestRunbookNamesRealMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	ch := make(chan *prometheus.Desc, 100)
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if c, ok := v.Field(i).Interface().(prometheus.Collector); ok && v.Type().Field(i).Name != "Registry" {
			c.Describe(ch)
		}
	}
	metrics.NewStoreCollector(nil).Describe(ch)
	w := metrics.NewWebhooks(nil)
	for _, c := range []prometheus.Collector{w.Deliveries, w.Attempts, w.AttemptDuration, w.EndpointsDisabled, metrics.NewWebhookCollector(nil)} {
		c.Describe(ch)
	}
	close(ch)
	known := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		known[fq.FindStringSubmatch(d.String())[1]] = true
	}
	b, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	names := regexp.MustCompile(`\blabels_[a-z_]+[a-z]\b`).FindAllString(string(b), -1)
	require.NotEmpty(t, names)
	for _, n := range names {
		require.True(t, known[n], "docs/operations.md names %s, which no collector exports", n)
	}
}
