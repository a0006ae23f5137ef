package deploycheck

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The CloudNativePG component (deploy/kubernetes/components/cnpg): a Cluster
// and the label service wired to it.
const cnpgComponent = "components/cnpg"

// withCNPG turns the component on, as `kustomize edit add component
// components/cnpg` does in deploy/kubernetes.
func withCNPG(t *testing.T) func(fs filesys.FileSystem) {
	return func(fs filesys.FileSystem) {
		k := path.Join(kustomizeDir, "kustomization.yaml")
		b, err := fs.ReadFile(k)
		require.NoError(t, err)
		require.NotContains(t, string(b), "\ncomponents:", "the base turns no component on")
		require.NoError(t, fs.WriteFile(k, append(b, "components:\n  - "+cnpgComponent+"\n"...)))
	}
}

// eachVariant runs check on every way the manifests are applied: the base
// (an external PostgreSQL) and the base with the CloudNativePG component.
func eachVariant(t *testing.T, check func(t *testing.T, r *rendered)) {
	for name, edit := range map[string]func(*testing.T) func(filesys.FileSystem){
		"base": func(*testing.T) func(filesys.FileSystem) { return nil },
		"cnpg": withCNPG,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, render(t, edit(t)))
		})
	}
}

// operatorMade returns what the CloudNativePG operator makes from a rendered
// Cluster, by the names its api/v1 gives them (GetServerCASecretName,
// GetApplicationSecretName, the -rw/-ro/-r Services on port 5432), with the
// keys the manifests may read; nil for any other object.
func operatorMade(o *obj) []*obj {
	if o.kind != "Cluster" {
		return nil
	}
	secret := func(name string, keys ...string) *obj {
		data := map[string]any{}
		for _, k := range keys {
			data[k] = ""
		}
		return &obj{kind: "Secret", name: name, m: map[string]any{"data": data}}
	}
	made := []*obj{secret(o.name+"-ca", "ca.crt", "ca.key")}
	if get(o.m, "spec", "bootstrap", "initdb", "secret", "name") == nil {
		made = append(made, secret(o.name+"-app", "username", "password", "dbname", "host", "port", "uri", "jdbc-uri", "pgpass"))
	}
	for _, suffix := range []string{"-rw", "-ro", "-r"} {
		made = append(made, &obj{kind: "Service", name: o.name + suffix, m: map[string]any{"spec": map[string]any{
			"selector": map[string]any{"cnpg.io/cluster": o.name},
			"ports":    []any{map[string]any{"name": "postgres", "port": 5432, "targetPort": 5432}},
		}}})
	}
	return made
}

// cnpgFields are the fields of a Cluster's spec the component may set, by
// path: the json names of CloudNativePG's api/v1 (ClusterSpec,
// PostgresConfiguration, SynchronousReplicaConfiguration,
// BootstrapConfiguration, BootstrapInitDB, StorageConfiguration,
// AffinityConfiguration), so that a misspelt field, which the API server
// would drop without a word, fails here. Maps of another schema (parameters,
// resources) are not walked.
var cnpgFields = map[string][]string{
	"spec": {"instances", "imageName", "postgresql", "bootstrap", "storage", "walStorage", "resources",
		"affinity", "enablePDB", "primaryUpdateStrategy", "primaryUpdateMethod", "enableSuperuserAccess",
		"inheritedMetadata", "monitoring", "certificates", "description"},
	"spec.postgresql":                         {"parameters", "synchronous", "pg_hba", "pg_ident", "shared_preload_libraries"},
	"spec.postgresql.synchronous":             {"method", "number", "maxStandbyNamesFromCluster", "standbyNamesPre", "standbyNamesPost", "dataDurability", "failoverQuorum"},
	"spec.bootstrap":                          {"initdb", "recovery", "pg_basebackup"},
	"spec.bootstrap.initdb":                   {"database", "owner", "secret", "dataChecksums", "encoding", "localeCollate", "localeCType", "postInitSQL", "postInitApplicationSQL"},
	"spec.bootstrap.initdb.secret":            {"name"},
	"spec.storage":                            {"size", "storageClass", "resizeInUseVolumes", "pvcTemplate"},
	"spec.walStorage":                         {"size", "storageClass", "resizeInUseVolumes", "pvcTemplate"},
	"spec.affinity":                           {"enablePodAntiAffinity", "topologyKey", "podAntiAffinityType", "nodeSelector", "tolerations", "nodeAffinity", "additionalPodAntiAffinity", "additionalPodAffinity"},
	"spec.postgresql.parameters":              nil, // PostgreSQL's settings
	"spec.resources":                          nil, // a core ResourceRequirements
	"spec.inheritedMetadata":                  nil,
	"spec.affinity.nodeSelector":              nil,
	"spec.affinity.tolerations":               nil,
	"spec.affinity.nodeAffinity":              nil,
	"spec.storage.pvcTemplate":                nil,
	"spec.monitoring":                         nil,
	"spec.certificates":                       nil,
	"spec.affinity.additionalPodAntiAffinity": nil,
	"spec.affinity.additionalPodAffinity":     nil,
}

