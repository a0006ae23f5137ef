package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/labelkit/labels/metrics"
)

// The invocations of operations.md that a deployment runs, by workload.
var wantInvocation = map[string]string{
	"CronJob/labels-migrate":   "api migrate",
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
	// SecretGenerator is a Kustomization's: Secrets made from env files.
	SecretGenerator []struct {
		Name  string   `yaml:"name"`
		Envs  []string `yaml:"envs"`
		Files []string `yaml:"files"`
	} `yaml:"secretGenerator"`
	Spec yaml.Node `yaml:"spec"`

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
	Name     string `yaml:"name"`
	Key      string `yaml:"key"`
	Optional bool   `yaml:"optional"`
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
	TCPSocket *struct {
		Port string `yaml:"port"`
	} `yaml:"tcpSocket"`
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

// containers returns the pod's containers, init containers included.
func (w *workload) containers() []container {
	return slices.Concat(w.pod.Spec.Containers, w.pod.Spec.InitContainers)
}

// invocation returns the program and arguments a container runs.
func invocation(c container) []string {
	return append(append([]string(nil), c.Command...), c.Args...)
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
		"PodDisruptionBudget": "policy/v1", "NetworkPolicy": "networking.k8s.io/v1",
	}
	var ids []string
	for id, o := range byID {
		ids = append(ids, id)
		require.Equal(t, apiVersions[o.Kind], o.APIVersion, "%s in %s", id, o.file)
		require.Equal(t, "labels", o.Metadata.Labels["app.kubernetes.io/part-of"], id)
	}
	slices.Sort(ids)
	require.Equal(t, []string{
		"ConfigMap/labels-config", "ConfigMap/labels-pgbouncer", "CronJob/labels-migrate", "CronJob/labels-reconcile",
		"Deployment/labels-api", "Deployment/labels-pgbouncer", "Deployment/labels-worker",
		"NetworkPolicy/labels-api", "NetworkPolicy/labels-default-deny", "NetworkPolicy/labels-dns",
		"NetworkPolicy/labels-migrate", "NetworkPolicy/labels-pgbouncer", "NetworkPolicy/labels-reconcile",
		"NetworkPolicy/labels-worker",
		"PodDisruptionBudget/labels-api", "PodDisruptionBudget/labels-pgbouncer", "PodDisruptionBudget/labels-worker",
		"Service/labels-api", "Service/labels-pgbouncer",
	}, ids)

	// The migration is a suspended CronJob: each run is a Job of its own
	// name (kubectl create job --from=cronjob/labels-migrate NAME), never
	// one scheduled, and never two at once.
	var migrate struct {
		Suspend           bool   `yaml:"suspend"`
		ConcurrencyPolicy string `yaml:"concurrencyPolicy"`
	}
	require.NoError(t, byID["CronJob/labels-migrate"].Spec.Decode(&migrate))
	require.True(t, migrate.Suspend, "CronJob/labels-migrate runs only when an operator creates a Job from it")
	require.Equal(t, "Forbid", migrate.ConcurrencyPolicy)

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
			t.Fatalf("%s in %s: secrets come from the secretGenerator, never from a committed manifest", o.id(), o.file)
		}
	}
	// The Secrets are generated from env files the operator creates: each
	// has a committed .example with every key, the file itself is ignored by
	// git, and nothing kubectl apply -k reads carries a placeholder.
	require.NotEmpty(t, kustomization.SecretGenerator)
	gitignore, err := os.ReadFile("../.gitignore")
	require.NoError(t, err)
	for _, g := range kustomization.SecretGenerator {
		if len(g.Files) > 0 {
			// A file secret (PgBouncer's auth_file): the operator's own file,
			// ignored by git, with a committed .example.
			for _, f := range g.Files {
				_, src, _ := strings.Cut(f, "=")
				require.Contains(t, strings.Split(string(gitignore), "\n"), "deploy/kubernetes/"+src, "%s is the operator's, never committed", src)
				_, err := os.Stat(filepath.Join("kubernetes", src+".example"))
				require.NoError(t, err, "%s: a committed example", src)
			}
			secrets[g.Name] = map[string]string{}
			continue
		}
		require.Len(t, g.Envs, 1, g.Name)
		require.Contains(t, strings.Split(string(gitignore), "\n"), "deploy/kubernetes/"+g.Envs[0], "%s is the operator's, never committed", g.Envs[0])
		example := readEnvFile(t, filepath.Join("kubernetes", g.Envs[0]+".example"))
		require.NotEmpty(t, example, g.Name)
		secrets[g.Name] = example
		for k := range example {
			require.True(t, documented[k], "Secret %s: %s is not documented in docs/operations.md", g.Name, k)
		}
	}
	for _, f := range append(kustomization.Resources, "kustomization.yaml") {
		b, err := os.ReadFile(filepath.Join("kubernetes", f))
		require.NoError(t, err)
		require.NotContains(t, string(b), "CHANGE-ME", "%s: kubectl apply -k must not apply a placeholder", f)
		require.NotRegexp(t, `\bsecret\.yaml\b`, string(b), "%s names a file that does not exist", f)
	}
	// The services' configuration is variables of operations.md; the
	// pooler's is its own files.
	isPooler := func(name string) bool { return name == "labels-pgbouncer" }
	for name, data := range configMaps {
		if isPooler(name) {
			continue
		}
		for k := range data {
			require.True(t, documented[k], "ConfigMap %s: %s is not documented in docs/operations.md", name, k)
		}
	}

	image := ""
	envs := map[string]map[string]string{}
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

		// The environment: every variable documented, every reference
		// resolved (an optional one may be absent), and which came from a
		// Secret.
		env := map[string]string{}
		fromSecret := map[string]bool{}
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
					env[k], fromSecret[k] = v, true
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
				if !ok && ref.Optional {
					delete(env, e.Name)
					break
				}
				require.True(t, ok, "%s: %s refers to a missing secret key %s/%s", id, e.Name, ref.Name, ref.Key)
				env[e.Name], fromSecret[e.Name] = v, true
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
		envs[id] = env
		// Webhook signing secrets are sealed at rest: the processes that
		// store (api) or read (worker) them get WEBHOOK_SECRET_KEY from the
		// Secret, and none is told it is a development setup.
		if want == "api" || want == "worker" {
			require.True(t, fromSecret["WEBHOOK_SECRET_KEY"], "%s: WEBHOOK_SECRET_KEY from a Secret", id)
			require.True(t, fromSecret["WEBHOOK_SECRET_KEY_OLD"] || env["WEBHOOK_SECRET_KEY_OLD"] == "", "%s: WEBHOOK_SECRET_KEY_OLD only from a Secret", id)
		}
		require.NotContains(t, env, "WEBHOOK_ALLOW_UNSEALED", "%s: a deployment never stores secrets raw", id)

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
			// /metrics on a port of its own, which the Service leaves out.
			addr := env["API_METRICS_ADDR"]
			require.False(t, addr == "" || isLoopback(addr), "%s: API_METRICS_ADDR=%q must be reachable by Prometheus", id, addr)
			_, port, err = net.SplitHostPort(addr)
			require.NoError(t, err, "%s: API_METRICS_ADDR", id)
			require.Equal(t, port, strconv.Itoa(ports["metrics"]), "%s: API_METRICS_ADDR listens on the container port", id)
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
	require.Len(t, svc.Ports, 1, "the Service exposes the API port alone, not /metrics's")
	require.Equal(t, "http", svc.Ports[0].TargetPort)

	checkPooler(t, byID, configMaps, envs)
}

