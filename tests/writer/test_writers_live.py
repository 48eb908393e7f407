"""The writers against the real API server: optimistic-concurrency conflicts are retried from fresh state,
fields other writers own survive our updates, and warning Events are de-duplicated and rate-limited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kube import Kube

from grouper.kube import config as kubeconfig
from grouper.kube.transport import ApiError, KubeClient
from grouper.model.podgroup import OwnerRef, PodGroupMetadata
from grouper.observability.metrics import Metrics
from grouper.writer.events import EventRecorder, InvolvedObject
from grouper.writer.expectations import WriteExpectations
from grouper.writer.podgroups import PodGroupWriter

T = TypeVar("T")
PG = "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups"


def run(cluster: Any, fn: Callable[[KubeClient], Awaitable[T]]) -> tuple[T, Metrics]:
    metrics = Metrics()

    async def main() -> T:
        client = KubeClient(
            kubeconfig.explicit(cluster.server, token=cluster.admin_token, ca_file=cluster.ca_file),
            metrics=metrics,
        )
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(main()), metrics


def md(ns: str, min_member: int, owner: OwnerRef) -> PodGroupMetadata:
    return PodGroupMetadata(
        name="pg-w",
        namespace=ns,
        owner=owner,
        queue="q",
        priority_class_name="train",
        min_member=min_member,
        labels={"app": "w"},
    )


def real_owner(kube: Kube, ns: str) -> OwnerRef:
    """An object that exists, so the garbage collector leaves the PodGroup alone."""
    cm = kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "owner"}})
    return OwnerRef("v1", "ConfigMap", "owner", cm["metadata"]["uid"])


def test_conflicts_retry_from_fresh_state_and_foreign_fields_survive(
    cluster: Any, kube: Kube, namespace: str
) -> None:
    ns = namespace
    owner = real_owner(kube, ns)
    stale: dict[str, Any] = {}

    async def scenario(client: KubeClient) -> list[str]:
        ops: list[str] = []
        # the cache has not seen the PodGroup yet, but it exists: AlreadyExists -> re-read -> no-op
        creator = PodGroupWriter(client, existing=lambda n, name: None, expectations=WriteExpectations())
        ops.append(await creator.apply(md(ns, 1, owner)))
        ops.append(await PodGroupWriter(client, existing=lambda n, name: None, expectations=WriteExpectations()).apply(md(ns, 1, owner)))
        stale.update(await client.get(f"{PG.format(ns=ns)}/pg-w"))
        # another writer changes the object after "our cache" read it
        await asyncio.to_thread(
            kube.patch,
            f"{PG.format(ns=ns)}/pg-w",
            {"metadata": {"labels": {"theirs": "1"}}, "spec": {"markUnschedulable": True}},
        )
        writer = PodGroupWriter(client, existing=lambda n, name: stale, expectations=WriteExpectations())
        ops.append(await writer.apply(md(ns, 3, owner)))  # PUT with the stale resourceVersion -> 409 -> retry
        return ops

    ops, metrics = run(cluster, scenario)
    assert ops == ["created", "unchanged", "updated"]
    pg = kube.get(f"{PG.format(ns=ns)}/pg-w")
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["markUnschedulable"] is True, "a field another writer owns survives our update"
    assert pg["metadata"]["labels"] == {"app": "w", "theirs": "1"}
    code = {"verb": "update", "resource": "podgroups"}
    assert metrics.value("podgrouper_api_requests_total", {**code, "code": "409"}) == 1
    assert metrics.value("podgrouper_api_requests_total", {**code, "code": "200"}) == 1
    assert (
        metrics.value(
            "podgrouper_api_requests_total", {"verb": "create", "resource": "podgroups", "code": "409"}
        )
        == 1
    )


def test_events_are_aggregated_and_rate_limited(cluster: Any, kube: Kube, namespace: str) -> None:
    ns = namespace
    pod = InvolvedObject("v1", "Pod", ns, "p-1", "uid-p-1")

    async def scenario(client: KubeClient) -> EventRecorder:
        rec = EventRecorder(client, patch_interval=0.0, burst=2, refill=3600)
        for _ in range(5):
            await rec.warn(pod, "Pod p-1: same problem")  # one Event, count 5
        for i in range(4):
            await rec.warn(pod, f"Pod p-1: new problem {i}")  # burst 2: one more new Event, rest dropped
        return rec

    rec, _ = run(cluster, scenario)
    events = kube.list(f"/api/v1/namespaces/{ns}/events", field_selector="involvedObject.name=p-1")
    by_msg = {e["message"]: e for e in events}
    assert sorted(by_msg) == ["Pod p-1: new problem 0", "Pod p-1: same problem"]
    same = by_msg["Pod p-1: same problem"]
    assert same["count"] == 5 and same["type"] == "Warning" and same["reason"] == "PodGrouperWarning"
    assert same["source"]["component"] == "pod-grouper" and same["involvedObject"]["uid"] == "uid-p-1"
    assert rec.suppressed == 3


def test_a_standing_failure_is_reported_once_per_cause_until_it_changes_or_clears(
    cluster: Any, kube: Kube, namespace: str
) -> None:
    """``report``: one Event per (object, cause) while its message stands — not one per retry, and no count
    bumps either (the correlator alone would send a new Event every ten minutes and patch counts)."""
    ns = namespace
    job = InvolvedObject("batch/v1", "Job", ns, "j-1", "uid-j-1")

    async def scenario(client: KubeClient) -> list[bool]:
        rec = EventRecorder(client, patch_interval=0.0, aggregate_window=0.0)  # the correlator never merges
        sent = [await rec.report(job, "PodGroup/pg", "PodGroup pg: write failed: 422 Invalid: no") for _ in range(5)]
        sent.append(await rec.report(job, "PodGroup/other", "PodGroup other: write failed: 422 Invalid: no"))
        sent.append(await rec.report(job, "PodGroup/pg", "PodGroup pg: write failed: 422 Invalid: other field"))
        rec.clear(job, "PodGroup/pg")  # written: the next failure is news
        sent.append(await rec.report(job, "PodGroup/pg", "PodGroup pg: write failed: 422 Invalid: other field"))
        return sent

    sent, _ = run(cluster, scenario)
    assert sent == [True, False, False, False, False, True, True, True]
    events = kube.list(f"/api/v1/namespaces/{ns}/events", field_selector="involvedObject.name=j-1")
    assert sorted((e["message"], e["count"]) for e in events) == [
        ("PodGroup other: write failed: 422 Invalid: no", 1),
        ("PodGroup pg: write failed: 422 Invalid: no", 1),
        ("PodGroup pg: write failed: 422 Invalid: other field", 1),
        ("PodGroup pg: write failed: 422 Invalid: other field", 1),
    ]


def test_kubeconfig_loading_and_token_refresh(cluster: Any, tmp_path: Any) -> None:
    """A kubeconfig (embedded CA data, bearer token) works with the aiohttp transport; a token file is
    re-read after a 401 so rotated tokens are picked up without a restart."""
    cfg = kubeconfig.load(cluster.kubeconfig_path)
    assert cfg.server == cluster.server and cfg.token == cluster.admin_token and (cfg.ca_file or cfg.ca_data)
    token_file = tmp_path / "token"
    token_file.write_text("expired-token")
    rotating = kubeconfig.explicit(cluster.server, token_file=str(token_file), ca_file=cluster.ca_file)

    async def main() -> tuple[Any, Any]:
        a = KubeClient(cfg)
        b = KubeClient(rotating)
        try:
            version = await a.get("/version")
            token_file.write_text(cluster.admin_token)  # the kubelet rotated the projected token
            ns = await b.get("/api/v1/namespaces/default")
            return version, ns
        finally:
            await a.close()
            await b.close()

    version, ns = asyncio.run(main())
    assert version["major"] and ns["metadata"]["name"] == "default"


def test_pod_patch_answer_is_metadata_only_and_marks_the_pod(cluster: Any, kube: Kube, namespace: str) -> None:
    """A pod patch asks for the answer's metadata alone (the grouper reads nothing else of it): the API
    server answers a PartialObjectMetadata with the new marks and the version the echo will carry, and
    errors still come back as a Status the caller can act on."""
    from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL
    from grouper.writer.pods import marked

    pod = kube.create(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0", "labels": {"app": "x"}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "busybox"}]},
    })
    path = f"/api/v1/namespaces/{namespace}/pods/p0"
    patch = {"metadata": {"annotations": {POD_GROUP_ANNOTATION: "pg-a"}, "labels": {SUBGROUP_LABEL: "workers"}}}

    async def scenario(client: KubeClient) -> tuple[Any, Any, Any]:
        slim = await client.merge_patch(path, patch, metadata_only=True)
        full = await client.merge_patch(path, {"metadata": {"annotations": {"other": "1"}}})
        try:
            await client.merge_patch(path, {"metadata": {"resourceVersion": "1", "labels": {"b": "c"}}},
                                     metadata_only=True)
        except ApiError as e:
            return slim, full, e
        return slim, full, None

    (slim, full, conflict), _ = run(cluster, scenario)
    assert slim["kind"] == "PartialObjectMetadata" and "spec" not in slim and "status" not in slim
    assert slim["metadata"]["annotations"][POD_GROUP_ANNOTATION] == "pg-a"
    assert slim["metadata"]["labels"] == {"app": "x", SUBGROUP_LABEL: "workers"}
    assert full["kind"] == "Pod" and full["spec"]["schedulerName"] == "kai-scheduler"  # the default answer
    assert int(full["metadata"]["resourceVersion"]) > int(slim["metadata"]["resourceVersion"])
    assert getattr(conflict, "status", None) == 409 and getattr(conflict, "reason", None) == "Conflict"
    expected = marked(pod, slim)  # what the patcher expects until the echo: the cached pod, the answer's marks
    assert expected["spec"] == pod["spec"] and expected["kind"] == "Pod"
    assert expected["metadata"]["annotations"][POD_GROUP_ANNOTATION] == "pg-a"
    assert expected["metadata"]["labels"][SUBGROUP_LABEL] == "workers"
    assert expected["metadata"]["resourceVersion"] == slim["metadata"]["resourceVersion"]
