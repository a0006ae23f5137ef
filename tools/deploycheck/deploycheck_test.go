package deploycheck

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	partOf    = "app.kubernetes.io/part-of"
	component = "app.kubernetes.io/component"
)

// Every reference of every pod resolves to a rendered object (under the
// name kustomize generated for it), and every key it reads is there.
func TestReferencesResolve(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, r *rendered) {
		ws := r.workloads()
		require.NotEmpty(t, ws)
		generated := 0
		for _, w := range ws {
			refs := w.refs()
			require.NotEmpty(t, refs, w.id())
			for _, ref := range refs {
				o := r.byID[ref.kind+"/"+ref.name]
				if o == nil && ref.optional {
					continue
				}
				require.NotNil(t, o, "%s (%s) refers to %s/%s, which kubectl apply -k does not create", w.id(), ref.where, ref.kind, ref.name)
				if ref.key != "" && !ref.optional {
					require.True(t, o.keys()[ref.key], "%s (%s) reads key %s, which %s lacks", w.id(), ref.where, ref.key, o.id())
				}
				if ref.kind == "Secret" && strings.HasPrefix(ref.name, "labels-secrets-") {
					generated++
				}
			}
		}
		require.NotZero(t, generated, "the workloads read the generated Secret under its hashed name")

		// A URL of the environment whose host is a bare name (or NAME.NAMESPACE…)
		// is a Service of the kustomization, with that port; a StatefulSet's
		// serviceName too.
		services := 0
		for _, w := range ws {
			if name := str(get(w.m, "spec", "serviceName")); name != "" {
				require.NotNil(t, r.byID["Service/"+name], "%s: serviceName %s", w.id(), name)
			}
			for _, c := range w.containers() {
				for k, v := range r.env(t, c) {
					u, err := url.Parse(v)
					if err != nil || u.Scheme == "" || u.Host == "" || strings.Contains(u.Hostname(), ".") && !strings.HasSuffix(u.Hostname(), ".svc.cluster.local") {
						continue
					}
					host, port := portOf(t, v)
					svc := r.byID["Service/"+strings.Split(host, ".")[0]]
					require.NotNil(t, svc, "%s: %s names the Service %s, which kubectl apply -k does not create", w.id(), k, host)
					var ports []int
					for _, p := range list(get(svc.m, "spec", "ports")) {
						ports = append(ports, toInt(get(p, "port")))
					}
					require.Contains(t, ports, port, "%s: %s: %s has no port %d", w.id(), k, svc.id(), port)
					services++
				}
			}
		}
		require.NotZero(t, services, "the services reach PgBouncer through its Service")
	})
}

// kustomizationImage returns the image the kustomization sets: name and tag.
func kustomizationImage(t *testing.T, r *rendered) (name, tag string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(manifestsDir, "kustomization.yaml"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^images:\n  - name: (\S+)\n    newTag: (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "kustomization.yaml sets the image's tag under images")
	return string(m[1]), string(m[2])
}

// projectImage reports whether a workload runs the project's image (all but
// PgBouncer).
func projectImage(w workload) bool { return w.podLabels()[component] != "pgbouncer" }

// Every container names a pinned image; the project's workloads all run the
// image kustomization.yaml sets, and changing its tag there moves every one
// of them, the migration too.
func TestImages(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, r *rendered) {
		name, tag := kustomizationImage(t, r)
		project := 0
		for _, w := range r.workloads() {
			for _, c := range w.containers() {
				image := str(c["image"])
				require.NotEmpty(t, image, "%s: container %s names no image", w.id(), c["name"])
				last := image[strings.LastIndex(image, "/")+1:]
				require.True(t, strings.Contains(last, ":") || strings.Contains(image, "@sha256:"), "%s: %s has no tag", w.id(), image)
				require.False(t, strings.HasSuffix(image, ":latest"), "%s: %s", w.id(), image)
				if projectImage(w) {
					project++
					require.Equal(t, name+":"+tag, image, "%s runs the kustomization's image", w.id())
				}
			}
		}
		require.GreaterOrEqual(t, project, 4, "api, worker, migrate, reconcile")

	})
	r := render(t, nil)
	name, tag := kustomizationImage(t, r)
	// An upgrade: the new tag, set where the instructions say.
	const next = "v99.1.0"
	kustomization := filepath.Join(kustomizeDir, "kustomization.yaml")
	up := render(t, func(fs filesys.FileSystem) {
		b, err := fs.ReadFile(kustomization)
		require.NoError(t, err)
		edited := strings.Replace(string(b), "newTag: "+tag, "newTag: "+next, 1)
		require.NotEqual(t, string(b), edited)
		require.NoError(t, fs.WriteFile(kustomization, []byte(edited)))
	})
	for _, w := range up.workloads() {
		if projectImage(w) {
			for _, c := range w.containers() {
				require.Equal(t, name+":"+next, str(c["image"]), "%s follows the kustomization's tag", w.id())
			}
		}
	}
}

