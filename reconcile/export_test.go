package reconcile

// AdvisoryLockKey is the lock every run holds, for tests that hold it.
const AdvisoryLockKey = advisoryLockKey
