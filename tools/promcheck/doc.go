// Package promcheck holds the tests that read the PromQL of the alert rules
// (deploy/prometheus/alerts.yaml) and the Grafana dashboard
// (deploy/grafana/labels.json) with Prometheus's own parser, kept in the tools
// module so that the service's go.mod does not carry Prometheus: every query
// parses, and every metric it selects is one a process of the service exports
// (package metrics).
package promcheck