// Every pod meets Pod Security "restricted": non-root, RuntimeDefault
// seccomp, no privilege escalation, every capability dropped, no host
// namespaces, only the volume types it allows.
func TestPodSecurityRestricted(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, r *rendered) {
		allowedVolumes := []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
		for _, w := range r.workloads() {
			spec := w.spec()
			for _, host := range []string{"hostNetwork", "hostPID", "hostIPC"} {
				require.NotEqual(t, true, spec[host], "%s: %s", w.id(), host)
			}
			podSC := get(spec, "securityContext")
			require.Equal(t, true, get(podSC, "runAsNonRoot"), "%s: runAsNonRoot", w.id())
			if uid := get(podSC, "runAsUser"); uid != nil {
				require.NotZero(t, toInt(uid), "%s: runAsUser 0", w.id())
			}
			podSeccomp := str(get(podSC, "seccompProfile", "type"))
			for _, v := range list(spec["volumes"]) {
				vm := v.(map[string]any)
				kinds := 0
				for k := range vm {
					if k == "name" {
						continue
					}
					kinds++
					require.Contains(t, allowedVolumes, k, "%s: volume %s", w.id(), vm["name"])
				}
				require.Equal(t, 1, kinds, "%s: volume %s", w.id(), vm["name"])
			}
			for _, c := range w.containers() {
				where := w.id() + " container " + str(c["name"])
				sc := get(c, "securityContext")
				require.Equal(t, false, get(sc, "allowPrivilegeEscalation"), "%s: allowPrivilegeEscalation false", where)
				require.NotEqual(t, true, get(sc, "privileged"), where)
				var drop []string
				for _, d := range list(get(sc, "capabilities", "drop")) {
					drop = append(drop, str(d))
				}
				require.Contains(t, drop, "ALL", "%s: capabilities drop ALL", where)
				for _, a := range list(get(sc, "capabilities", "add")) {
					require.Equal(t, "NET_BIND_SERVICE", str(a), "%s: restricted adds no capability but NET_BIND_SERVICE", where)
				}
				if v := get(sc, "runAsNonRoot"); v != nil {
					require.Equal(t, true, v, where)
				}
				if uid := get(sc, "runAsUser"); uid != nil {
					require.NotZero(t, toInt(uid), where)
				}
				seccomp := str(get(sc, "seccompProfile", "type"))
				if seccomp == "" {
					seccomp = podSeccomp
				}
				require.Contains(t, []string{"RuntimeDefault", "Localhost"}, seccomp, "%s: seccompProfile", where)
			}
		}
	})
}