// checkPooler checks the PgBouncer of pgbouncer.yaml and the wiring of the
// services to it: transaction mode with nothing to reset, its Service on its
// port, in front of the server of DATABASE_DIRECT_URL; every service's
// DATABASE_URL is the pooler, and the processes that LISTEN or migrate (the
// API, the worker, the migration Job) have DATABASE_DIRECT_URL, straight to
// PostgreSQL.
func checkPooler(t *testing.T, byID map[string]*k8sObject, configMaps map[string]map[string]string, envs map[string]map[string]string) {
	t.Helper()
	ini := parseINI(t, configMaps["labels-pgbouncer"]["pgbouncer.ini"])
	pgb := ini["pgbouncer"]
	require.Equal(t, "transaction", pgb["pool_mode"])
	require.Contains(t, pgb, "server_reset_query")
	require.Empty(t, pgb["server_reset_query"])
	require.NotEmpty(t, pgb["idle_transaction_timeout"], "the pooler ends a client idle in a transaction (the services' own timeout is a startup setting it refuses)")
	require.Contains(t, pgb["ignore_startup_parameters"], "extra_float_digits")

	d := decodeWorkload(t, byID["Deployment/labels-pgbouncer"])
	require.Len(t, d.pod.Spec.Containers, 1)
	c := d.pod.Spec.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	require.Equal(t, pgb["listen_port"], strconv.Itoa(ports["postgres"]), "PgBouncer listens on its container port")
	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.ReadinessProbe.TCPSocket)
	require.Contains(t, ports, c.ReadinessProbe.TCPSocket.Port)
	for k, v := range d.selector {
		require.Equal(t, v, d.pod.Metadata.Labels[k], "the selector matches the pods")
	}
	var svc struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	}
	require.NoError(t, byID["Service/labels-pgbouncer"].Spec.Decode(&svc))
	for k, v := range svc.Selector {
		require.Equal(t, v, d.pod.Metadata.Labels[k], "the Service selects the PgBouncer pods")
	}
	require.Len(t, svc.Ports, 1)
	require.Equal(t, "postgres", svc.Ports[0].TargetPort)
	poolerAddr := net.JoinHostPort("labels-pgbouncer", strconv.Itoa(svc.Ports[0].Port))

	for id, env := range envs {
		u, err := url.Parse(env["DATABASE_URL"])
		require.NoError(t, err, id)
		require.Equal(t, poolerAddr, u.Host, "%s: DATABASE_URL goes through PgBouncer", id)
		db := strings.TrimPrefix(u.Path, "/")
		entry, ok := ini["databases"][db]
		require.True(t, ok, "%s: PgBouncer serves database %s", id, db)
		switch wantInvocation[id] {
		case "api", "worker", "api migrate":
			direct, err := url.Parse(env["DATABASE_DIRECT_URL"])
			require.NoError(t, err, id)
			require.NotEqual(t, poolerAddr, direct.Host, "%s: DATABASE_DIRECT_URL goes straight to PostgreSQL", id)
			require.Contains(t, entry, "host="+direct.Hostname(), "PgBouncer is in front of the server of DATABASE_DIRECT_URL")
			require.Contains(t, entry, "port="+direct.Port())
		default:
			// reconcile neither listens nor migrates; it only needs to know.
			require.Equal(t, "true", env["DATABASE_POOLED"], id)
		}
	}
}

