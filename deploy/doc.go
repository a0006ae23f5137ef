// Package deploy holds example deployments of the label service and no code:
// Kubernetes manifests under kubernetes/ (kubectl apply -k) and systemd units
// under systemd/. Its test parses every file and checks it against the
// binaries and the configuration documented in docs/operations.md, and the
// image test builds the image (tools/image) and checks them against it.
package deploy