// Every Service selects pods and reaches a port they declare; every
// Deployment has one PodDisruptionBudget that still lets a drain evict.
func TestServicesAndBudgets(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, r *rendered) {
		ws := r.workloads()
		services := 0
		for _, o := range r.objs {
			if o.kind != "Service" {
				continue
			}
			services++
			sel := stringMap(get(o.m, "spec", "selector"))
			var selected []workload
			for _, w := range ws {
				if subset(sel, w.podLabels()) {
					selected = append(selected, w)
				}
			}
			require.NotEmpty(t, selected, "%s selects no pods", o.id())
			for _, p := range list(get(o.m, "spec", "ports")) {
				target := get(p, "targetPort")
				for _, w := range selected {
					ports := w.containerPorts()
					if name, ok := target.(string); ok {
						require.Contains(t, ports, name, "%s: targetPort %s on %s", o.id(), name, w.id())
					} else {
						require.Contains(t, valuesOf(ports), toInt(target), "%s: targetPort %v on %s", o.id(), target, w.id())
					}
				}
			}
		}
		require.NotZero(t, services)

		for _, w := range ws {
			if w.kind != "Deployment" {
				continue
			}
			replicas := toInt(get(w.m, "spec", "replicas"))
			var budgets []*obj
			for _, o := range r.objs {
				if o.kind == "PodDisruptionBudget" && matches(t, get(o.m, "spec", "selector"), w.podLabels()) {
					budgets = append(budgets, o)
				}
			}
			require.Len(t, budgets, 1, "%s: one PodDisruptionBudget", w.id())
			spec := budgets[0].m["spec"]
			if v := get(spec, "minAvailable"); v != nil {
				require.Less(t, toInt(v), replicas, "%s: minAvailable %v of %d replicas blocks every drain", budgets[0].id(), v, replicas)
			} else {
				require.GreaterOrEqual(t, toInt(get(spec, "maxUnavailable")), 1, budgets[0].id())
			}
		}
	})
}

func valuesOf(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// portOf returns a URL's port, its scheme's when it names none.
func portOf(t *testing.T, raw string) (host string, port int) {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err, raw)
	p := u.Port()
	if p == "" {
		p = map[string]string{"https": "443", "http": "80", "postgres": "5432", "postgresql": "5432"}[u.Scheme]
	}
	n, err := strconv.Atoi(p)
	require.NoError(t, err, raw)
	return u.Hostname(), n
}

