"""Definition changes against the real API server: turning the Karta step off changes which grouper decides,
not how far the owner walk goes (KAI walks to the top owner and gives it the default grouper); a Karta
deleted or changed so that a running workload's gang would weaken keeps that workload's PodGroup until the
workload itself changes (docs: the hold rule in grouper/core/hold.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import yaml
from controller.harness import ANNOTATION, GrouperThread, annotated, pod_groups, pods
from kube import Kube, wait_until

REPO = Path(__file__).resolve().parents[2]
KARTA = yaml.safe_load((REPO / "examples" / "batchling-karta.yaml").read_text())
KARTA_PATH = f"/apis/run.ai/v1alpha1/kartas/{KARTA['metadata']['name']}"


def batchling(kube: Kube, ns: str, name: str = "sim-sweep") -> dict[str, Any]:
    """The example Batchling and its 4 pods (the test plays its operator); returns the Batchling."""
    docs = list(yaml.safe_load_all((REPO / "examples" / "custom-batchling.yaml").read_text()))
    meta = {k: v for k, v in docs[0]["metadata"].items() if k in ("labels", "annotations")}
    bl = kube.create(f"/apis/example.com/v1/namespaces/{ns}/batchlings", {**docs[0], "metadata": {**meta, "name": name}})
    for doc in docs[1:]:
        add_pod(kube, ns, bl, doc["metadata"]["name"].replace("sim-sweep", name), doc)
    return bl


def add_pod(kube: Kube, ns: str, bl: dict[str, Any], pod_name: str, template: dict[str, Any]) -> None:
    labels = {**template["metadata"]["labels"], "example.com/batchling": bl["metadata"]["name"]}
    meta = {"name": pod_name, "labels": labels}
    meta["ownerReferences"] = [{
        "apiVersion": "example.com/v1", "kind": "Batchling", "name": bl["metadata"]["name"],
        "uid": bl["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
    }]
    kube.create(f"/api/v1/namespaces/{ns}/pods", {**template, "metadata": meta})


def test_karta_step_off_still_walks_to_the_top_owner(kube: Kube, cluster: Any, scoped: str) -> None:
    """--generic-karta-fallback=false with a Batchling Karta loaded: KAI walks the pods' owners to the
    Batchling and gives it the default grouper (one PodGroup pg-<name>-<uid>, minMember 1, owned by the
    Batchling). Before the fix the walk stopped at the pod (Batchling not an allowed owner kind without
    the Karta step): one PodGroup per pod."""
    ns = scoped
    kube.create("/apis/run.ai/v1alpha1/kartas", KARTA)
    try:
        with GrouperThread(cluster, ns, generic_karta_fallback=False) as grouper:
            bl = batchling(kube, ns)
            uid = bl["metadata"]["uid"]
            wait_until(lambda: annotated(kube, ns, 4), 30, what="4 grouped pods")
            grouper.wait_idle()
            name = f"pg-sim-sweep-{uid}"
            assert {p["metadata"]["annotations"][ANNOTATION] for p in pods(kube, ns)} == {name}
            pg = pod_groups(kube, ns)[name]
            assert pg["spec"]["minMember"] == 1 and "subGroups" not in pg["spec"]
            owner = pg["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["uid"]) == ("Batchling", uid)
            assert set(pod_groups(kube, ns)) == {name}
    finally:
        kube.delete(KARTA_PATH, ignore_missing=True)


HELD = "podgrouper.kai.scheduler/held"
SOURCE = "podgrouper.kai.scheduler/definition"


def gang_held_events(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.list(
        f"/api/v1/namespaces/{namespace}/events", field_selector=f"involvedObject.name={name},reason=GangHeld"
    )


def karta_events_of(kube: Kube, pod_group: str) -> list[dict[str, Any]]:
    """The Karta's GangHeld Events about this PodGroup: the Karta is cluster-scoped and shared by the tests of
    a session (test_controller_workloads holds a gang of its own), so its Events are told apart by the
    PodGroup they name (its name holds the workload's uid)."""
    return [e for e in gang_held_events(kube, "default", KARTA["metadata"]["name"])
            if pod_group in e.get("message", "")]


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    from grouper.cli.main import main

    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def impact_of(capsys: Any, cluster: Any, ns: str, *extra: str) -> list[dict[str, Any]]:
    code, out, err = run_cli(capsys, "definitions", "impact", KARTA["metadata"]["name"], "--kubeconfig",
                             cluster.kubeconfig_path, "-o", "json", *extra)
    assert code == 0, err
    return [w for w in json.loads(out)["workloads"] if w["namespace"] == ns]


def test_deleting_a_karta_holds_running_gangs(kube: Kube, cluster: Any, scoped: str, capsys: Any,
                                              tmp_path: Path) -> None:
    """Hostile-testing repro: `kubectl delete karta example-com-batchling-v1` with a running Batchling
    replaced its gang PodGroup (minSubGroup 2, sub-groups) by a default one (minMember 1) within a second,
    with no Warning. Now: the PodGroup is held until the Batchling changes, said once on each object."""
    ns = scoped
    karta = kube.create("/apis/run.ai/v1alpha1/kartas", KARTA)
    try:
        with GrouperThread(cluster, ns) as grouper:
            bl = batchling(kube, ns)
            uid = bl["metadata"]["uid"]
            gang = f"pg-{uid}-batchling"
            wait_until(lambda: annotated(kube, ns, 4), 30, what="4 grouped pods")
            wait_until(lambda: SOURCE in (pod_groups(kube, ns).get(gang, {}).get("metadata", {}).get("annotations") or {}),
                       30, what="the gang PodGroup, with its source")
            grouper.wait_idle()
            before = pod_groups(kube, ns)[gang]
            assert before["spec"]["minSubGroup"] == 2

            # asked in advance: deleting it would weaken the gang, which would be held
            [item] = impact_of(capsys, cluster, ns)
            assert item["workload"] == "Batchling/sim-sweep" and item["pods"] == 4
            assert item["before"] == [{"podGroup": gang, "gang": "minSubGroup 2, sub-groups coordinator=1, worker=3"}]
            assert item["after"] == [{"podGroup": f"pg-sim-sweep-{uid}", "gang": "minMember 1, no sub-groups"}]
            assert item["effect"] == "weaker: would be held (minSubGroup 2 -> 0; sub-groups 2 -> 0)"
            code, text, _ = run_cli(capsys, "definitions", "impact", KARTA["metadata"]["name"],
                                    "--kubeconfig", cluster.kubeconfig_path)
            assert code == 0 and f"{ns}/Batchling/sim-sweep (4 pods): weaker: would be held" in text
            # a new version whose gang is as strong (only the workers' topology dropped) is applied
            stronger = yaml.safe_load(yaml.safe_dump(KARTA))
            worker = stronger["spec"]["optimizationInstructions"]["gangScheduling"]["podGroup"]["subGroups"][1]
            worker.pop("topology")
            (tmp_path / "new.yaml").write_text(yaml.safe_dump(stronger))
            assert impact_of(capsys, cluster, ns, "-f", str(tmp_path / "new.yaml")) == [
                {**item, "after": [{"podGroup": gang, "gang": item["before"][0]["gang"]}],
                 "effect": "applied"}
            ]

            # a new version with a weaker gang (the coordinator sub-group dropped) would be held too
            weaker = yaml.safe_load(yaml.safe_dump(KARTA))
            weaker["spec"]["optimizationInstructions"]["gangScheduling"]["podGroup"]["subGroups"].pop(0)
            (tmp_path / "weaker.yaml").write_text(yaml.safe_dump(weaker))
            [changed] = impact_of(capsys, cluster, ns, "-f", str(tmp_path / "weaker.yaml"))
            assert changed["after"] == [{"podGroup": gang, "gang": "minSubGroup 1, sub-groups worker=3"}]
            assert changed["effect"] == "weaker: would be held (minSubGroup 2 -> 1; sub-groups 2 -> 1)"

            # a running gang: its PodGroup is not replaced
            kube.delete(KARTA_PATH)
            wait_until(lambda: HELD in (pod_groups(kube, ns)[gang]["metadata"].get("annotations") or {}), 30,
                       what="the gang PodGroup marked held")
            other = batchling(kube, ns, "fresh")  # a new workload gets the default grouper
            default_other = f"pg-fresh-{other['metadata']['uid']}"
            wait_until(lambda: annotated(kube, ns, 8), 30, what="the new workload's pods grouped")
            grouper.wait_idle()
            pgs = pod_groups(kube, ns)
            assert set(pgs) == {gang, default_other}
            assert pgs[default_other]["spec"]["minMember"] == 1
            held = pgs[gang]
            assert held["spec"] == before["spec"] and held["metadata"]["uid"] == before["metadata"]["uid"]
            message = held["metadata"]["annotations"][HELD]
            assert message.startswith("held: definition example-com-batchling-v1 deleted would weaken the gang")
            assert "from minSubGroup 2, sub-groups coordinator=1, worker=3 to minMember 1, no sub-groups" in message
            assert message.endswith("kept until the workload changes")
            assert {p["metadata"]["annotations"][ANNOTATION] for p in pods(kube, ns, "example.com/batchling=sim-sweep")} == {gang}
            rec = grouper.store.pod(ns, "sim-sweep-worker-0")
            assert rec is not None and rec.reason == "Held" and rec.pod_group == gang
            assert message in rec.message
            pg_rec = grouper.store.pod_group(ns, gang)
            assert pg_rec is not None and pg_rec.last_operation == "held" and pg_rec.notes == (message,)
            detail = httpx.get(f"http://127.0.0.1:{grouper.service.http_port}/podgroups/{ns}/{gang}").json()
            assert message in detail["decision"]["notes"] and detail["podGroup"]["spec"] == before["spec"]
            code, text, _ = run_cli(capsys, "explain", "sim-sweep-worker-0", "-n", ns,
                                    "--kubeconfig", cluster.kubeconfig_path)
            assert code == 0 and f"the pod stays in PodGroup {gang}, {message}" in text
            # a new pod of the held workload joins the held PodGroup
            add_pod(kube, ns, bl, "sim-sweep-worker-3", _worker_template())
            wait_until(lambda: annotated(kube, ns, 9), 30, what="the new pod grouped")
            grouper.wait_idle()
            assert {p["metadata"]["annotations"][ANNOTATION] for p in pods(kube, ns, "example.com/batchling=sim-sweep")} == {gang}
            # one Warning Event on each per transition, not one per pass
            assert len(gang_held_events(kube, ns, "sim-sweep")) == 1
            assert len(karta_events_of(kube, gang)) == 1
            assert gang_held_events(kube, ns, "sim-sweep")[0]["count"] == 1
            held_version = pod_groups(kube, ns)[gang]["metadata"]["resourceVersion"]

        # a restarted grouper holds the same PodGroup (all it compares is in the cluster) and writes nothing
        with GrouperThread(cluster, ns) as grouper:
            grouper.wait_idle()
            assert grouper.writes() == 0
            assert pod_groups(kube, ns)[gang]["metadata"]["resourceVersion"] == held_version
            assert set(pod_groups(kube, ns)) == {gang, default_other}
            assert len(gang_held_events(kube, ns, "sim-sweep")) == 1
            assert len(karta_events_of(kube, gang)) == 1
            rec = grouper.store.pod(ns, "sim-sweep-worker-0")
            assert rec is not None and rec.reason == "Held"

            # the workload changes (scaled: a new generation): the rule in force now applies
            kube.patch(f"/apis/example.com/v1/namespaces/{ns}/batchlings/sim-sweep", {"spec": {"workers": {"replicas": 5}}})
            default_name = f"pg-sim-sweep-{uid}"
            wait_until(
                lambda: {p["metadata"]["annotations"].get(ANNOTATION) for p in pods(kube, ns, "example.com/batchling=sim-sweep")}
                == {default_name}, 30, what="the scaled workload's pods on the default PodGroup",
            )
            wait_until(lambda: set(pod_groups(kube, ns)) == {default_name, default_other}, 15,
                       what="the held PodGroup deleted")
            assert pod_groups(kube, ns)[default_name]["spec"]["minMember"] == 1
    finally:
        kube.delete(KARTA_PATH, ignore_missing=True)
    assert karta["metadata"]["uid"]


def _worker_template() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((REPO / "examples" / "custom-batchling.yaml").read_text()))
    return docs[2]