func checkFields(t *testing.T, where string, v any) {
	t.Helper()
	allowed, walk := cnpgFields[where]
	m, ok := v.(map[string]any)
	if !ok || !walk || allowed == nil {
		return
	}
	for k, sub := range m {
		require.Contains(t, allowed, k, "Cluster: %s.%s is not a field of CloudNativePG's Cluster", where, k)
		checkFields(t, where+"."+k, sub)
	}
}

// docSection returns the subsection of docs/operations.md under title (to the next heading).
func docSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(runbook)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "\n### "+title+"\n")
	require.True(t, ok, "operations.md: no subsection %q", title)
	if i := regexp.MustCompile(`\n#{2,3} `).FindStringIndex(rest); i != nil {
		rest = rest[:i[0]]
	}
	return rest
}

// The Cluster: rendered only with the component; two instances or more,
// a pinned PostgreSQL 15 image, quorum synchronous replication with the
// values docs/operations.md states, the fields all CloudNativePG's, and
// the operator's PodDisruptionBudgets left on (the kustomization adds none).
func TestCNPGCluster(t *testing.T) {
	t.Parallel()
	for _, o := range render(t, nil).objs {
		require.NotEqual(t, "Cluster", o.kind, "the base runs against a PostgreSQL of your own")
	}
	r := render(t, withCNPG(t))
	var clusters []*obj
	for _, o := range r.objs {
		if o.kind == "Cluster" {
			clusters = append(clusters, o)
		}
	}
	require.Len(t, clusters, 1)
	c := clusters[0]
	require.Equal(t, "postgresql.cnpg.io/v1", str(c.m["apiVersion"]))
	checkFields(t, "spec", c.m["spec"])
	spec := c.m["spec"]

	instances := toInt(get(spec, "instances"))
	require.GreaterOrEqual(t, instances, 2, "a primary and a standby at least")
	image := str(get(spec, "imageName"))
	m := regexp.MustCompile(`^ghcr\.io/cloudnative-pg/postgresql:(\d+)\.\d+(-\S+)?(@sha256:[0-9a-f]{64})?$`).FindStringSubmatch(image)
	require.NotNil(t, m, "imageName %q: CloudNativePG's PostgreSQL image, pinned to a minor version", image)
	howto, err := os.ReadFile("testdata/systemd-README.md")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(howto), "postgresql-"+m[1]+"-auto-failover"), "the Cluster runs PostgreSQL %s, the major version of the systemd install", m[1])

	sync := get(spec, "postgresql", "synchronous")
	require.NotNil(t, sync, "synchronous replication")
	method, number, durability := str(get(sync, "method")), toInt(get(sync, "number")), str(get(sync, "dataDurability"))
	require.Contains(t, []string{"any", "first"}, method)
	require.Contains(t, []string{"required", "preferred"}, durability, "dataDurability set, not left to the operator's default")
	require.GreaterOrEqual(t, number, 1)
	require.Less(t, number, instances, "number counts standbys: at most instances - 1")
	if durability == "preferred" {
		require.Empty(t, get(sync, "standbyNamesPre"), "preferred takes no standbyNamesPre")
		require.Empty(t, get(sync, "standbyNamesPost"), "preferred takes no standbyNamesPost")
	}
	doc := docSection(t, "Deploying a replicated PostgreSQL")
	for field, v := range map[string]string{"instances": fmt.Sprint(instances), "method": method, "number": fmt.Sprint(number), "dataDurability": durability} {
		require.True(t, strings.Contains(doc, "`"+field+": "+v+"`"), "operations.md, \"Deploying a replicated PostgreSQL\", states the Cluster's `%s: %s`", field, v)
	}

	require.NotEqual(t, false, get(spec, "enablePDB"), "the operator's PodDisruptionBudgets keep the primary through a drain")
	for _, o := range r.objs {
		if o.kind == "PodDisruptionBudget" {
			require.False(t, matches(t, get(o.m, "spec", "selector"), map[string]string{"cnpg.io/cluster": c.name}), "%s: the operator budgets its own pods", o.id())
		}
	}

	// The upgrade's first apply (operations.md) creates the Cluster and its
	// credentials with the migration.
	sel := regexp.MustCompile(`kubectl apply -k deploy/kubernetes -l '([^']+)'`).FindStringSubmatch(readRunbook(t))
	require.NotNil(t, sel)
	for _, id := range []string{c.id(), "Secret/" + str(get(spec, "bootstrap", "initdb", "secret", "name"))} {
		o := r.byID[id]
		require.NotNil(t, o, id)
		ok, err := o.node.MatchesLabelSelector(sel[1])
		require.NoError(t, err)
		require.True(t, ok, "the upgrade's first apply creates %s", id)
	}
}

