package deploycheck

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// The inputs, read through links inside this module (testdata/kubernetes
// to deploy/kubernetes, testdata/operations.md to docs/operations.md): go
// test's cache rechecks the files a test opened only inside the module, so
// an edited manifest or page reruns the test rather than reusing a result.
const (
	manifestsDir = "testdata/kubernetes"
	runbook      = "testdata/operations.md"
)

// obj is one rendered object.
type obj struct {
	kind, name string
	labels     map[string]string
	m          map[string]any
	node       *kyaml.RNode
}

func (o *obj) id() string { return o.kind + "/" + o.name }

// rendered is the output of kustomize for deploy/kubernetes.
type rendered struct {
	objs []*obj
	byID map[string]*obj
}

const kustomizeDir = "/deploy/kubernetes"

// render copies deploy/kubernetes into an in-memory file system, makes the
// operator's files (secrets.env, pgbouncer-userlist.txt, postgres-ca.crt,
// components/cnpg/labels-db-app.env) from their committed .example as the
// instructions say, lets edit change the copy (nil: none), and renders it as
// kubectl apply -k would. The objects an operator makes from a rendered
// custom resource are added to byID (not to objs): see operatorMade.
func render(t *testing.T, edit func(fs filesys.FileSystem)) *rendered {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	require.NotZero(t, copyTree(t, fs, manifestsDir, kustomizeDir))
	if edit != nil {
		edit(fs)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, kustomizeDir)
	require.NoError(t, err, "kustomize build deploy/kubernetes")
	r := &rendered{byID: map[string]*obj{}}
	for _, res := range resMap.Resources() {
		m, err := res.Map()
		require.NoError(t, err)
		o := &obj{kind: res.GetKind(), name: res.GetName(), labels: res.GetLabels(), m: m, node: &res.RNode}
		require.NotContains(t, r.byID, o.id(), "%s twice", o.id())
		r.byID[o.id()] = o
		r.objs = append(r.objs, o)
	}
	for _, o := range r.objs {
		for _, made := range operatorMade(o) {
			require.NotContains(t, r.byID, made.id(), "%s: the operator makes %s, which the kustomization makes too", o.id(), made.id())
			r.byID[made.id()] = made
		}
	}
	return r
}

// copyTree copies the directory src into fs at dst, subdirectories
// included, and returns how many operator's files it made from an .example.
func copyTree(t *testing.T, fs filesys.FileSystem, src, dst string) (examples int) {
	t.Helper()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	require.NoError(t, fs.MkdirAll(dst))
	for _, e := range entries {
		if e.IsDir() {
			examples += copyTree(t, fs, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
			continue
		}
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		name := e.Name()
		if base, ok := strings.CutSuffix(name, ".example"); ok {
			name = base
			examples++
		} else if _, err := os.Stat(filepath.Join(src, name+".example")); err == nil {
			continue // an operator's own file on this machine: the example stands in
		}
		require.NoError(t, fs.WriteFile(filepath.Join(dst, name), b))
	}
	return examples
}

// get walks m along path; nil where a step is missing.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func stringMap(v any) map[string]string {
	out := map[string]string{}
	m, _ := v.(map[string]any)
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out
}

// workload is an object that makes pods, with its pod template.
type workload struct {
	*obj
	pod map[string]any // the pod template: metadata and spec
}

func (w workload) podLabels() map[string]string {
	return stringMap(get(w.pod, "metadata", "labels"))
}

func (w workload) spec() map[string]any {
	m, _ := get(w.pod, "spec").(map[string]any)
	return m
}

// containers returns the pod's containers, init containers included.
func (w workload) containers() []map[string]any {
	var out []map[string]any
	for _, field := range []string{"initContainers", "containers"} {
		for _, c := range list(w.spec()[field]) {
			out = append(out, c.(map[string]any))
		}
	}
	return out
}

// containerPorts maps the pod's port names to numbers.
func (w workload) containerPorts() map[string]int {
	ports := map[string]int{}
	for _, c := range w.containers() {
		for _, p := range list(c["ports"]) {
			ports[str(get(p, "name"))] = toInt(get(p, "containerPort"))
		}
	}
	return ports
}

func toInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	case string:
		i, _ := strconv.Atoi(n)
		return i
	}
	return 0
}

func (r *rendered) workloads() []workload {
	var ws []workload
	for _, o := range r.objs {
		var pod any
		switch o.kind {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
			pod = get(o.m, "spec", "template")
		case "CronJob":
			pod = get(o.m, "spec", "jobTemplate", "spec", "template")
		case "Pod":
			pod = o.m
		default:
			continue
		}
		m, _ := pod.(map[string]any)
		ws = append(ws, workload{obj: o, pod: m})
	}
	return ws
}

// ref is a reference from a pod to another object, with the key it reads.
type ref struct {
	kind, name, key string
	optional        bool
	where           string
}