def unsatisfiable_events(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return [e for e in kube.list(f"/api/v1/namespaces/{namespace}/events",
                                 field_selector=f"involvedObject.name={name},reason=PodGrouperWarning")
            if "is in no sub-group" in e.get("message", "")]


def test_a_gang_that_can_never_be_satisfied_is_a_warning_event_once(kube: Kube, cluster: Any, scoped: str) -> None:
    """Hostile testing: a pod relabelled out of its component counts toward no sub-group's minimum, and
    nothing said so. The controller now says it as `grouper plan` and `explain` do (core/satisfiable.py):
    one Warning Event on the workload while it stands, not one per pass."""
    ns = scoped
    kube.create("/apis/run.ai/v1alpha1/kartas", KARTA)
    try:
        with GrouperThread(cluster, ns) as grouper:
            batchling(kube, ns)
            wait_until(lambda: annotated(kube, ns, 4), 30, what="4 grouped pods")
            grouper.wait_idle()
            assert unsatisfiable_events(kube, ns, "sim-sweep") == []  # a sound gang: nothing to say
            kube.patch(f"/api/v1/namespaces/{ns}/pods/sim-sweep-worker-2",
                       {"metadata": {"labels": {"example.com/role": "other"}}})
            wait_until(lambda: unsatisfiable_events(kube, ns, "sim-sweep"), 30, what="the Warning Event")
            for i in range(3):  # more passes over the same standing cause: no second Event
                kube.patch(f"/api/v1/namespaces/{ns}/pods/sim-sweep-worker-2",
                           {"metadata": {"labels": {"unrelated": str(i)}}})
                grouper.wait_idle()
            [event] = unsatisfiable_events(kube, ns, "sim-sweep")
            assert event["involvedObject"]["kind"] == "Batchling" and event["type"] == "Warning"
            assert "pod sim-sweep-worker-2 is in no sub-group" in event["message"]
            assert event.get("count", 1) == 1
    finally:
        kube.delete(KARTA_PATH, ignore_missing=True)