// parseINI reads PgBouncer's ini format: sections of key = value lines.
func parseINI(t *testing.T, s string) map[string]map[string]string {
	t.Helper()
	require.NotEmpty(t, s)
	out := map[string]map[string]string{}
	section := ""
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			out[section] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok && section != "", "pgbouncer.ini: %q", line)
			out[section][strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
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

// labelsUnits returns the service units of the label service (not those of
// pg_auto_failover, which run pg_autoctl).
func labelsUnits(t *testing.T) []string {
	t.Helper()
	units, err := filepath.Glob("systemd/labels-*.service")
	require.NoError(t, err)
	require.NotEmpty(t, units)
	return units
}

// execArgv splits an ExecStart line, looking through `/bin/sh -c '...'`.
func execArgv(line string) []string {
	return strings.Fields(line)
}

func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	documented := documentedVars(t, "../docs/operations.md")
	env := readEnvFile(t, "systemd/labels.env")
	for k := range env {
		require.True(t, documented[k], "labels.env: %s is not documented in docs/operations.md", k)
	}
	// The webhook signing secrets are sealed at rest: the key is in the
	// root-only file every unit reads, and no unit stores them raw.
	require.NotEmpty(t, env["WEBHOOK_SECRET_KEY"], "labels.env: WEBHOOK_SECRET_KEY")
	require.NotContains(t, env, "WEBHOOK_ALLOW_UNSEALED")
	timeout, lease := duration(t, "CARRIER_TIMEOUT", env["CARRIER_TIMEOUT"]), duration(t, "LEASE_DURATION", env["LEASE_DURATION"])
	require.Less(t, timeout, lease, "labels.env: CARRIER_TIMEOUT must be below LEASE_DURATION")

	want := map[string]string{
		"labels-migrate.service":   "api migrate",
		"labels-api.service":       "api",
		"labels-worker@.service":   "worker",
		"labels-reconcile.service": "reconcile",
	}
	services := labelsUnits(t)
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
			require.NotEqual(t, "WEBHOOK_ALLOW_UNSEALED", k, name)
			require.NotEqual(t, "WEBHOOK_SECRET_KEY", k, "%s: the key belongs in labels.env (root-only), not in a unit", name)
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
	known := map[string]bool{}
	for _, n := range slices.Concat(metrics.Names(metrics.API), metrics.Names(metrics.Worker)) {
		known[n] = true
	}
	b, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	names := regexp.MustCompile(`\blabels_[a-z_]+[a-z]\b`).FindAllString(string(b), -1)
	require.NotEmpty(t, names)
	for _, n := range names {
		require.True(t, known[n], "docs/operations.md names %s, which no collector exports", n)
	}
}

