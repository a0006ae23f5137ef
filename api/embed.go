// Package api holds the OpenAPI 3.1 document of the label service's HTTP API,
// the machine-readable half of docs/api.md. cmd/api serves it at
// GET /openapi.yaml, and httpapi's tests validate real answers of every status
// against it, so that it cannot drift from the implementation.
package api

import _ "embed"

// OpenAPI is the document, openapi.yaml, as YAML.
//
//go:embed openapi.yaml
var OpenAPI []byte