// The NetworkPolicies: every pod isolated both ways; the API's port open to
// all and its metrics only to Prometheus; a worker open to nothing but
// Prometheus on its metrics port; each process reaching DNS, PgBouncer
// (through the Service of its DATABASE_URL), PostgreSQL (the port of
// DATABASE_DIRECT_URL and of PgBouncer's [databases]), the carrier
// (CARRIER_URL) and the webhooks (HTTPS) as it needs, and nothing else.
func TestNetworkPolicies(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, r *rendered) {
		monitoring := map[string]string{"kubernetes.io/metadata.name": "monitoring"}
		kubeSystem := map[string]string{"kubernetes.io/metadata.name": "kube-system"}
		dns := podIn(kubeSystem, map[string]string{"k8s-app": "kube-dns"})
		prometheus := podIn(monitoring, map[string]string{"app.kubernetes.io/name": "prometheus"})
		tcp := func(port int) conn { return conn{port: port, protocol: "TCP"} }

		byComponent := map[string]workload{}
		for _, w := range r.workloads() {
			byComponent[w.podLabels()[component]] = w
		}
		for _, c := range []string{"api", "worker", "migrate", "reconcile", "pgbouncer"} {
			require.Contains(t, byComponent, c)
		}
		svcPods := func(host string) workload {
			t.Helper()
			svc := r.byID["Service/"+strings.Split(host, ".")[0]]
			require.NotNil(t, svc, "no Service %s", host)
			for _, w := range r.workloads() {
				if subset(stringMap(get(svc.m, "spec", "selector")), w.podLabels()) {
					return w
				}
			}
			t.Fatalf("%s selects no pods", svc.id())
			return workload{}
		}
		servicePort := func(host string, port int) int {
			t.Helper()
			svc := r.byID["Service/"+strings.Split(host, ".")[0]]
			for _, p := range list(get(svc.m, "spec", "ports")) {
				if toInt(get(p, "port")) == port {
					if name, ok := get(p, "targetPort").(string); ok {
						return svcPods(host).containerPorts()[name]
					}
					return toInt(get(p, "targetPort"))
				}
			}
			t.Fatalf("%s has no port %d", svc.id(), port)
			return 0
		}

		for name, w := range byComponent {
			labels, ports := w.podLabels(), w.containerPorts()
			self := podIn(ownNamespace, labels)
			// Isolated: an arbitrary port, in and out, is shut.
			require.False(t, r.allowed(t, "ingress", labels, ports, outside, tcp(2222)), "%s: isolated for ingress", name)
			require.False(t, r.allowed(t, "egress", labels, ports, outside, tcp(2222)), "%s: isolated for egress", name)
			for _, proto := range []string{"UDP", "TCP"} {
				require.True(t, r.allowed(t, "egress", labels, ports, dns, conn{port: 53, protocol: proto}), "%s: DNS over %s", name, proto)
			}
			if name == "pgbouncer" {
				continue
			}
			c := w.containers()[0]
			env := r.env(t, c)

			// DATABASE_URL through PgBouncer's Service: out of this pod, into PgBouncer's.
			host, port := portOf(t, env["DATABASE_URL"])
			pgb := svcPods(host)
			target := servicePort(host, port)
			require.True(t, r.allowed(t, "egress", labels, ports, podIn(ownNamespace, pgb.podLabels()), tcp(target)), "%s: out to PgBouncer", name)
			require.True(t, r.allowed(t, "ingress", pgb.podLabels(), pgb.containerPorts(), self, tcp(target)), "%s: into PgBouncer", name)
			if direct := env["DATABASE_DIRECT_URL"]; direct != "" {
				_, port := portOf(t, direct)
				require.True(t, r.allowed(t, "egress", labels, ports, outside, tcp(port)), "%s: out to PostgreSQL on %d", name, port)
			}
			if env["CARRIER_TOKEN"] != "" {
				_, port := portOf(t, env["CARRIER_URL"])
				require.True(t, r.allowed(t, "egress", labels, ports, outside, tcp(port)), "%s: out to the carrier on %d", name, port)
			} else {
				require.False(t, r.allowed(t, "egress", labels, ports, outside, tcp(443)), "%s calls nothing over HTTPS", name)
			}

			switch name {
			case "api":
				require.True(t, r.allowed(t, "ingress", labels, ports, outside, tcp(ports["http"])), "the API port is open")
				require.False(t, r.allowed(t, "ingress", labels, ports, outside, tcp(ports["metrics"])), "the API's /metrics is not open to all")
				require.True(t, r.allowed(t, "ingress", labels, ports, prometheus, tcp(ports["metrics"])), "Prometheus scrapes the API")
				_, metricsPort, err := net.SplitHostPort(env["API_METRICS_ADDR"])
				require.NoError(t, err)
				require.Equal(t, strconv.Itoa(ports["metrics"]), metricsPort)
				for _, p := range list(get(r.byID["Service/labels-api"].m, "spec", "ports")) {
					require.NotEqual(t, "metrics", get(p, "targetPort"), "the Service leaves /metrics out")
					require.NotEqual(t, ports["metrics"], toInt(get(p, "targetPort")), "the Service leaves /metrics out")
				}
			case "worker":
				for pname, p := range ports {
					require.False(t, r.allowed(t, "ingress", labels, ports, outside, tcp(p)), "worker: %s shut to all", pname)
					require.False(t, r.allowed(t, "ingress", labels, ports, podIn(ownNamespace, byComponent["api"].podLabels()), tcp(p)), "worker: %s shut to the API", pname)
				}
				require.True(t, r.allowed(t, "ingress", labels, ports, prometheus, tcp(ports["metrics"])), "Prometheus scrapes the workers")
				require.True(t, r.allowed(t, "egress", labels, ports, outside, tcp(443)), "worker: out to the webhooks (HTTPS)")
			default:
				for pname, p := range ports {
					require.False(t, r.allowed(t, "ingress", labels, ports, prometheus, tcp(p)), "%s: %s shut", name, pname)
				}
			}
		}

		// PgBouncer reaches the servers of its [databases].
		pgb := byComponent["pgbouncer"]
		ini := ""
		for _, o := range r.objs {
			if o.kind == "ConfigMap" && o.keys()["pgbouncer.ini"] {
				ini = o.value(t, "pgbouncer.ini")
			}
		}
		servers := regexp.MustCompile(`(?m)^\w+ = host=\S+ port=(\d+)`).FindAllStringSubmatch(ini, -1)
		require.NotEmpty(t, servers, "pgbouncer.ini: [databases]")
		for _, s := range servers {
			port, _ := strconv.Atoi(s[1])
			require.True(t, r.allowed(t, "egress", pgb.podLabels(), pgb.containerPorts(), outside, tcp(port)), "PgBouncer: out to PostgreSQL on %d", port)
		}
		require.False(t, r.allowed(t, "ingress", pgb.podLabels(), pgb.containerPorts(), outside, tcp(pgb.containerPorts()["postgres"])), "PgBouncer is shut to the world")
	})
}

