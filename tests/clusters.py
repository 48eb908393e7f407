"""The one factory of the fixtures that start a local control plane (``devtools.cluster.LocalCluster``).

    cluster = cluster_fixture("cluster")                                   # tests/conftest.py
    sched_cluster = cluster_fixture("sched_cluster", scheduler=True)       # tests/gang/conftest.py
    fault_cluster = cluster_fixture("fault_cluster", shared=False, audit=True)

``shared=True`` (the default): session-scoped, and one cluster per set of options in a session, so two
folders that ask for the same options (under any fixture name) get the same control plane. ``shared=False``:
a cluster of the module's own, stopped after it — for tests that stop, restart, compact or fill it with
objects others must not see. ``audit=True``: the API server writes a JSON audit log of every write to pods
and PodGroups, read with ``Audit(cluster.audit_log)``. Every other keyword goes to ``LocalCluster``.

The fixtures register themselves here by name; tests/conftest.py marks every test that uses one
(directly or through another fixture) ``cluster``, plus ``gang`` (a kube-scheduler or kwok nodes) and
``operators`` (workload operators), and builds the binaries they need once after collection.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.cluster import LocalCluster
from devtools.cluster.audit import audit_args, write_audit_policy

if __name__ != "clusters":  # one registry per session: a second import under another name would miss marks
    raise ImportError(f"import this module as `clusters` (tests/ is on sys.path), not as {__name__!r}")

REPO = Path(__file__).resolve().parents[1]
DEPLOY_CRDS = (REPO / "deploy" / "crds",)  # the grouper's own CRDs
TEST_CRDS = (REPO / "tests" / "crds",)  # the workload kinds of the tests (stub JobSet, Batchling, ...)
ALL_CRDS = DEPLOY_CRDS + TEST_CRDS


@dataclass(frozen=True)
class ClusterSpec:
    """What a cluster fixture starts. ``key`` (everything but the fixture's name) decides sharing."""

    name: str
    shared: bool
    audit: bool
    crds: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.audit, self.crds, self.options)

    @property
    def operators(self) -> tuple[str, ...]:
        return tuple(dict(self.options).get("operators", ()))

    @property
    def marks(self) -> tuple[str, ...]:
        opts = dict(self.options)
        out = ["cluster"]
        if opts.get("scheduler") or opts.get("kwok_nodes"):
            out.append("gang")
        if self.operators:
            out.append("operators")
        return tuple(out)


SPECS: dict[str, list[ClusterSpec]] = {}  # fixture name -> the specs registered under it (modules may reuse a name)


def specs_of(item: pytest.Item) -> list[ClusterSpec]:
    """The cluster fixtures a collected test uses, directly or through other fixtures."""
    return [s for name in getattr(item, "fixturenames", ()) for s in SPECS.get(name, ())]


def _frozen(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


@contextmanager
def start(spec: ClusterSpec, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running LocalCluster as ``spec`` asks, stopped at the end."""
    kwargs: dict[str, Any] = dict(spec.options)
    kwargs["crds"] = [Path(p) for p in spec.crds]
    log: Path | None = None
    if spec.audit:
        d = tmp_path_factory.mktemp("audit")
        log = d / "audit.log"
        kwargs["apiserver_args"] = (*audit_args(write_audit_policy(d / "policy.yaml"), log),
                                    *kwargs.get("apiserver_args", ()))
    with LocalCluster(**kwargs) as c:
        c.audit_log = log  # type: ignore[attr-defined]
        if not kwargs.get("quiet"):
            print(f"\n[devcluster] {spec.name} up in {c.started_in:.1f}s {c.timings} at {c.server}", file=sys.stderr)
        yield c


class Pool:
    """Shared clusters by ``ClusterSpec.key``, each stopped when its last fixture is torn down (for
    session-scoped fixtures: at the end of the session)."""

    def __init__(self, starter: Callable[..., AbstractContextManager[Any]] = start) -> None:
        self._starter = starter
        self._running: dict[tuple[Any, ...], list[Any]] = {}  # key -> [ExitStack, cluster, users]

    @contextmanager
    def use(self, spec: ClusterSpec, tmp_path_factory: Any) -> Iterator[Any]:
        entry = self._running.get(spec.key)
        if entry is None:
            stack = ExitStack()
            cluster = stack.enter_context(self._starter(spec, tmp_path_factory))
            entry = self._running[spec.key] = [stack, cluster, 0]
        entry[2] += 1
        try:
            yield entry[1]
        finally:
            entry[2] -= 1
            if entry[2] == 0:
                del self._running[spec.key]
                entry[0].close()


POOL = Pool()


def cluster_fixture(
    name: str,
    *,
    shared: bool = True,
    audit: bool = False,
    crds: tuple[Path, ...] = ALL_CRDS,
    **options: Any,
) -> Any:
    """A pytest fixture called ``name`` that yields a running LocalCluster (see the module docstring);
    assign it to a module-level variable of the same name in a conftest or a test module."""
    spec = ClusterSpec(name, shared, audit, tuple(str(p) for p in crds),
                       tuple(sorted((k, _frozen(v)) for k, v in options.items())))
    SPECS.setdefault(name, []).append(spec)

    @pytest.fixture(scope="session" if shared else "module", name=name)
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        with POOL.use(spec, tmp_path_factory) if shared else start(spec, tmp_path_factory) as c:
            yield c

    return fixture


class Audit:
    """Reads the API server's JSON audit log (a cluster of ``cluster_fixture(..., audit=True)``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def writes(self, *, user_agent_contains: str = "kai-pod-grouper", namespace: str | None = None) -> list[dict[str, Any]]:
        out = []
        if not self.path.exists():
            return out
        for line in self.path.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") != "ResponseComplete" or user_agent_contains not in str(ev.get("userAgent", "")):
                continue
            ref = ev.get("objectRef") or {}
            if namespace is not None and ref.get("namespace") != namespace:
                continue
            out.append(ev)
        return out