// refs returns every object a pod refers to.
func (w workload) refs() []ref {
	var out []ref
	spec := w.spec()
	if sa := str(spec["serviceAccountName"]); sa != "" && sa != "default" {
		out = append(out, ref{kind: "ServiceAccount", name: sa, where: "serviceAccountName"})
	}
	for _, s := range list(spec["imagePullSecrets"]) {
		out = append(out, ref{kind: "Secret", name: str(get(s, "name")), where: "imagePullSecrets"})
	}
	for _, c := range w.containers() {
		cn := str(c["name"])
		for _, ef := range list(c["envFrom"]) {
			for field, kind := range map[string]string{"configMapRef": "ConfigMap", "secretRef": "Secret"} {
				if r := get(ef, field); r != nil {
					out = append(out, ref{kind: kind, name: str(get(r, "name")), optional: get(r, "optional") == true, where: cn + " envFrom"})
				}
			}
		}
		for _, e := range list(c["env"]) {
			for field, kind := range map[string]string{"configMapKeyRef": "ConfigMap", "secretKeyRef": "Secret"} {
				if r := get(e, "valueFrom", field); r != nil {
					out = append(out, ref{kind: kind, name: str(get(r, "name")), key: str(get(r, "key")),
						optional: get(r, "optional") == true, where: cn + " env " + str(get(e, "name"))})
				}
			}
		}
	}
	for _, v := range list(spec["volumes"]) {
		vn := "volume " + str(get(v, "name"))
		if cm := get(v, "configMap"); cm != nil {
			out = append(out, ref{kind: "ConfigMap", name: str(get(cm, "name")), optional: get(cm, "optional") == true, where: vn})
		}
		if s := get(v, "secret"); s != nil {
			out = append(out, ref{kind: "Secret", name: str(get(s, "secretName")), optional: get(s, "optional") == true, where: vn})
		}
		if pvc := get(v, "persistentVolumeClaim"); pvc != nil {
			out = append(out, ref{kind: "PersistentVolumeClaim", name: str(get(pvc, "claimName")), where: vn})
		}
		for _, src := range list(get(v, "projected", "sources")) {
			if cm := get(src, "configMap"); cm != nil {
				out = append(out, ref{kind: "ConfigMap", name: str(get(cm, "name")), optional: get(cm, "optional") == true, where: vn})
			}
			if s := get(src, "secret"); s != nil {
				out = append(out, ref{kind: "Secret", name: str(get(s, "name")), optional: get(s, "optional") == true, where: vn})
			}
		}
	}
	return out
}

// keys returns the keys of a rendered Secret or ConfigMap.
func (o *obj) keys() map[string]bool {
	keys := map[string]bool{}
	for _, field := range []string{"data", "stringData", "binaryData"} {
		for k := range stringMap(o.m[field]) {
			keys[k] = true
		}
	}
	return keys
}

// value returns a key of a rendered Secret (decoded) or ConfigMap.
func (o *obj) value(t *testing.T, key string) string {
	t.Helper()
	if v, ok := stringMap(o.m["stringData"])[key]; ok {
		return v
	}
	v := stringMap(o.m["data"])[key]
	if o.kind == "Secret" {
		b, err := base64.StdEncoding.DecodeString(v)
		require.NoError(t, err, "%s: %s", o.id(), key)
		return string(b)
	}
	return v
}

// env returns a container's environment as the pod would see it, the
// references resolved against the rendered objects.
func (r *rendered) env(t *testing.T, c map[string]any) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range list(c["envFrom"]) {
		for field, kind := range map[string]string{"configMapRef": "ConfigMap", "secretRef": "Secret"} {
			if ref := get(ef, field); ref != nil {
				if o := r.byID[kind+"/"+str(get(ref, "name"))]; o != nil {
					for k := range o.keys() {
						env[k] = o.value(t, k)
					}
				}
			}
		}
	}
	for _, e := range list(c["env"]) {
		name := str(get(e, "name"))
		if v, ok := get(e, "value").(string); ok {
			env[name] = v
			continue
		}
		for field, kind := range map[string]string{"configMapKeyRef": "ConfigMap", "secretKeyRef": "Secret"} {
			if ref := get(e, "valueFrom", field); ref != nil {
				if o := r.byID[kind+"/"+str(get(ref, "name"))]; o != nil && o.keys()[str(get(ref, "key"))] {
					env[name] = o.value(t, str(get(ref, "key")))
				}
			}
		}
	}
	return env
}

// matches reports whether a label selector (matchLabels and
// matchExpressions, as Deployments, PodDisruptionBudgets and
// NetworkPolicies write them) selects labels. A nil selector selects
// nothing; an empty one, everything.
func matches(t *testing.T, sel any, labels map[string]string) bool {
	t.Helper()
	m, ok := sel.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range stringMap(m["matchLabels"]) {
		if labels[k] != v {
			return false
		}
	}
	for _, e := range list(m["matchExpressions"]) {
		key, op := str(get(e, "key")), str(get(e, "operator"))
		var values []string
		for _, v := range list(get(e, "values")) {
			values = append(values, fmt.Sprint(v))
		}
		v, has := labels[key]
		switch op {
		case "In":
			if !has || !slices.Contains(values, v) {
				return false
			}
		case "NotIn":
			if has && slices.Contains(values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			t.Fatalf("a selector operator this test does not know: %q", op)
		}
	}
	return true
}

// subset reports whether a Service's selector (plain labels) selects labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}