// The upgrade of docs/operations.md: its first apply selects the migration
// with everything the migration reads and neither the API nor the workers;
// the Job it creates comes from the suspended CronJob.
func TestUpgradeSteps(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(runbook)
	require.NoError(t, err)
	doc := string(b)
	m := regexp.MustCompile(`kubectl apply -k deploy/kubernetes -l '([^']+)'`).FindStringSubmatch(doc)
	require.NotNil(t, m, "operations.md: the upgrade's first apply")
	selector := m[1]
	create := regexp.MustCompile(`kubectl create job --from=cronjob/(\S+) (\S+)`).FindStringSubmatch(doc)
	require.NotNil(t, create, "operations.md: the migration Job of the upgrade")
	require.Contains(t, doc, "kubectl wait --for=condition=complete --timeout=10m job/"+create[2])

	r := render(t, nil)
	name, _ := kustomizationImage(t, r)
	require.Contains(t, doc, "kustomize edit set image "+name+"="+name+":", "operations.md sets the tag of the kustomization's image")
	selected := map[string]bool{}
	for _, o := range r.objs {
		ok, err := o.node.MatchesLabelSelector(selector)
		require.NoError(t, err, selector)
		selected[o.id()] = ok
	}
	cron := r.byID["CronJob/"+create[1]]
	require.NotNil(t, cron, "operations.md creates the Job from %s, which is not rendered", create[1])
	require.Equal(t, true, get(cron.m, "spec", "suspend"), "%s runs only when created from", cron.id())
	require.True(t, selected[cron.id()], "the first apply updates %s", cron.id())
	for _, w := range r.workloads() {
		if w.obj == cron {
			for _, ref := range w.refs() {
				id := ref.kind + "/" + ref.name
				require.True(t, selected[id] || ref.optional, "the first apply creates %s, which the migration reads", id)
			}
			require.Equal(t, "api migrate", strings.Join(append(stringsOf(get(w.containers()[0], "command")), stringsOf(get(w.containers()[0], "args"))...), " "))
		}
		if w.kind == "Deployment" && projectImage(w) {
			require.False(t, selected[w.id()], "the first apply leaves %s for after the migration", w.id())
		}
	}
}

func stringsOf(v any) []string {
	var out []string
	for _, x := range list(v) {
		out = append(out, str(x))
	}
	return out
}
