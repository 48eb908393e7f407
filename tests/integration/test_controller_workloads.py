"""The controller against the real API server: workloads created by the real Job/Deployment controllers
(or by the test acting as an operator) get their PodGroups and pod annotations; workload changes
re-evaluate PodGroups without any pod event; Kartas apply at run time; failures become Events without
blocking others; PodGroups are garbage-collected with their workload.

Each test runs its own grouper in-process (``controller.harness.GrouperThread``), scoped to the test's
namespace with ``--namespace-label-selector``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from controller.harness import (
    ANNOTATION,
    SUBGROUP,
    GrouperThread,
    annotated,
    child_jobs,
    deployment,
    job,
    jobset,
    pod_groups,
    pods,
)
from kube import Kube, wait_until

REPO = Path(__file__).resolve().parents[2]



def test_batch_job_gets_one_podgroup_and_annotated_pods(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    ns = scoped
    t0 = time.monotonic()
    created = kube.create(
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        job("train", 3, annotations={"kai.scheduler/batch-min-member": "3"}),
    )
    ps = wait_until(lambda: annotated(kube, ns, 3, "job-name=train"), 30, what="3 annotated pods")
    elapsed = time.monotonic() - t0
    uid = created["metadata"]["uid"]
    name = f"pg-train-{uid}"
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {name}
    pg = pod_groups(kube, ns)[name]
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["queue"] == "default-queue" and pg["spec"]["priorityClassName"] == "train"
    assert pg["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid}
    ]
    # the 3 pods of one Job cost one PodGroup write and 3 pod patches, nothing else
    grouper.wait_idle()
    assert grouper.requests("create", "podgroups") == 1
    assert grouper.requests("update", "podgroups") == 0
    assert grouper.requests("patch", "pods") == 3
    rec = grouper.store.pod_group(ns, name)
    assert rec is not None and rec.ok and sorted(rec.pods) == sorted(p["metadata"]["name"] for p in ps)
    lat = grouper.metrics.value("podgrouper_pod_grouped_latency_seconds_count")
    print(
        f"\n[measure] Job with 3 pods: all annotated {elapsed:.2f}s after the Job was created; "
        f"pod_grouped_latency observations={lat:.0f}"
    )
    assert lat == 3


def test_deployment_gets_one_gang_podgroup(kube: Kube, scoped: str, grouper: GrouperThread) -> None:
    """KAI v0.18: a Deployment is gang-scheduled by default, one PodGroup owned by the Deployment."""
    ns = scoped
    dep = kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("serve", 2))
    ps = wait_until(lambda: annotated(kube, ns, 2, "app=serve"), 30, what="2 annotated pods")
    pgs = pod_groups(kube, ns)
    name = f"pg-serve-{dep['metadata']['uid']}"
    assert set(pgs) == {name}
    assert all(p["metadata"]["annotations"][ANNOTATION] == name for p in ps)
    owner = pgs[name]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Deployment", dep["metadata"]["uid"])
    assert pgs[name]["spec"]["priorityClassName"] == "inference"
    assert pgs[name]["spec"]["minMember"] == 1
    assert pgs[name]["spec"]["topologyConstraint"] == {}  # stored as KAI stores it


def test_deployment_per_pod_with_gang_schedule_off(cluster: Any, kube: Kube, scoped: str) -> None:
    ns = scoped
    with GrouperThread(cluster, ns, deployment_gang_schedule=False):
        kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("serve", 2))
        ps = wait_until(lambda: annotated(kube, ns, 2, "app=serve"), 30, what="2 annotated pods")
    pgs = pod_groups(kube, ns)
    for p in ps:
        m = p["metadata"]
        name = f"pg-{m['name']}-{m['uid']}"
        assert m["annotations"][ANNOTATION] == name
        assert pgs[name]["metadata"]["ownerReferences"][0]["kind"] == "Pod"
        assert pgs[name]["metadata"]["ownerReferences"][0]["uid"] == m["uid"]
        assert pgs[name]["spec"]["priorityClassName"] == "inference"
    assert len(pgs) == 2


def test_deployment_with_per_pod_podgroups_keeps_them_when_gang_turns_on(
    cluster: Any, kube: Kube, scoped: str
) -> None:
    """KAI's legacy path: pods already spread over per-pod PodGroups are not re-parented; a new pod of that
    Deployment gets its own PodGroup too."""
    ns = scoped
    with GrouperThread(cluster, ns, deployment_gang_schedule=False):
        kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("serve", 2))
        wait_until(lambda: annotated(kube, ns, 2, "app=serve"), 30, what="2 annotated pods")
    with GrouperThread(cluster, ns):
        kube.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/serve", {"spec": {"replicas": 3}})
        ps = wait_until(lambda: annotated(kube, ns, 3, "app=serve"), 30, what="3 annotated pods")
    pgs = pod_groups(kube, ns)
    assert len(pgs) == 3
    for p in ps:
        m = p["metadata"]
        assert m["annotations"][ANNOTATION] == f"pg-{m['name']}-{m['uid']}"


def test_jobset_one_podgroup_with_subgroups_and_rescale_without_pod_events(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    ns = scoped
    js = kube.create(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", jobset("js"))
    for j in child_jobs(js):
        kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", j)
    ps = wait_until(
        lambda: annotated(kube, ns, 5, "jobset.sigs.k8s.io/jobset-name=js"),
        30,
        what="5 annotated JobSet pods",
    )
    name = f"pg-js-{js['metadata']['uid']}"
    assert {p["metadata"]["annotations"][ANNOTATION] for p in ps} == {name}
    for p in ps:
        labels = p["metadata"]["labels"]
        expected = f"{labels['jobset.sigs.k8s.io/replicatedjob-name']}-replica-{labels['jobset.sigs.k8s.io/job-index']}"
        assert labels[SUBGROUP] == expected
    pg = pod_groups(kube, ns)[name]
    assert len(pod_groups(kube, ns)) == 1
    spec = pg["spec"]
    assert spec["minSubGroup"] == 2 and "minMember" not in spec
    subs = {s["name"]: s for s in spec["subGroups"]}
    assert subs["leader"] == {"name": "leader", "minSubGroup": 1}
    assert subs["workers"] == {"name": "workers", "minSubGroup": 2}
    assert subs["workers-replica-1"] == {"name": "workers-replica-1", "minMember": 2, "parent": "workers"}
    assert subs["leader-replica-0"]["minMember"] == 1
    grouper.wait_idle()

    # a change to the JobSet alone (no pod event) re-evaluates its PodGroup
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pods(kube, ns)}
    kube.patch(
        f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/js",
        {"metadata": {"annotations": {"kai.scheduler/batch-min-member": "1"}}},
    )
    wait_until(
        lambda: pod_groups(kube, ns)[name]["spec"].get("minSubGroup") == 1,
        20,
        what="root minSubGroup 1 after the JobSet annotation",
    )
    after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pods(kube, ns)}
    assert before == after, "no pod changed: the JobSet event alone triggered the reconcile"


def test_karta_applied_at_run_time_and_scaling_the_custom_workload(kube: Kube, cluster: Any, scoped: str) -> None:
    # Batchling is allowed as an owner kind by flag, so before its Karta exists the default grouper
    # groups it as a whole (without the flag its pods would each get their own PodGroup)
    with GrouperThread(cluster, scoped, extra_owner_kinds="Batchling.example.com") as grouper:
        _karta_applied_at_run_time(kube, scoped, grouper)


def _karta_applied_at_run_time(kube: Kube, scoped: str, grouper: GrouperThread) -> None:
    ns = scoped
    docs = list(yaml.safe_load_all((REPO / "examples" / "custom-batchling.yaml").read_text()))
    workload = {
        **docs[0],
        "metadata": {k: v for k, v in docs[0]["metadata"].items() if k in ("name", "labels", "annotations")},
    }
    bl = kube.create(f"/apis/example.com/v1/namespaces/{ns}/batchlings", workload)
    uid = bl["metadata"]["uid"]
    for doc in docs[1:]:
        meta = {k: v for k, v in doc["metadata"].items() if k in ("name", "labels")}
        meta["ownerReferences"] = [{**doc["metadata"]["ownerReferences"][0], "uid": uid}]
        kube.create(f"/api/v1/namespaces/{ns}/pods", {**doc, "metadata": meta})
    # no Karta for Batchling yet: the default grouper makes one flat PodGroup for the workload
    default_name = f"pg-sim-sweep-{uid}"
    wait_until(lambda: annotated(kube, ns, 4), 30, what="pods grouped by the default grouper")
    assert {p["metadata"]["annotations"][ANNOTATION] for p in pods(kube, ns)} == {default_name}

    karta = yaml.safe_load((REPO / "examples" / "batchling-karta.yaml").read_text())
    kube.create("/apis/run.ai/v1alpha1/kartas", karta)
    try:
        karta_name = f"pg-{uid}-batchling"

        def regrouped() -> bool:
            ps = pods(kube, ns)
            return all(p["metadata"]["annotations"].get(ANNOTATION) == karta_name for p in ps)

        wait_until(regrouped, 30, what="pods moved to the Karta PodGroup without a restart")
        # the PodGroup it replaced is named by no pod any more: the grouper deletes it (and only it)
        wait_until(lambda: set(pod_groups(kube, ns)) == {karta_name}, 15, what="the replaced PodGroup deleted")
        # the API shows the delete before the grouper counts it (after the server's answer): wait for the count
        wait_until(lambda: grouper.metrics.value("podgrouper_podgroups_deleted_total") == 1, 15,
                   what="the delete counted")
        time.sleep(0.5)
        assert grouper.metrics.value("podgrouper_podgroups_deleted_total") == 1, "one delete, not more"
        assert (
            grouper.metrics.value("podgrouper_karta_definitions", {"origin": "cluster", "state": "valid"})
            == 1
        )
        assert (
            grouper.metrics.value("podgrouper_karta_definitions", {"origin": "builtin", "state": "valid"}) > 0
        )
        for p in pods(kube, ns):
            assert p["metadata"]["labels"][SUBGROUP] == p["metadata"]["labels"]["example.com/role"]
        pg = pod_groups(kube, ns)[karta_name]
        subs = {s["name"]: s for s in pg["spec"]["subGroups"]}
        assert subs["worker"]["minMember"] == 3 and subs["coordinator"]["minMember"] == 1
        assert pg["spec"]["queue"] == "team-a"

        # scale the workload: its PodGroup follows, no pod event involved
        kube.patch(
            f"/apis/example.com/v1/namespaces/{ns}/batchlings/sim-sweep",
            {"spec": {"workers": {"replicas": 5}}},
        )

        def worker_min() -> int:
            spec = pod_groups(kube, ns)[karta_name]["spec"]
            return int({s["name"]: s for s in spec["subGroups"]}["worker"]["minMember"])

        wait_until(lambda: worker_min() == 5, 20, what="worker sub-group minMember 5")

        # removing the Karta would weaken the running gang: it is held (core/hold.py) until the workload
        # changes; then the pods go back to the default PodGroup and stale sub-group labels are removed
        kube.delete(f"/apis/run.ai/v1alpha1/kartas/{karta['metadata']['name']}")
        wait_until(
            lambda: "podgrouper.kai.scheduler/held" in (pod_groups(kube, ns)[karta_name]["metadata"].get("annotations") or {}),
            20, what="the gang PodGroup held",
        )
        kube.patch(
            f"/apis/example.com/v1/namespaces/{ns}/batchlings/sim-sweep",
            {"spec": {"workers": {"replicas": 3}}},
        )

        def back_to_default() -> bool:
            return all(
                p["metadata"]["annotations"].get(ANNOTATION) == default_name
                and SUBGROUP not in p["metadata"]["labels"]
                for p in pods(kube, ns)
            )

        wait_until(back_to_default, 30, what="pods back on the default PodGroup without sub-group labels")
        wait_until(lambda: set(pod_groups(kube, ns)) == {default_name}, 15, what="the Karta PodGroup deleted")
        detail = grouper.store.pods_of_group(ns, karta_name)
        assert detail == [], "no pod is counted for the PodGroup it left"
    finally:
        kube.delete(f"/apis/run.ai/v1alpha1/kartas/{karta['metadata']['name']}", ignore_missing=True)


def warning_events(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list(
            f"/api/v1/namespaces/{ns}/events",
            field_selector=f"involvedObject.name={name},reason=PodGrouperWarning",
        )
    ]


def test_failing_workload_reports_events_and_does_not_block_others(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    ns = scoped
    kube.create(
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        job("broken", 2, annotations={"kai.scheduler/batch-min-member": "lots"}),
    )
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("healthy", 2))
    wait_until(lambda: annotated(kube, ns, 2, "job-name=healthy"), 30, what="the healthy Job grouped")
    job_events = wait_until(lambda: warning_events(kube, ns, "broken"), 30, what="a warning Event on the Job")
    ev = job_events[0]
    assert ev["type"] == "Warning" and ev["source"]["component"] == "pod-grouper"
    assert ev["involvedObject"]["kind"] == "Job"
    assert "batch-min-member" in ev["message"] and "lots" in ev["message"]
    broken_pods = pods(kube, ns, "job-name=broken")
    assert broken_pods and not any(
        (p["metadata"].get("annotations") or {}).get(ANNOTATION) for p in broken_pods
    )
    for p in broken_pods:
        assert warning_events(kube, ns, p["metadata"]["name"]), "each failing pod gets its own Event"
    # a malformed workload is a decision error no retry can fix: reported once, not retried in a loop
    # (its next change re-queues it); the Events do not multiply
    grouper.wait_idle()
    retries = grouper.metrics.value("podgrouper_workqueue_retries_total")
    errors = grouper.metrics.value("podgrouper_decision_errors_total", {"reason": "InvalidWorkload"})
    time.sleep(2.5)  # a back-off loop would have retried at 1 s and 2 s by now
    assert grouper.metrics.value("podgrouper_workqueue_retries_total") == retries == 0
    assert grouper.metrics.value("podgrouper_decision_errors_total", {"reason": "InvalidWorkload"}) == errors >= 2
    events = warning_events(kube, ns, "broken")
    assert len(events) == 1, [e["message"] for e in events]
    assert grouper.store.pod(ns, broken_pods[0]["metadata"]["name"]).last_error  # type: ignore[union-attr]

    # fixing the workload is picked up from the Job event alone
    kube.patch(
        f"/apis/batch/v1/namespaces/{ns}/jobs/broken",
        {"metadata": {"annotations": {"kai.scheduler/batch-min-member": "2"}}},
    )
    wait_until(lambda: annotated(kube, ns, 2, "job-name=broken"), 30, what="the fixed Job grouped")


def test_deleting_the_workload_garbage_collects_its_podgroup(
    kube: Kube, scoped: str, grouper: GrouperThread
) -> None:
    ns = scoped
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("short", 2))
    wait_until(lambda: annotated(kube, ns, 2, "job-name=short"), 30, what="grouped")
    assert len(pod_groups(kube, ns)) == 1
    kube.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/short", propagation="Background")
    wait_until(lambda: not pod_groups(kube, ns), 30, what="the PodGroup garbage-collected")
    wait_until(lambda: not pods(kube, ns), 30, what="pods gone")
    grouper.wait_idle()
    assert grouper.store.pod_groups(ns) == [], "the decision store forgets a workload that is gone"
    noise = kube.list(f"/api/v1/namespaces/{ns}/events", field_selector="reason=PodGrouperWarning")
    assert noise == [], "pods orphaned by the deletion (until the GC removes them) raise no warnings"
