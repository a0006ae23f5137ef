package deploycheck

import (
	"testing"
)

// ownNamespace labels the namespace the manifests are applied to (they name
// none); the peers below live in it unless they say otherwise.
var ownNamespace = map[string]string{"kubernetes.io/metadata.name": "labels-test"}

// peer is one end of a connection: a pod (its labels and its namespace's),
// or, with pod nil, an address outside the cluster.
type peer struct {
	pod map[string]string
	ns  map[string]string
}

func podIn(ns map[string]string, labels map[string]string) peer { return peer{pod: labels, ns: ns} }

var outside = peer{}

// conn is a connection a policy may allow: to a port, by protocol; for an
// ingress the named ports are the selected pod's.
type conn struct {
	port     int
	protocol string
}

// allowed reports whether the NetworkPolicies let a connection through,
// as the API describes them: a pod selected by no policy of that direction
// is not isolated; otherwise some rule of a policy selecting it must match
// both the peer and the port. pod is the pod whose policies apply (the
// destination of an ingress, the source of an egress); named are its
// ports by name, for an ingress rule's named ports.
func (r *rendered) allowed(t *testing.T, direction string, pod map[string]string, named map[string]int, other peer, c conn) bool {
	t.Helper()
	isolated := false
	policyType, rulesField, peersField := "Ingress", "ingress", "from"
	if direction == "egress" {
		policyType, rulesField, peersField = "Egress", "egress", "to"
	}
	for _, o := range r.objs {
		if o.kind != "NetworkPolicy" || !matches(t, get(o.m, "spec", "podSelector"), pod) {
			continue
		}
		var types []string
		for _, p := range list(get(o.m, "spec", "policyTypes")) {
			types = append(types, str(p))
		}
		if !contains(types, policyType) {
			continue
		}
		isolated = true
		for _, rule := range list(get(o.m, "spec", rulesField)) {
			if peerMatches(t, list(get(rule, peersField)), other) && portMatches(list(get(rule, "ports")), named, c) {
				return true
			}
		}
	}
	return !isolated
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func peerMatches(t *testing.T, peers []any, p peer) bool {
	t.Helper()
	if len(peers) == 0 {
		return true // every source or destination
	}
	for _, x := range peers {
		if get(x, "ipBlock") != nil {
			// The manifests' blocks are any address; a pod is not one.
			if p.pod == nil {
				return true
			}
			continue
		}
		if p.pod == nil {
			continue
		}
		nsSel, podSel := get(x, "namespaceSelector"), get(x, "podSelector")
		if nsSel == nil {
			// Pods of the policy's own namespace.
			if mapsEqual(p.ns, ownNamespace) && matches(t, podSel, p.pod) {
				return true
			}
			continue
		}
		if matches(t, nsSel, p.ns) && (podSel == nil || matches(t, podSel, p.pod)) {
			return true
		}
	}
	return false
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func portMatches(ports []any, named map[string]int, c conn) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := str(get(p, "protocol"))
		if proto == "" {
			proto = "TCP"
		}
		if proto != c.protocol {
			continue
		}
		switch port := get(p, "port").(type) {
		case nil:
			return true
		case string:
			if n, ok := named[port]; ok && n == c.port {
				return true
			}
		default:
			if toInt(port) == c.port {
				return true
			}
		}
	}
	return false
}
