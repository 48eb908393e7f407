"""What the controller decided and did, per pod, PodGroup and workload: the records the HTTP API, `grouper
explain --server` and `grouper get --server` read. Written by the controller only."""
