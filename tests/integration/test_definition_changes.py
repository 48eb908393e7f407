"""Definition changes against the real API server: turning the Karta step off changes which grouper decides,
not how far the owner walk goes (KAI walks to the top owner and gives it the default grouper); a Karta
deleted or changed so that a running workload's gang would weaken keeps that workload's PodGroup until the
workload itself changes (docs: the hold rule in grouper/core/hold.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

