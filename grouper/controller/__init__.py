"""The control loop: event handlers route pods to workloads, a work queue and workers run the reconciler."""
