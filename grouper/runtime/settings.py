"""Settings of ``grouper run``: KAI's flag names and defaults (kai-podgrouper.md §4.1) plus our own.

Every flag can also come from the environment as ``GROUPER_<FLAG_IN_UPPER_SNAKE>`` (e.g.
``GROUPER_SCHEDULER_NAME``, ``GROUPER_LEADER_ELECT=true``); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from grouper.core.config import GroupingConfig
from grouper.karta.catalog import builtin_catalog_dir


def default_definitions_dir() -> str:
    """The shipped catalog (package data in a wheel, ``definitions/`` in a checkout); else ""."""
    found = builtin_catalog_dir()
    return str(found) if found else ""


def parse_bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on", "t", "y"):
        return True
    if v in ("0", "false", "no", "off", "f", "n", ""):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {value!r}")


def parse_selector(value: str) -> str:
    """``k=v,k2=v2`` (equality only, like upstream); returned normalized, validated."""
    pairs = [p.strip() for p in value.split(",") if p.strip()]
    for p in pairs:
        k, sep, _v = p.partition("=")
        if not sep or not k.strip() or "!" in k or p.count("=") != 1:
            raise argparse.ArgumentTypeError(f"label selector {value!r}: expected k=v[,k2=v2], got {p!r}")
    return ",".join(pairs)


def parse_kinds(value: str) -> str:
    """``Kind.group,Kind2`` (a core kind has no group); validated here, split by :func:`kinds_of`."""
    for part in (p.strip() for p in value.split(",") if p.strip()):
        kind = part.split(".", 1)[0]
        if not kind or not kind[0].isupper() or not kind.isalnum():
            raise argparse.ArgumentTypeError(f"owner kind {part!r}: expected Kind.group (e.g. Batchling.example.com)")
    return value


def kinds_of(value: str) -> frozenset[tuple[str, str]]:
    """(group, kind) pairs of a ``--extra-owner-kinds`` value."""
    out = set()
    for part in (p.strip() for p in value.split(",") if p.strip()):
        kind, _, group = part.partition(".")
        out.add((group, kind))
    return frozenset(out)


def parse_log_level(value: str) -> str:
    v = value.lower()
    if v not in ("debug", "info", "warning", "error"):
        raise argparse.ArgumentTypeError(f"log level {value!r}: one of debug, info, warning, error")
    return v


def parse_log_format(value: str) -> str:
    v = value.lower()
    if v not in ("json", "text"):
        raise argparse.ArgumentTypeError(f"log format {value!r}: json or text")
    return v


BACKENDS = ("kai", "upstream")


def parse_backend(value: str) -> str:
    v = value.strip().lower()
    if v not in BACKENDS:
        raise argparse.ArgumentTypeError(f"backend {value!r}: one of {', '.join(BACKENDS)}")
    return v


EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def parse_event_loop(value: str) -> str:
    v = value.strip().lower()
    if v not in EVENT_LOOPS:
        raise argparse.ArgumentTypeError(f"event loop {value!r}: one of {', '.join(EVENT_LOOPS)}")
    return v


def parse_http_auth(value: str) -> str:
    v = value.strip().lower()
    if v not in ("kubernetes", "none"):
        raise argparse.ArgumentTypeError(
            f"--http-auth {value!r}: kubernetes (TokenReview + SubjectAccessReview) or none (no authentication)"
        )
    return v


def parse_bind(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"bind address {value!r}: expected HOST:PORT (e.g. 127.0.0.1:8080)")
    return f"{host or '0.0.0.0'}:{port}"


def positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def non_negative_float(value: str) -> float:
    f = float(value)
    if f < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {f}")
    return f


# The grouping flags' defaults are GroupingConfig's, so ``grouper run``, ``plan`` and ``explain`` agree.
_GROUPING = GroupingConfig()


@dataclass
class RunSettings:
    # KAI podgrouper flags
    scheduler_name: str = _GROUPING.scheduler_name
    queue_label_key: str = _GROUPING.queue_label_key
    nodepool_label_key: str = _GROUPING.nodepool_label_key
    # No client-side limit by default: the API server's Priority and Fairness protects it (controller-runtime
    # does the same since v0.15); KAI's 50/300 cannot sustain 50 pods/s of 5-pod workloads (60 writes/s).
    qps: float = 0.0
    burst: int = 300
    # A reconcile mostly waits on the API server (a PodGroup write, then the pods' patches): 10 workers cap
    # a burst at ~10 in-flight writes; 32 matches the minimal-writes baseline (KAI's scale tests use 50).
    max_concurrent_reconciles: int = 32
    leader_elect: bool = False
    generic_karta_fallback: bool = _GROUPING.generic_karta_fallback
    knative_gang_schedule: bool = _GROUPING.knative_gang_schedule
    deployment_gang_schedule: bool = _GROUPING.deployment_gang_schedule
    search_legacy_pg: bool = _GROUPING.search_legacy_pg
    default_priorities_configmap_name: str = _GROUPING.default_priorities_configmap_name
    default_priorities_configmap_namespace: str = _GROUPING.default_priorities_configmap_namespace
    pod_label_selector: str = ""
    namespace_label_selector: str = ""
    # ours
    leader_election_namespace: str = "kai-system"
    leader_election_id: str = "kai-pod-grouper"
    definitions: str = ""
    kubeconfig: str = ""
    context: str = ""
    server: str = ""
    token_file: str = ""
    certificate_authority: str = ""
    http_bind_address: str = "127.0.0.1:8080"  # loopback unless told (the chart binds the pod address)
    http_auth: str = "kubernetes"
    http_auth_token_file: str = ""
    http_auth_audiences: str = ""
    log_level: str = "info"
    log_format: str = "json"
    shutdown_drain_seconds: float = 10.0
    batch_window_seconds: float = 0.02
    watch_list: bool = True
    event_loop: str = "auto"
    extra_owner_kinds: str = ""
    identity: str = ""
    backend: str = "kai"
    webhook_bind_address: str = ""
    webhook_cert_file: str = ""
    webhook_key_file: str = ""
    webhook_client_ca: str = ""
    webhook_allow_unauthenticated: bool = False
    webhook_shutdown_delay_seconds: float = 5.0
    workload_info_metrics: bool = False

    def grouping_config(self) -> GroupingConfig:
        return GroupingConfig.from_flags(self)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunSettings:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})


# flag -> (type, help). Defaults come from RunSettings (and the environment).
FLAGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "scheduler-name": (str, "handle pods whose spec.schedulerName is this"),
    "queue-label-key": (str, "label key naming the queue"),
    "nodepool-label-key": (str, "node-pool label copied from the pod to a new PodGroup ('' disables)"),
    "qps": (non_negative_float, "client-side API request rate (token bucket refill; 0 = unlimited)"),
    "burst": (positive_int, "client-side API request burst (token bucket size)"),
    "max-concurrent-reconciles": (
        positive_int, "workloads reconciled concurrently and PodGroup writes in flight; pod patches in flight: twice this"
    ),
    "leader-elect": (parse_bool, "run leader election; only the leader writes"),
    "generic-karta-fallback": (parse_bool, "use Karta definitions for kinds without a native plugin"),
    "knative-gang-schedule": (parse_bool, "one gang PodGroup per Knative revision (else per pod)"),
    "deployment-gang-schedule": (
        parse_bool,
        "one gang PodGroup per Deployment, minMember from kai.scheduler/batch-min-member (else per pod)",
    ),
    "search-legacy-pg": (
        parse_bool,
        "reuse legacy-shaped PodGroups of batch Jobs / RunaiJobs / JobSets / Ray",
    ),
    "default-priorities-configmap-name": (str, "ConfigMap with per-kind default priority/preemptibility"),
    "default-priorities-configmap-namespace": (str, "namespace of that ConfigMap (both flags needed)"),
    "pod-label-selector": (parse_selector, "only pods with these labels, k=v[,k2=v2]"),
    "namespace-label-selector": (parse_selector, "only pods in namespaces with these labels, k=v[,k2=v2]"),
    "leader-election-namespace": (str, "namespace of the leader-election Lease"),
    "leader-election-id": (str, "name of the leader-election Lease"),
    "definitions": (
        str,
        "directory of built-in Karta definitions (default: the repository's definitions/ "
        "next to the package when present; '' = none)",
    ),
    "kubeconfig": (str, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)"),
    "context": (str, "kubeconfig context (default: the current one)"),
    "server": (str, "API server URL; with --token-file / --certificate-authority, instead of a kubeconfig"),
    "token-file": (str, "bearer token file for --server (re-read when it rotates)"),
    "certificate-authority": (str, "CA bundle for --server"),
    "http-bind-address": (parse_bind, "HOST:PORT of the HTTP server (health, metrics and API on one port)"),
    "http-auth": (
        parse_http_auth,
        "who may read the API (not /healthz, /readyz): kubernetes = bearer tokens checked with TokenReview, "
        "each request authorized with a SubjectAccessReview; none = no authentication (local development only)",
    ),
    "http-auth-audiences": (
        str,
        "with --http-auth=kubernetes: accept only bearer tokens bound to one of these audiences (comma-separated; "
        "default: the API server's own)",
    ),
    "http-auth-token-file": (
        str,
        "static mode instead of --http-auth: the API requires exactly this one bearer token (full access)",
    ),
    "log-level": (parse_log_level, "debug, info, warning or error"),
    "log-format": (parse_log_format, "json (one object per line) or text"),
    "shutdown-drain-seconds": (non_negative_float, "on SIGTERM, wait this long for in-flight reconciles"),
    "batch-window-seconds": (
        non_negative_float,
        "a new pod's workload is reconciled this long after the pod appears, so the pods of a burst are "
        "decided and patched together (0 = at once)",
    ),
    "watch-list": (
        parse_bool,
        "fill the caches with streaming lists (a watch with sendInitialEvents, served from the API server's "
        "watch cache; Kubernetes >= 1.34) instead of paginated LISTs; a server that refuses them gets LISTs",
    ),
    "event-loop": (
        parse_event_loop,
        "asyncio event loop: uvloop (libuv: its I/O and TLS transport run in C), "
        "asyncio (the standard library's), auto = uvloop when installed",
    ),
    "identity": (
        str,
        "this replica's name in the leader-election Lease and in its User-Agent (set it to the pod name); "
        "default: <hostname>_<random uuid>",
    ),
    "backend": (
        parse_backend,
        "what to write: kai = KAI PodGroups (scheduling.run.ai) and pod annotations; upstream = Kubernetes "
        "Workload + PodGroups (scheduling.k8s.io, 1.37 gang scheduling), pods join them at admission",
    ),
    "webhook-bind-address": (
        str,
        "HOST:PORT of the mutating admission webhook (TLS) that groups pods at creation; '' = off",
    ),
    "webhook-cert-file": (str, "TLS certificate of the webhook server (PEM)"),
    "webhook-key-file": (str, "TLS private key of the webhook server (PEM)"),
    "webhook-client-ca": (
        str,
        "CA (PEM) that signs the API server's webhook client certificate: the webhook then requires one "
        "(mTLS) and nobody else can call it; use a CA of its own, not the cluster's",
    ),
    "webhook-allow-unauthenticated": (
        parse_bool,
        "serve the webhook without --webhook-client-ca, answering anyone who reaches its port (only for "
        "an API server that cannot present a client certificate; restrict the port to it)",
    ),
    "webhook-shutdown-delay-seconds": (
        non_negative_float,
        "on SIGTERM, go unready at once but answer admissions this long more: the API server calls this "
        "replica until its endpoint is gone, and a call refused admits the pod unchanged",
    ),
    "workload-info-metrics": (
        parse_bool,
        "serve podgrouper_workload_info{namespace,kind,name,queue,state}: one series per workload with a "
        "PodGroup (cardinality = workloads; off: only per-state and per-queue gang metrics)",
    ),
    "extra-owner-kinds": (
        parse_kinds,
        "owner kinds to follow besides the native plugins' and the Karta definitions', "
        "as Kind.group[,Kind2.group2] (core kinds: Kind)",
    ),
}


# Other spellings accepted for a flag: KAI's Config CR / Helm ``podgrouper.args`` names
# (``gangScheduleKnative``, ``gangScheduleDeployment``) as flags. The environment variable follows the
# main name only (``GROUPER_DEPLOYMENT_GANG_SCHEDULE``).
ALIASES: dict[str, tuple[str, ...]] = {
    "knative-gang-schedule": ("gang-schedule-knative",),
    "deployment-gang-schedule": ("gang-schedule-deployment",),
}


def env_name(flag: str) -> str:
    return "GROUPER_" + flag.upper().replace("-", "_")


def add_flags(parser: argparse.ArgumentParser, environ: dict[str, str] | None = None) -> None:
    """Add every ``grouper run`` flag; defaults from ``GROUPER_*`` environment variables when set."""
    env = os.environ if environ is None else environ
    base = RunSettings(definitions=default_definitions_dir())
    for flag, (typ, help_text) in FLAGS.items():
        attr = flag.replace("-", "_")
        default = getattr(base, attr)
        raw = env.get(env_name(flag))
        if raw is not None:
            try:
                default = typ(raw)
            except (argparse.ArgumentTypeError, ValueError) as e:
                parser.error(f"{env_name(flag)}={raw!r}: {e}")
        kwargs: dict[str, Any] = {
            "dest": attr,
            "type": typ,
            "default": default,
            "metavar": _metavar(default),
            "help": f"{help_text} [env {env_name(flag)}; default: {default!r}]",
        }
        if typ is parse_bool:
            kwargs.update(nargs="?", const=True, metavar="BOOL")
        parser.add_argument(f"--{flag}", *(f"--{a}" for a in ALIASES.get(flag, ())), **kwargs)


def _metavar(default: Any) -> str:
    if isinstance(default, bool):
        return "BOOL"
    if isinstance(default, int):
        return "N"
    if isinstance(default, float):
        return "X"
    return "VALUE"
