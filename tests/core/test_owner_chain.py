"""Owner resolution: controller reference first, forbidden reads, missing owners, cycles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grouper.core.lookups import InMemoryLookups
from grouper.core.owner_chain import resolve_owners
from grouper.core.workload_context import WorkloadContext
from grouper.manifests import load_manifests
from grouper.model.errors import InvalidWorkload, OwnerCycle, OwnerNotFound, OwnerUidMismatch
from grouper.runtime.composition import build_grouper

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def obj(api_version: str, kind: str, name: str, uid: str, owners: list[dict] | None = None, ns: str = "ns") -> dict:
    meta: dict = {"name": name, "namespace": ns, "uid": uid}
    if owners:
        meta["ownerReferences"] = owners
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def ref(o: dict, controller: bool | None = None) -> dict:
    r = {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}
    if controller is not None:
        r["controller"] = controller
    return r


class CountingLookups(InMemoryLookups):
    """Counts the owner reads a walk makes."""

    gets = 0

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        self.gets += 1
        return super().get(api_version, kind, namespace, name)


JOBSET = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "u-js")
JOB = obj("batch/v1", "Job", "js-worker-0", "u-job", [ref(JOBSET, True)])


def test_walks_to_the_top_owner_direct_owner_first() -> None:
    pod = obj("v1", "Pod", "p", "u-pod", [ref(JOB, True)])
    chain = resolve_owners(pod, InMemoryLookups([JOBSET, JOB]))
    assert [o["metadata"]["name"] for o in chain.owners] == ["js-worker-0", "js"]
    assert chain.top_owner is JOBSET
    assert chain.truncated is None


def test_ownerless_pod_is_its_own_top_owner() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    chain = resolve_owners(pod, InMemoryLookups())
    assert chain.owners == []
    assert chain.top_owner["kind"] == "Pod" and chain.top_owner["apiVersion"] == "v1"


def test_follows_the_controller_reference_not_the_first() -> None:
    other = obj("v1", "ConfigMap", "cm", "u-cm")
    pod = obj("v1", "Pod", "p", "u-pod", [ref(other), ref(JOB, True)])
    chain = resolve_owners(pod, InMemoryLookups([JOBSET, JOB, other]))
    assert chain.top_owner is JOBSET
    assert any("controller reference" in n for n in chain.notes)


def test_without_controller_reference_follows_the_first() -> None:
    other = obj("v1", "ConfigMap", "cm", "u-cm")
    pod = obj("v1", "Pod", "p", "u-pod", [ref(other), ref(JOB)])
    chain = resolve_owners(pod, InMemoryLookups([JOBSET, JOB, other]))
    assert chain.top_owner is other


def test_intermediate_with_several_owners_is_not_an_error() -> None:
    # KAI fails here ("found ... with multiple owners"); we follow the controller reference.
    extra = obj("v1", "ConfigMap", "cm", "u-cm")
    job = obj("batch/v1", "Job", "j", "u-j", [ref(extra), ref(JOBSET, True)])
    pod = obj("v1", "Pod", "p", "u-pod", [ref(job, True)])
    chain = resolve_owners(pod, InMemoryLookups([JOBSET, job, extra]))
    assert chain.top_owner is JOBSET


def test_missing_owner_is_an_error_naming_the_reference() -> None:
    pod = obj("v1", "Pod", "p", "u-pod", [ref(JOB, True)])
    with pytest.raises(OwnerNotFound) as err:
        resolve_owners(pod, InMemoryLookups([JOBSET]))
    assert "Job ns/js-worker-0" in str(err.value)
    assert "metadata.ownerReferences" in str(err.value)
    assert "Pod ns/p" in str(err.value)


def test_uid_mismatch_is_an_error() -> None:
    stale = dict(ref(JOB, True), uid="old-uid")
    pod = obj("v1", "Pod", "p", "u-pod", [stale])
    with pytest.raises(OwnerUidMismatch, match="re-created"):
        resolve_owners(pod, InMemoryLookups([JOBSET, JOB]))


def test_forbidden_owner_stops_the_walk_and_says_so() -> None:
    pod = obj("v1", "Pod", "p", "u-pod", [ref(JOB, True)])
    chain = resolve_owners(pod, InMemoryLookups([JOBSET, JOB], forbidden=[("jobset.x-k8s.io", "JobSet")]))
    assert chain.top_owner is JOB
    assert chain.truncated and "forbidden to read JobSet ns/js" in chain.truncated


def test_forbidden_first_owner_makes_the_pod_the_top_owner() -> None:
    pod = obj("v1", "Pod", "p", "u-pod", [ref(JOB, True)])
    chain = resolve_owners(pod, InMemoryLookups([JOBSET, JOB], forbidden=[("batch", "Job")]))
    assert chain.top_owner["metadata"]["name"] == "p"
    assert chain.owners == []


def test_reference_cycle_is_an_error() -> None:
    a = obj("example.com/v1", "A", "a", "u-a")
    b = obj("example.com/v1", "B", "b", "u-b", [ref(a, True)])
    a["metadata"]["ownerReferences"] = [ref(b, True)]
    pod = obj("v1", "Pod", "p", "u-pod", [ref(a, True)])
    with pytest.raises(OwnerCycle, match="cycle") as err:
        resolve_owners(pod, InMemoryLookups([a, b]))
    assert err.value.reason == "OwnerCycle" and not err.value.retryable


@pytest.mark.parametrize(
    "refs,field",
    [("hello", "metadata.ownerReferences"), (["x"], "metadata.ownerReferences[0]"),
     ([{"kind": "A", "name": "a"}], "metadata.ownerReferences[0].apiVersion")],
)
def test_malformed_owner_references_name_the_field(refs: object, field: str) -> None:
    pod = obj("v1", "Pod", "p", "u-pod")
    pod["metadata"]["ownerReferences"] = refs
    with pytest.raises(InvalidWorkload, match=re.escape(f"field {field}:")) as err:
        resolve_owners(pod, InMemoryLookups([]))
    assert not err.value.retryable


# ---------------------------------------------------------------- chains shared by sibling pods


def test_siblings_of_one_owner_share_its_chain_walked_once() -> None:
    lookups = CountingLookups([JOBSET, JOB])
    chains = WorkloadContext()
    pods = [obj("v1", "Pod", f"p{i}", f"u-p{i}", [ref(JOB, True)]) for i in range(3)]
    got = [chains.chain(p, lookups) for p in pods]
    assert got[0] is got[1] is got[2]
    assert lookups.gets == 2  # the Job and the JobSet, once
    assert got[0].top_owner is JOBSET
    chains = WorkloadContext()  # the next pass
    assert chains.chain(pods[0], lookups) == got[0] and lookups.gets == 4  # walked again in a new context


@pytest.mark.parametrize(
    "owners",
    [
        [ref(obj("v1", "ConfigMap", "cm", "u-cm")), ref(JOB, True)],  # two references: notes name the pod
        [{k: v for k, v in ref(JOB, True).items() if k != "uid"}],  # no uid to tell owners apart
        [ref(obj("v1", "Pod", "parent", "u-parent"), True)],  # a pod's chain goes through that pod
    ],
    ids=["two-owners", "no-uid", "pod-owned"],
)
def test_pods_whose_chain_is_their_own_are_walked_every_time(owners: list[dict]) -> None:
    parent = obj("v1", "Pod", "parent", "u-parent")
    lookups = CountingLookups([JOBSET, JOB, obj("v1", "ConfigMap", "cm", "u-cm"), parent])
    chains = WorkloadContext()
    pods = [obj("v1", "Pod", f"p{i}", f"u-p{i}", owners) for i in range(2)]
    first = chains.chain(pods[0], lookups)
    walk = lookups.gets
    second = chains.chain(pods[1], lookups)
    assert first is not second and first.owners == second.owners
    assert walk > 0 and lookups.gets == 2 * walk  # the second pod walked its chain itself
    if len(owners) == 2:
        assert "Pod ns/p0" in first.notes[0] and "Pod ns/p1" in second.notes[0]


def test_truncated_or_failed_walks_are_not_shared() -> None:
    chains = WorkloadContext()
    pods = [obj("v1", "Pod", f"p{i}", f"u-p{i}", [ref(JOB, True)]) for i in range(2)]
    forbidden = InMemoryLookups([JOBSET, JOB], forbidden={("jobset.x-k8s.io", "JobSet")})
    first = chains.chain(pods[0], forbidden)
    assert first.truncated
    with pytest.raises(OwnerNotFound):
        chains.chain(pods[1], InMemoryLookups([]))  # walked again, on the lookups given, not the first's
    assert chains.chain(pods[1], InMemoryLookups([JOBSET, JOB])).truncated is None


def test_deciding_siblings_with_shared_chains_gives_the_same_decisions() -> None:
    grouper = build_grouper()
    for files in (("jobset-demo.yaml", "jobset-demo-pods.yaml"), ("pytorchjob.yaml",), ("raycluster.yaml",),
                  ("leaderworkerset.yaml",), ("deployment.yaml",), ("bare-pod.yaml",)):
        objs = [m.obj for m in load_manifests([EXAMPLES / f for f in files])]
        pods = [p for p in objs if p.get("kind") == "Pod"]
        assert pods, files
        lookups = InMemoryLookups(objs)
        chains = WorkloadContext()
        assert [grouper.decide(p, lookups, chains) for p in pods] == [grouper.decide(p, lookups) for p in pods]
