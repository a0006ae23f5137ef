// Package e2e holds system tests that cross every part of the pipeline and
// disturb what is under it: here, losing the database.
package e2e