func readRunbook(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(runbook)
	require.NoError(t, err)
	return string(b)
}

// mountedFile returns the volume and key a path in a container reads: the
// volume mounted at its directory (secret or projected secrets) and the
// Secret and key behind the file.
func mountedFile(t *testing.T, w workload, c map[string]any, file string) (secret, key string) {
	t.Helper()
	var volume string
	for _, vm := range list(c["volumeMounts"]) {
		if str(get(vm, "mountPath")) == path.Dir(file) {
			volume = str(get(vm, "name"))
		}
	}
	require.NotEmpty(t, volume, "%s: nothing is mounted at %s", w.id(), path.Dir(file))
	for _, v := range list(w.spec()["volumes"]) {
		if str(get(v, "name")) != volume {
			continue
		}
		sources := []any{map[string]any{"secret": map[string]any{"name": get(v, "secret", "secretName"), "items": get(v, "secret", "items")}}}
		if p := get(v, "projected", "sources"); p != nil {
			sources = list(p)
		}
		for _, s := range sources {
			for _, item := range list(get(s, "secret", "items")) {
				if str(get(item, "path")) == path.Base(file) {
					return str(get(s, "secret", "name")), str(get(item, "key"))
				}
			}
		}
	}
	t.Fatalf("%s: no Secret item gives %s", w.id(), file)
	return "", ""
}

