"""Pod patches are fire-and-track: a pass sends its pods' patches on their way and ends; when new pods of
the workload arrive while those patches are still in flight, the next pass patches only the new pods (a
pod whose patch is on its way is not patched again), and each patch's outcome is recorded when it lands
(a failure is reported and retried with back-off, not lost). Replaced PodGroups are deleted once the
workload's patches have landed.

Against the real API server; the pod patcher's client is wrapped only to hold the first pods' patches
(a slow API server) and, in the second test, to fail one of them."""

from __future__ import annotations

import asyncio
from typing import Any

from controller.harness import ANNOTATION, PG_PATH, GrouperThread, job_pod_spec, label_namespace, owned_pod
from kube import Kube, wait_until

from grouper.kube.cache import PODGROUP
from grouper.kube.transport import ApiError

LWS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
LABEL = "leaderworkerset.sigs.k8s.io/"
FIRST, LATER = 12, 6


class HeldPatches:
    """The patcher's client, with the patches of pods in ``held`` waiting for ``release`` (a slow API
    server) and ``fail`` failing once with a 500."""

    def __init__(self, client: Any, held: set[str], fail: set[str] | None = None) -> None:
        self.client, self.held, self.fail = client, held, fail or set()
        self.release = asyncio.Event()
        self.sent: list[str] = []  # pod names, one per patch request
        self.waiting = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def merge_patch(self, path: str, patch: dict[str, Any], *, metadata_only: bool = False) -> Any:
        pod = path.rsplit("/", 1)[-1]
        self.sent.append(pod)
        if pod in self.held:
            self.waiting += 1
            await self.release.wait()
            self.waiting -= 1
        if pod in self.fail:
            self.fail.discard(pod)
            raise ApiError(500, "InternalError", "injected", method="PATCH", path=path)
        return await self.client.merge_patch(path, patch)


def lws(kube: Kube, ns: str, size: int) -> dict[str, Any]:
    return kube.create(LWS.format(ns=ns), {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": job_pod_spec()}}},
    })


def create_pods(kube: Kube, ns: str, owner: dict[str, Any], workers: range) -> None:
    for w in workers:
        labels = {f"{LABEL}name": "serve", f"{LABEL}group-index": "0", f"{LABEL}worker-index": str(w)}
        kube.create(f"/api/v1/namespaces/{ns}/pods", owned_pod(f"serve-0-{w}", labels, owner))


def annotations(kube: Kube, ns: str) -> dict[str, str | None]:
    return {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(ANNOTATION)
            for p in kube.list(f"/api/v1/namespaces/{ns}/pods")}


def reconciles(g: GrouperThread, result: str) -> float:
    return sum(s.value for m in g.metrics.registry.collect() if m.name == "podgrouper_reconciles"
               for s in m.samples if s.name.endswith("_total") and s.labels["result"] == result)


def start(g: GrouperThread, held: set[str], fail: set[str] | None = None) -> HeldPatches:
    patcher = g.controller.writers.pods
    wrapped = HeldPatches(patcher.client, held, fail)
    patcher.client = wrapped
    return wrapped


def hold_the_first_pods(
    g: GrouperThread, kube: Kube, ns: str, first: set[str], fail: set[str] | None = None
) -> tuple[HeldPatches, dict[str, Any]]:
    """The LeaderWorkerSet and its first pods, whose patches are held in flight: a pass waiting on them."""
    held = start(g, first, fail)
    owner = lws(kube, ns, FIRST + LATER)
    create_pods(kube, ns, owner, range(FIRST))
    wait_until(lambda: held.waiting == FIRST, 30, what="the first pods' patches in flight")
    return held, owner


def test_new_pods_are_patched_while_the_first_pass_still_waits_for_its_patches(
    cluster: Any, kube: Kube, namespace: str
) -> None:
    ns = namespace
    label_namespace(kube, ns)
    with GrouperThread(cluster, ns) as g:
        first = {f"serve-0-{w}" for w in range(FIRST)}
        held, owner = hold_the_first_pods(g, kube, ns, first)
        create_pods(kube, ns, owner, range(FIRST, FIRST + LATER))
        later = wait_until(
            lambda: (a := annotations(kube, ns)) and all(a.get(f"serve-0-{w}") for w in range(FIRST, FIRST + LATER))
            and a,
            30,
            what="the later pods patched while the first pass's patches are held",
        )
        assert not any(later[p] for p in first), "the first pods' patches were held: none can be done yet"
        assert held.waiting == FIRST
        assert reconciles(g, "ok") >= 2, "the passes ended with their patches still in flight"
        g.call(_set(held.release))
        final = wait_until(
            lambda: (a := annotations(kube, ns)) and len(a) == FIRST + LATER and all(a.values()) and a,
            30,
            what="every pod grouped",
        )
        g.wait_idle()
        uid = owner["metadata"]["uid"]
        assert set(final.values()) == {f"pg-serve-{uid}-group-0"}
        assert sorted(held.sent) == sorted(final), "one patch per pod: no pass patched a pod on its way again"
        [record] = g.store.workloads()
        assert record.result == "ok" and record.pods == FIRST + LATER


