// Package reconcile matches a carrier invoice against our labels: the nightly
// backstop that finds what slipped through the keys.
package reconcile
