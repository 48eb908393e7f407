"""What the operator tests share: ``grouper plan`` over live objects, the grouper's writes from the audit
log, and the comparison of hand-written fixtures with the objects a real operator creates."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.harness import ANNOTATION, SUBGROUP, GrouperThread
from faults.conftest import Audit
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from grouper.core.config import GroupingConfig
from grouper.core.plan import plan
from grouper.karta import DefinitionRegistry
from grouper.runtime.composition import build_grouper

REPO = Path(__file__).resolve().parents[2]
PODGROUPS = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"


def typed(items: list[dict[str, Any]], api_version: str, kind: str) -> list[dict[str, Any]]:
    """List items carry no apiVersion/kind: give them theirs."""
    return [{"apiVersion": api_version, "kind": kind, **o} for o in items]


def planned(*objs: list[dict[str, Any]]) -> dict[str, Any]:
    """``grouper plan`` over the live objects, without the marks the grouper itself put on the pods."""
    clean = []
    for obj in (o for group in objs for o in group):
        if obj["kind"] == "Pod":
            obj = copy.deepcopy(obj)
            (obj["metadata"].get("annotations") or {}).pop(ANNOTATION, None)
            (obj["metadata"].get("labels") or {}).pop(SUBGROUP, None)
        clean.append(obj)
    grouper = build_grouper(GroupingConfig(), DefinitionRegistry(REPO / "definitions"))
    return plan(clean, grouper).to_json()


def grouper_writes(audit: Audit, ns: str, since: int) -> dict[str, int]:
    """The grouper's writes in ``ns`` after the first ``since``, by resource."""
    counts: dict[str, int] = {}
    for ev in audit.writes(namespace=ns)[since:]:
        resource = ev["objectRef"]["resource"]
        counts[resource] = counts.get(resource, 0) + 1
    return counts


def normalize(value: Any, names: dict[str, str]) -> Any:
    """Replace every uid (or other generated string) by what it names, so fixture and live objects compare."""
    if isinstance(value, dict):
        return {k: normalize(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, names) for v in value]
    if isinstance(value, str):
        return names.get(value, value)
    return value


def uids(objs: list[dict[str, Any]]) -> dict[str, str]:
    return {o["metadata"]["uid"]: f"<uid of {o['kind']} {o['metadata']['name']}>" for o in objs}


def differences(kind: str, want: dict[str, dict[str, Any]], got: dict[str, dict[str, Any]]) -> list[str]:
    """Every field (and every key of a mapping field) where a fixture's view differs from the live one."""
    out = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            out.append(f"{kind} {key}: in the fixture, not created by the controllers")
            continue
        if key not in want:
            out.append(f"{kind} {key}: created by the controllers, not in the fixture")
            continue
        w, g = want[key], got[key]
        for field in sorted(set(w) | set(g)):
            if isinstance(w.get(field), dict) and isinstance(g.get(field), dict):
                for k in sorted(set(w[field]) | set(g[field])):
                    if w[field].get(k) != g[field].get(k):
                        out.append(f"{kind} {key} {field}[{k}]: fixture {w[field].get(k)!r}, real {g[field].get(k)!r}")
            elif w.get(field) != g.get(field):
                out.append(f"{kind} {key} {field}: fixture {w.get(field)!r}, real {g.get(field)!r}")
    return out


def owner_refs(meta: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")}
        for ref in meta.get("ownerReferences") or []
    ]