def test_a_patch_that_fails_after_its_pass_ended_is_reported_and_retried(cluster: Any, kube: Kube, namespace: str) -> None:
    ns = namespace
    label_namespace(kube, ns)
    with GrouperThread(cluster, ns) as g:
        first = {f"serve-0-{w}" for w in range(FIRST)}
        held, owner = hold_the_first_pods(g, kube, ns, first, fail={"serve-0-3"})
        create_pods(kube, ns, owner, range(FIRST, FIRST + LATER))
        wait_until(lambda: (a := annotations(kube, ns)) and all(a.get(f"serve-0-{w}") for w in range(FIRST, FIRST + LATER)),
                   30, what="the later pods patched while the first ones' patches are held")
        g.call(_set(held.release))
        final = wait_until(
            lambda: (a := annotations(kube, ns)) and len(a) == FIRST + LATER and all(a.values()) and a,
            30,
            what="every pod grouped, the failed one after its retry",
        )
        g.wait_idle()
        assert sorted(held.sent) == sorted([*final, "serve-0-3"]), "the failed patch sent twice, every other once"
        assert reconciles(g, "error") >= 1, "the pass that sent the failed patch again reported the failure"
        warnings = wait_until(
            lambda: [e for e in kube.list(f"/api/v1/namespaces/{ns}/events", field_selector="reason=PodGrouperWarning")
                     if "serve-0-3: cannot set its PodGroup: 500" in e.get("message", "")],
            30,
            what="a warning Event for the failed patch",
        )
        assert {e["involvedObject"]["kind"] for e in warnings} >= {"Pod"}


def test_a_replaced_podgroup_no_pod_names_is_deleted_while_patches_are_in_flight(
    cluster: Any, kube: Kube, namespace: str
) -> None:
    """A stale per-pod PodGroup of one of the workload's pods (owned by it, named by no pod), as a pod that
    was its own workload before its owner reached the cache leaves behind, appearing after that pod was
    planned: the next pass finds it (PodGroups owned by pods are indexed by namespace) and deletes it at
    once, the workload's patches still in flight. (One still named by a pod being moved away waits for the
    patch to land: tests/controller/test_reconciler.py.)"""
    ns = namespace
    label_namespace(kube, ns)
    with GrouperThread(cluster, ns) as g:
        first = {f"serve-0-{w}" for w in range(FIRST)}
        held, owner = hold_the_first_pods(g, kube, ns, first)
        pod = kube.get(f"/api/v1/namespaces/{ns}/pods/serve-0-0")
        kube.create(PG_PATH.format(ns=ns), {
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "stale-serve-0-0", "ownerReferences": [{
                "apiVersion": "v1", "kind": "Pod", "name": "serve-0-0", "uid": pod["metadata"]["uid"]}]},
            "spec": {"minMember": 1, "queue": "default-queue"},
        })
        pgs = g.controller.cache.informer(PODGROUP)
        assert pgs is not None
        wait_until(lambda: pgs.get(ns, "stale-serve-0-0"), 30, what="the stale PodGroup in the grouper's cache")
        create_pods(kube, ns, owner, range(FIRST, FIRST + LATER))
        wait_until(lambda: (a := annotations(kube, ns)) and all(a.get(f"serve-0-{w}") for w in range(FIRST, FIRST + LATER)),
                   30, what="the later pods patched while the first ones' patches are held")
        wait_until(lambda: pgs.get(ns, "stale-serve-0-0") is None, 30,
                   what="the stale PodGroup deleted, the first pods' patches still held")
        assert held.waiting == FIRST
        g.call(_set(held.release))
        wait_until(
            lambda: (a := annotations(kube, ns)) and len(a) == FIRST + LATER and all(a.values()),
            30,
            what="every pod grouped",
        )
        wait_until(
            lambda: (n := {p["metadata"]["name"] for p in kube.list(PG_PATH.format(ns=ns))}) == {
                f"pg-serve-{owner['metadata']['uid']}-group-0"} and n,
            30,
            what="only the gang's PodGroup left",
        )


async def _set(event: asyncio.Event) -> None:
    event.set()
