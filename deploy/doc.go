// Package deploy holds example deployments of the label service and no code:
// Kubernetes manifests under deploy/kubernetes/ (kubectl apply -k) and systemd
// units under deploy/systemd/ (the label service's, and pg_auto_failover's for
// a replicated PostgreSQL), with deploy/systemd/README.md, the how-to that
// installs them on a VM. Its test parses every file and checks it against the
// binaries and the configuration documented in docs/operations.md (and the
// how-to against the units and pg_autoctl), and the image test builds the
// image (tools/image) and checks them against it. tools/deploycheck renders
// the kustomization itself.
package deploy