def assert_stored_are_planned(kube: Kube, ns: str, objs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The stored PodGroups are those ``grouper plan`` computes from the same live objects (spec and owner),
    and every pod carries the group and sub-group the plan gives it; returns the stored ones by name."""
    want = planned(*objs.values())
    assert want["errors"] == [], want["errors"]
    stored = {pg["metadata"]["name"]: pg for pg in kube.list(PODGROUPS.format(ns=ns))}
    assert sorted(stored) == sorted(pg["metadata"]["name"] for pg in want["podGroups"])
    for want_pg in want["podGroups"]:
        pg = stored[want_pg["metadata"]["name"]]
        assert pg["spec"] == want_pg["spec"], pg["metadata"]["name"]
        assert pg["metadata"]["ownerReferences"] == want_pg["metadata"]["ownerReferences"]
    decided = {d["name"]: d for d in want["pods"]}
    for pod in objs["Pod"]:
        meta = pod["metadata"]
        assert (meta.get("annotations") or {}).get(ANNOTATION) == decided[meta["name"]]["podGroup"], meta["name"]
        assert (meta.get("labels") or {}).get(SUBGROUP) == decided[meta["name"]]["subGroup"], meta["name"]
    return stored


def assert_stored_is_planned(kube: Kube, ns: str, objs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """:func:`assert_stored_are_planned` for a workload of one PodGroup; returns it."""
    (pg,) = assert_stored_are_planned(kube, ns, objs).values()
    return pg


Objs = dict[str, list[dict[str, Any]]]


def wait_planned(kube: Kube, ns: str, read: Callable[[], Objs], what: str) -> dict[str, dict[str, Any]]:
    """:func:`assert_stored_are_planned` once it holds for the live objects (``read()``): the grouper has
    caught up with the operator's last change (a pod the test sees created or deleted says nothing of
    whether the grouper has yet seen the spec change behind it, and ``wait_idle`` only waits for what the
    grouper has received). Returns the stored PodGroups; on timeout, raises the last mismatch."""
    last: list[AssertionError] = []

    def check() -> dict[str, dict[str, Any]] | None:
        try:
            return assert_stored_are_planned(kube, ns, read())
        except AssertionError as e:
            last[:] = [e]
            return None

    try:
        stored: dict[str, dict[str, Any]] = wait_until(check, timeout=90, interval=0.25, what=what)
    except TimeoutError:
        if last:
            raise last[0] from None
        raise
    return stored


def wait_grouped(
    read: Callable[[], Objs], count: int, what: str, *, pods: Callable[[Objs], list[dict[str, Any]]] | None = None,
    pred: Callable[[Objs], Any] | None = None, settled: bool = False,
) -> Objs:
    """The live objects (``read()``) once ``count`` pods (``pods(objs)``, default every Pod) exist and every one
    is grouped (its PodGroup annotation set), and ``pred(objs)`` holds; ``settled``: none is terminating."""

    def check() -> Objs | None:
        objs = read()
        mine = objs["Pod"] if pods is None else pods(objs)
        ok = len(mine) == count and all(
            (p["metadata"].get("annotations") or {}).get(ANNOTATION)
            and not (settled and p["metadata"].get("deletionTimestamp"))
            for p in mine
        )
        return objs if ok and (pred is None or pred(objs)) else None

    objs: Objs = wait_until(check, timeout=90, interval=0.25, what=f"{count} {what} created and grouped")
    return objs


def restart_then_delete(
    cluster: LocalCluster, kube: Kube, audit: Audit, ns: str, path: str, what: str, *,
    meanwhile: Callable[[GrouperThread], None] | None = None,
) -> None:
    """The tail of a test that followed a real operator: a new grouper over the same objects writes nothing
    (level-triggered, no needless write); ``meanwhile(grouper)`` runs with it (its writes are its own to
    count); then deleting the workload at ``path`` garbage-collects every PodGroup of ``ns`` and nothing is
    written for it. ``what`` names the workload in the messages ("its PyTorchJob")."""
    since = len(audit.writes(namespace=ns))
    with GrouperThread(cluster, ns) as again:
        # idle is not enough: a restarted grouper's pods wait, off its queue, for their owner kind's cache
        wait_until(lambda: decided_all(again, kube, ns), timeout=90, interval=0.25,
                   what="the restarted grouper deciding every pod")
        again.wait_idle(timeout=60)
        assert grouper_writes(audit, ns, since) == {}, "a restarted grouper rewrote what was right"
        if meanwhile is not None:
            meanwhile(again)
            since = len(audit.writes(namespace=ns))
        kube.delete(path)
        wait_until(lambda: not kube.list(PODGROUPS.format(ns=ns)), timeout=90, interval=0.25,
                   what=f"the PodGroups garbage-collected with {what}")
    assert grouper_writes(audit, ns, since) == {}, f"nothing written for deleting {what}"


def decided_all(grouper: GrouperThread, kube: Kube, ns: str) -> bool:
    """Whether ``grouper`` has a decision for every live pod of ``ns`` (the pod of that uid)."""
    for pod in kube.list(f"/api/v1/namespaces/{ns}/pods"):
        rec = grouper.store.pod(ns, pod["metadata"]["name"])
        if rec is None or rec.decided_at is None or rec.uid != pod["metadata"]["uid"]:
            return False
    return True
