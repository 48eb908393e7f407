"""What grouping reads of an object (``core/reads.py``): an update that changes none of it is no news."""

from __future__ import annotations

import copy

from grouper.core.reads import STATUS_READING_GROUPS, pod_signature, same_reads

OWNER = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "1", "generation": 1,
                 "labels": {"a": "1"}, "managedFields": [{"manager": "x"}]},
    "spec": {"parallelism": 2}, "status": {"active": 1},
}


def test_an_update_of_what_is_never_read_is_no_news() -> None:
    new = copy.deepcopy(OWNER)
    new["metadata"].update(resourceVersion="2", generation=2, managedFields=[{"manager": "y"}])
    new["status"] = {"active": 2}
    assert same_reads(OWNER, new)
    assert not same_reads(OWNER, new, keep_status=True), "a kind whose plugin reads status: news"
    assert "ray.io" in STATUS_READING_GROUPS
    for change in ({"spec": {"parallelism": 3}}, {"metadata": {**OWNER["metadata"], "labels": {"a": "2"}}}):
        assert not same_reads(OWNER, {**OWNER, **change})


def test_a_pod_signature_is_what_a_decision_reads() -> None:
    pod = {"metadata": {"name": "p", "labels": {"a": "1"}, "resourceVersion": "1"}, "spec": {"x": 1},
           "status": {"phase": "Pending"}}
    bumped = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"}, "status": {"phase": "Running"}}
    assert pod_signature(pod) == pod_signature(bumped)
    assert pod_signature(pod) != pod_signature({**pod, "status": {"phase": "Succeeded"}}), "finished: news"
    assert pod_signature(pod) != pod_signature({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "t"}})
