"""The control loop: cache-backed lookups, a work queue keyed by workload, the reconciler, leader election
and the decision store the HTTP API reads."""