// With the component the label service runs on the Cluster: every process
// logs in as the database's owner with the password of the Cluster's app
// Secret (PGPASSWORD; pgx takes it for a URL that carries none, which
// pgconn proves here), DATABASE_URL goes through PgBouncer, whose one
// database is the Cluster's -rw Service, DATABASE_DIRECT_URL straight to that
// Service; both PgBouncer and the direct connections verify the server with
// the Cluster's CA. PgBouncer's configuration is the base's but for its
// database.
func TestCNPGWiring(t *testing.T) {
	r := render(t, withCNPG(t))
	var cluster *obj
	for _, o := range r.objs {
		if o.kind == "Cluster" {
			cluster = o
		}
	}
	require.NotNil(t, cluster)
	initdb := get(cluster.m, "spec", "bootstrap", "initdb")
	owner, db := str(get(initdb, "owner")), str(get(initdb, "database"))
	require.NotEmpty(t, owner)
	require.NotEmpty(t, db)
	appSecret := str(get(initdb, "secret", "name"))
	require.NotEmpty(t, appSecret, "the owner's password is the operator's choice, in a Secret of the kustomization")
	app := r.byID["Secret/"+appSecret]
	require.NotNil(t, app, "the kustomization generates %s", appSecret)
	require.Equal(t, "kubernetes.io/basic-auth", str(app.m["type"]))
	require.Equal(t, owner, app.value(t, "username"), "%s: the owner's name", appSecret)
	password := app.value(t, "password")
	require.NotEmpty(t, password)
	rw := r.byID["Service/"+cluster.name+"-rw"]
	rwPort := toInt(get(list(get(rw.m, "spec", "ports"))[0], "port"))
	caSecret := cluster.name + "-ca"

	byComponent := map[string]workload{}
	for _, w := range r.workloads() {
		byComponent[w.podLabels()[component]] = w
	}
	direct := 0
	for _, name := range []string{"api", "worker", "migrate", "reconcile"} {
		w := byComponent[name]
		c := w.containers()[0]
		env := r.env(t, c)
		var pgpassword any
		for _, e := range list(c["env"]) {
			if str(get(e, "name")) == "PGPASSWORD" {
				pgpassword = get(e, "valueFrom", "secretKeyRef")
			}
		}
		require.Equal(t, appSecret, str(get(pgpassword, "name")), "%s: PGPASSWORD from the Cluster's app Secret", name)
		require.Equal(t, "password", str(get(pgpassword, "key")), name)

		t.Setenv("PGPASSWORD", env["PGPASSWORD"])
		cfg, err := pgconn.ParseConfig(env["DATABASE_URL"])
		require.NoError(t, err, name)
		require.Equal(t, password, cfg.Password, "%s: pgx logs in with PGPASSWORD", name)
		require.Equal(t, owner, cfg.User, name)
		require.Equal(t, db, cfg.Database, name)
		require.Equal(t, "labels-pgbouncer", cfg.Host, "%s: DATABASE_URL through PgBouncer", name)

		raw, ok := env["DATABASE_DIRECT_URL"]
		if name == "reconcile" {
			require.False(t, ok, "reconcile goes through PgBouncer alone")
			continue
		}
		direct++
		u, err := url.Parse(raw)
		require.NoError(t, err)
		_, hasPassword := u.User.Password()
		require.False(t, hasPassword, "%s: no password in DATABASE_DIRECT_URL", name)
		require.Equal(t, owner, u.User.Username(), name)
		require.Equal(t, "/"+db, u.Path, name)
		require.Equal(t, fmt.Sprintf("%s:%d", rw.name, rwPort), u.Host, "%s: DATABASE_DIRECT_URL to the Cluster's -rw Service", name)
		q := u.Query()
		require.Equal(t, "verify-full", q.Get("sslmode"), name)
		require.Equal(t, "read-write", q.Get("target_session_attrs"), name)
		secret, key := mountedFile(t, w, c, q.Get("sslrootcert"))
		require.Equal(t, caSecret, secret, "%s: sslrootcert is the Cluster's CA", name)
		require.Equal(t, "ca.crt", key, name)
	}
	require.Equal(t, 3, direct, "api, worker and migrate connect directly")

	// PgBouncer: the -rw Service, verified with the Cluster's CA.
	pgb := byComponent["pgbouncer"]
	ini := r.byID["ConfigMap/labels-pgbouncer"].value(t, "pgbouncer.ini")
	require.Contains(t, ini, fmt.Sprintf("\n%s = host=%s port=%d dbname=%s\n", db, rw.name, rwPort, db))
	caFile := regexp.MustCompile(`(?m)^server_tls_ca_file = (\S+)$`).FindStringSubmatch(ini)
	require.NotNil(t, caFile)
	secret, key := mountedFile(t, pgb, pgb.containers()[0], caFile[1])
	require.Equal(t, caSecret, secret, "PgBouncer verifies the Cluster with its CA")
	require.Equal(t, "ca.crt", key)
	auth := regexp.MustCompile(`(?m)^auth_file = (\S+)$`).FindStringSubmatch(ini)
	require.NotNil(t, auth)
	secret, key = mountedFile(t, pgb, pgb.containers()[0], auth[1])
	userlist := r.byID["Secret/"+secret]
	require.NotNil(t, userlist, "PgBouncer's auth_file comes from %s", secret)
	require.True(t, strings.HasPrefix(userlist.value(t, key), `"`+owner+`" `), "the userlist holds the owner")

	base := render(t, nil).byID["ConfigMap/labels-pgbouncer"].value(t, "pgbouncer.ini")
	require.Equal(t, settings(base), settings(ini), "pgbouncer.ini: the component's differs from pgbouncer.yaml's only in [databases]")
}

