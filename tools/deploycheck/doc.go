// Package deploycheck renders deploy/kubernetes with kustomize, in process,
// as `kubectl apply -k` would, with and without the CloudNativePG component
// (components/cnpg), and its test checks what the cluster would be given:
// every reference of a workload (Secret, ConfigMap, ServiceAccount,
// PersistentVolumeClaim) resolves to a rendered object under its generated
// name, every Service and PodDisruptionBudget selects pods, every image is
// pinned, every pod meets Pod Security "restricted", the NetworkPolicies open
// what each process needs and no more, the Cluster's replication is what the
// docs state, and the upgrade commands of docs/operations.md select what they
// say. It lives in the tools module so the service's go.mod carries no kustomize.
package deploycheck
