"""Questions grouping asks of the cache, answered from indexes against the real API server: the JobSet
legacy-shape question ("is there a PodGroup pg-<jobset>-<uid>[-…] without sub-groups?") by the UID
prefix of PodGroup names, not by listing the namespace."""

from __future__ import annotations

from typing import Any

from controller.harness import (
    ANNOTATION,
    PG_PATH,
    GrouperThread,
    annotated,
    child_jobs,
    jobset,
    pod_groups,
)
from kube import Kube, wait_until

from grouper.kube.cache import podgroup_name_prefixes


def flat_podgroup(name: str, js: dict[str, Any]) -> dict[str, Any]:
    """A PodGroup in the old flat JobSet shape (no sub-groups), as an earlier grouper wrote it."""
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "ownerReferences": [
                {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": js["metadata"]["name"],
                 "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {"minMember": 1, "queue": "default-queue"},
    }


def test_a_legacy_flat_podgroup_keeps_the_flat_shape(kube: Kube, scoped: str, grouper: GrouperThread) -> None:
    ns = scoped
    js = kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", jobset("old"))
    base = f"pg-old-{js['metadata']['uid']}"
    kube.create(PG_PATH.format(ns=ns), flat_podgroup(base, js))
    # a PodGroup of another JobSet whose name merely starts like this one's is not a match
    other = kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", jobset("old2"))
    for j in child_jobs(js):
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", j)
    ps = wait_until(lambda: annotated(kube, ns, 5, "jobset.sigs.k8s.io/jobset-name=old"), 30, what="5 pods")
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {base}
    pg = pod_groups(kube, ns)[base]
    assert "subGroups" not in pg["spec"] and pg["spec"]["minMember"] == 1
    assert f"pg-old2-{other['metadata']['uid']}" not in pod_groups(kube, ns)


def test_podgroup_name_prefixes_end_at_a_uid_on_a_name_boundary() -> None:
    uid = "0f8b4a52-1c2d-4e5f-8a9b-0123456789ab"
    pg = {"metadata": {"namespace": "ns", "name": f"pg-js-{uid}-workers"}}
    assert podgroup_name_prefixes(pg) == [f"ns/pg-js-{uid}"]
    assert podgroup_name_prefixes({"metadata": {"namespace": "ns", "name": f"pg-js-{uid}"}}) == [f"ns/pg-js-{uid}"]
    assert podgroup_name_prefixes({"metadata": {"namespace": "ns", "name": f"pg-js-{uid}x"}}) == []
    assert podgroup_name_prefixes({"metadata": {"namespace": "ns", "name": "no-uid-here"}}) == []
