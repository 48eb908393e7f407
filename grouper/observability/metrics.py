"""Prometheus metrics of the pod grouper, held in one dedicated ``CollectorRegistry``.

Every component receives the same :class:`Metrics` instance instead of touching the global default
registry, so tests create a fresh one per controller and read exact counts from it. Labels are
bounded on purpose: verbs, resources, results, reasons, plugin names, gang states and queues — never pod or
workload names, except ``podgrouper_workload_info`` (one series per workload), served only with
``--workload-info-metrics``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from grouper import __version__

PREFIX = "podgrouper"
M = TypeVar("M", bound=MetricWrapperBase)

# Gang states (grouper.core.gang_state.State), in the order the metrics list them.
GANG_STATES = ("Grouping", "Waiting", "Admitted", "Degraded", "Error")
# Time to admission: gangs wait from seconds (an idle cluster) to days (a full queue).
_ADMISSION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """All metrics of one grouper process. ``registry`` is what ``/metrics`` serves."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}
        self._gangs: GangCollector | None = None
        self.reconciles = Counter(
            f"{PREFIX}_reconciles_total",
            "Workload reconciles by result and plugin.",
            ["result", "plugin"],
            registry=r,
        )
        self.decisions = Counter(
            f"{PREFIX}_pod_decisions_total",
            "Pods planned by reconciles, by source: decided (a fresh decision) or kept (the decision the "
            "workload's last plan made for the same, unchanged pod).",
            ["source"],
            registry=r,
        )
        self.pod_routes = Counter(
            f"{PREFIX}_pod_routes_total",
            "Pods mapped to their workload on a watch or list event, by path: walk (an owner walk on the cache) "
            "or shared (the walk of a pod with the same controlling owner in the same run of the event loop).",
            ["path"],
            registry=r,
        )
        self.reconcile_duration = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Time to reconcile one workload (decide, write PodGroups, patch pods).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pod_grouped_latency = Histogram(
            f"{PREFIX}_pod_grouped_latency_seconds",
            "From pod creationTimestamp until the pod carries its pod-group-name annotation (observed on patch).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.podgroups_written = Counter(
            f"{PREFIX}_podgroups_written_total",
            "PodGroup write decisions: created, updated, or unchanged (no request sent).",
            ["operation"],
            registry=r,
        )
        self.pod_patches = Counter(
            f"{PREFIX}_pod_patches_total",
            "Pod patches by result (patched, unchanged, error).",
            ["result"],
            registry=r,
        )
        self.write_failures = Counter(
            f"{PREFIX}_write_failures_total",
            "PodGroup and pod writes the API server refused (after the writer's own conflict retries), by "
            "resource (podgroups, pods), reason (by HTTP status: Invalid, BadRequest, Forbidden, ServerError, "
            "...) and retry (terminal: waits for a change of its input; retryable: backs off).",
            ["resource", "reason", "retry"],
            registry=r,
        )
        self.api_requests = Counter(
            f"{PREFIX}_api_requests_total",
            "Requests sent to the API server by verb, resource and HTTP status code.",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.workqueue_depth = Gauge(
            f"{PREFIX}_workqueue_depth", "Workloads waiting in the work queue.", registry=r
        )
        self.workqueue_retries = Counter(
            f"{PREFIX}_workqueue_retries_total",
            "Workloads re-queued with back-off after a failure.",
            registry=r,
        )
        self.watch_restarts = Counter(
            f"{PREFIX}_watch_restarts_total",
            "Watches re-opened (timeout, error, stream end).",
            ["resource"],
            registry=r,
        )
        self.relists = Counter(
            f"{PREFIX}_relists_total",
            "Full LISTs after the initial one (410 Gone, errors).",
            ["resource"],
            registry=r,
        )
        self.karta_definitions = Gauge(
            f"{PREFIX}_karta_definitions",
            "Karta definitions known, by origin and state.",
            ["origin", "state"],
            registry=r,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this instance holds the leader lease (is_leader), or runs without leader election.",
            registry=r,
        )
        self.decision_errors = Counter(
            f"{PREFIX}_decision_errors_total",
            "Pods whose grouping decision failed, by reason.",
            ["reason"],
            registry=r,
        )
        self.stepped_aside = Counter(
            f"{PREFIX}_pods_stepped_aside_total",
            "Pod decisions that wrote nothing because something else groups the pod (grouper.core.step_aside): "
            "SkipAnnotation, PodGangIgnored, GroupedByController. A pod decided again counts again.",
            ["reason"],
            registry=r,
        )
        self.task_restarts = Counter(
            f"{PREFIX}_task_restarts_total",
            "Supervised long-running tasks (informers, leader election, workers, HTTP) restarted after a crash.",
            ["task"],
            registry=r,
        )
        self.podgroups_deleted = Counter(
            f"{PREFIX}_podgroups_deleted_total",
            "PodGroups the grouper created and deleted because no pod of their workload names them any more.",
            registry=r,
        )
        self.owner_kinds_refused = Counter(
            f"{PREFIX}_owner_kinds_refused_total",
            "Owner references to kinds outside the allow-list (the walk stopped there, no cache started).",
            registry=r,
        )
        # the upstream backend (--backend=upstream): what discovery chose or refused, what the API dropped
        self.upstream_api = Gauge(
            f"{PREFIX}_upstream_api_info",
            "scheduling.k8s.io versions the upstream backend writes (1 per kind and version in use).",
            ["kind", "version"],
            registry=r,
        )
        self.upstream_refused_versions = Gauge(
            f"{PREFIX}_upstream_refused_versions",
            "1 per scheduling.k8s.io version refused because it serves Workload or PodGroup but not both.",
            ["version"],
            registry=r,
        )
        self.upstream_dropped_fields = Counter(
            f"{PREFIX}_upstream_dropped_fields_total",
            "Fields of created upstream objects that the API server did not store (a feature gate off).",
            ["kind", "field"],
            registry=r,
        )
        # gang state (grouper.visibility.gangs): transitions and admissions as they happen; the per-state
        # gauges are read from the tracker at scrape time (add_gang_source)
        self.gang_transitions = Counter(
            f"{PREFIX}_gang_transitions_total",
            "Gang state transitions of PodGroups (from, to: Grouping, Waiting, Admitted, Degraded, Error). A state "
            "rebuilt after a restart is no transition.",
            ["from", "to"],
            registry=r,
        )
        self.gang_time_to_admission = Histogram(
            f"{PREFIX}_gang_time_to_admission_seconds",
            "From the first pod's creation to the gang's first admission, observed when it is admitted, by queue.",
            ["queue"],
            buckets=_ADMISSION_BUCKETS,
            registry=r,
        )
        self.build_info = Gauge(f"{PREFIX}_build_info", "Build information.", ["version"], registry=r)
        self.build_info.labels(version=__version__).set(1)

    def add_gang_source(self, source: GangSource, *, workload_info: bool = False) -> None:
        """Serve the per-state gang gauges (and, with ``workload_info``, one info series per workload) from
        ``source`` at every scrape."""
        if self._gangs is not None:  # a new controller on the same registry (tests): its tracker replaces
            self.registry.unregister(self._gangs)
        self._gangs = GangCollector(source, workload_info=workload_info)
        self.registry.register(self._gangs)

    def child(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)`` (in the order of its label names), kept: the hot paths count a few
        label sets per pod, and ``labels`` checks and locks on every call (~2 µs; kept ~0.1 µs). Label
        sets are bounded here by design (module docstring), so keeping them costs nothing extra: the
        registry keeps every child anyway."""
        key = (metric, values)  # metrics hash by identity
        got = self._children.get(key)
        if got is None:
            got = self._children[key] = metric.labels(*values)
        return got  # type: ignore[return-value]

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Current sample value (0 when absent); for tests and the benchmark."""
        v = self.registry.get_sample_value(name, labels or {})
        return float(v) if v is not None else 0.0


@dataclass(frozen=True)
class GangSample:
    """One PodGroup's gang as the metrics see it (no names: the gauges are by state and queue)."""

    state: str
    queue: str
    pods: int  # pods present (not being deleted)
    gpus: float  # their nvidia.com/gpu requests
    seconds_in_state: float


@dataclass(frozen=True)
class WorkloadSample:
    namespace: str
    kind: str
    name: str
    queue: str
    state: str  # the worst of its gangs'


class GangSource(Protocol):
    """What the gang collector reads (``grouper.visibility.gangs.GangTracker``); called in the scrape."""

    def gang_samples(self) -> Iterable[GangSample]: ...

    def workload_samples(self) -> Iterable[WorkloadSample]: ...


class GangCollector(Collector):
    """The gang gauges, computed from the tracker at scrape time (a sum over its PodGroups, no per-event
    bookkeeping). Series: 5 states x the queues that have a gang, each state listed (0 when empty) so an
    alert's expression keeps its series while a state empties. ``podgrouper_workload_info`` (opt-in) has
    one series per workload."""

    def __init__(self, source: GangSource, *, workload_info: bool = False) -> None:
        self.source, self.workload_info = source, workload_info

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        labels = ["state", "queue"]
        gangs = GaugeMetricFamily(f"{PREFIX}_gangs", "PodGroups by gang state and queue.", labels=labels)
        pods = GaugeMetricFamily(f"{PREFIX}_gang_pods", "Pods of the gangs by gang state and queue.", labels=labels)
        gpus = GaugeMetricFamily(f"{PREFIX}_gang_requested_gpus",
                                 "nvidia.com/gpu requested by the pods of the gangs, by gang state and queue.",
                                 labels=labels)
        oldest = GaugeMetricFamily(f"{PREFIX}_gang_oldest_seconds",
                                   "Longest time any gang has been in its state, by state and queue (0: none).",
                                   labels=labels)
        return gangs, pods, gpus, oldest

    def collect(self) -> Iterator[Metric]:
        totals: dict[tuple[str, str], list[float]] = {}
        for g in self.source.gang_samples():
            for state in GANG_STATES:
                totals.setdefault((state, g.queue), [0.0, 0.0, 0.0, 0.0])
            t = totals.setdefault((g.state, g.queue), [0.0, 0.0, 0.0, 0.0])
            t[0] += 1
            t[1] += g.pods
            t[2] += g.gpus
            t[3] = max(t[3], g.seconds_in_state)
        families = self._families()
        for (state, queue), values in sorted(totals.items()):
            for family, value in zip(families, values, strict=True):
                family.add_metric([state, queue], value)
        yield from families
        if self.workload_info:
            info = GaugeMetricFamily(
                f"{PREFIX}_workload_info",
                "1 per workload (top owner) with a PodGroup: its gang state (the worst of its PodGroups') and "
                "queue. One series per workload (--workload-info-metrics).",
                labels=["namespace", "kind", "name", "queue", "state"],
            )
            for w in self.source.workload_samples():
                info.add_metric([w.namespace, w.kind, w.name, w.queue, w.state], 1)
            yield info