// settings returns an ini's lines without comments and [databases] entries.
func settings(ini string) []string {
	var out []string
	for line := range strings.SplitSeq(ini, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, ";") && !strings.Contains(line, "host=") {
			out = append(out, line)
		}
	}
	return out
}

// The Cluster's instances: shut to all but the label service's processes
// that connect directly and PgBouncer (5432), the other instance and the
// operator in cnpg-system (5432 and the instance manager's 8000), and
// Prometheus (9187); their egress left open for the Kubernetes API.
func TestCNPGNetworkPolicies(t *testing.T) {
	t.Parallel()
	r := render(t, withCNPG(t))
	tcp := func(port int) conn { return conn{port: port, protocol: "TCP"} }
	instance := map[string]string{"cnpg.io/cluster": "labels-db", "cnpg.io/instanceRole": "primary"}
	other := podIn(ownNamespace, map[string]string{"cnpg.io/cluster": "labels-db", "cnpg.io/instanceRole": "replica"})
	operator := map[string]string{"app.kubernetes.io/name": "cloudnative-pg"}
	cnpgSystem := map[string]string{"kubernetes.io/metadata.name": "cnpg-system"}
	monitoring := map[string]string{"kubernetes.io/metadata.name": "monitoring"}
	into := func(from peer, port int) bool { return r.allowed(t, "ingress", instance, nil, from, tcp(port)) }

	for _, port := range []int{5432, 8000, 9187} {
		require.False(t, into(outside, port), "the instances are shut to the world on %d", port)
	}
	require.True(t, r.allowed(t, "egress", instance, nil, outside, tcp(443)), "the instance manager reaches the Kubernetes API")
	for _, port := range []int{5432, 8000} {
		require.True(t, into(other, port), "the other instance on %d", port)
		require.True(t, into(podIn(cnpgSystem, operator), port), "the operator on %d", port)
		require.False(t, into(podIn(monitoring, operator), port), "an operator of another namespace on %d", port)
	}
	require.True(t, into(podIn(monitoring, map[string]string{"app.kubernetes.io/name": "prometheus"}), 9187), "Prometheus scrapes the instances")
	require.False(t, into(podIn(monitoring, map[string]string{"app.kubernetes.io/name": "prometheus"}), 5432))

	directs := 0
	for _, w := range r.workloads() {
		name, labels := w.podLabels()[component], w.podLabels()
		env := r.env(t, w.containers()[0])
		connects := name == "pgbouncer" || strings.Contains(env["DATABASE_DIRECT_URL"], "@labels-db-rw:")
		require.Equal(t, connects, into(podIn(ownNamespace, labels), 5432), "%s: into the instances on 5432", name)
		require.False(t, into(podIn(ownNamespace, labels), 8000), "%s: the instance manager is the operator's", name)
		if connects {
			directs++
			require.True(t, r.allowed(t, "egress", labels, w.containerPorts(), podIn(ownNamespace, instance), tcp(5432)), "%s: out to the instances", name)
		}
	}
	require.Equal(t, 4, directs, "api, worker, migrate and PgBouncer")
	require.True(t, slices.ContainsFunc(r.objs, func(o *obj) bool { return o.kind == "NetworkPolicy" && o.name == "labels-db" }))
}