// The metrics table of docs/operations.md lists every metric once, with the
// processes that export it ("api, worker" for both), as package metrics
// registers them.
func TestRunbookMetricsTableMatchesTheProcesses(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	row := regexp.MustCompile("^\\| `(labels_[a-z_]+)` \\| ([a-z, ]+) \\|")
	documented := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			require.NotContains(t, documented, m[1], "%s listed twice", m[1])
			documented[m[1]] = m[2]
		}
	}
	exported := map[string]string{}
	for _, p := range []metrics.Process{metrics.API, metrics.Worker} {
		for _, n := range metrics.Names(p) {
			if exported[n] != "" {
				exported[n] += ", "
			}
			exported[n] += string(p)
		}
	}
	require.Equal(t, exported, documented, "docs/operations.md's metrics table (metric, exported by) against package metrics")
}

// systemd/README.md installs every file of systemd/ (an `install` line names
// it), enables every unit that has an [Install] section in the order the
// units depend on (migrations, API, workers, the timer), and quotes the
// addresses the units set. Every file of systemd/ it names exists.
func TestSystemdHowTo(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("systemd/README.md")
	require.NoError(t, err)
	howto := string(b)
	commands := shCommands(t, "systemd/README.md")

	var files []string
	require.NoError(t, filepath.WalkDir("systemd", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path != filepath.Join("systemd", "README.md") {
			files = append(files, path)
		}
		return err
	}))
	require.NotEmpty(t, files)
	installed := func(path string) bool {
		for _, c := range commands {
			if strings.HasPrefix(c, "install ") && slices.Contains(strings.Fields(c), "deploy/"+filepath.ToSlash(path)) {
				return true
			}
		}
		return false
	}
	for _, f := range files {
		require.True(t, installed(f), "systemd/README.md installs no deploy/%s", f)
	}
	for _, m := range regexp.MustCompile(`deploy/(systemd/[A-Za-z0-9@._/-]+[A-Za-z0-9])`).FindAllStringSubmatch(howto, -1) {
		require.FileExists(t, m[1], "systemd/README.md names %s", m[1])
	}

	// The units with an [Install] section are enabled, in dependency order;
	// the template as instances.
	enabled := []string{}
	for _, c := range commands {
		if rest, ok := strings.CutPrefix(c, "systemctl enable --now "); ok {
			enabled = append(enabled, strings.Fields(rest)...)
		}
	}
	position := func(unit string) int {
		for i, e := range enabled {
			if e == unit || strings.HasSuffix(unit, "@.service") && strings.HasPrefix(e, strings.TrimSuffix(unit, ".service")) && strings.HasSuffix(e, ".service") {
				return i
			}
		}
		return -1
	}
	order := []string{"labels-migrate.service", "labels-api.service", "labels-worker@.service", "labels-reconcile.timer"}
	last := -1
	for _, unit := range order {
		p := position(unit)
		require.GreaterOrEqual(t, p, 0, "systemd/README.md never enables %s", unit)
		require.Greater(t, p, last, "systemd/README.md enables %s out of order (%v)", unit, enabled)
		last = p
	}
	units, err := filepath.Glob("systemd/*.*")
	require.NoError(t, err)
	for _, path := range units {
		if ext := filepath.Ext(path); ext != ".service" && ext != ".timer" {
			continue
		}
		if readUnit(t, path)["Install"] != nil {
			require.True(t, slices.Contains(order, filepath.Base(path)) || failoverUnits[filepath.Base(path)] != "" && position(filepath.Base(path)) >= 0,
				"%s has an [Install] section the how-to does not enable", path)
		}
	}

	// The addresses it checks are the units'.
	for _, e := range readUnit(t, "systemd/labels-api.service")["Service"]["Environment"] {
		if addr, ok := strings.CutPrefix(e, "API_ADDR="); ok {
			require.Contains(t, howto, "curl -s http://"+addr+"/readyz")
		}
	}
	for _, e := range readUnit(t, "systemd/labels-worker@.service")["Service"]["Environment"] {
		if addr, ok := strings.CutPrefix(e, "METRICS_ADDR="); ok {
			require.Contains(t, howto, "curl -s http://"+strings.ReplaceAll(addr, "%i", "1")+"/readyz", "worker 1's METRICS_ADDR")
		}
	}
}
