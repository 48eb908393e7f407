"""The one tracker of our own writes: every watch event clears it, the cache wins once it caught up."""

from __future__ import annotations

import time

from grouper.writer.expectations import WriteExpectations


def pg(name: str, rv: str, uid: str = "u1", min_member: int = 1) -> dict:
    return {
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "uid": uid},
        "spec": {"minMember": min_member},
    }


def test_own_write_is_current_until_the_cache_shows_it() -> None:
    e = WriteExpectations()
    e.wrote("PodGroup", pg("a", "10"))
    assert e.current("PodGroup", "ns", "a", None) == pg("a", "10")  # cache has not seen the create
    assert e.current("PodGroup", "ns", "a", pg("a", "9")) == pg("a", "10")  # cache older than our write
    assert e.current("PodGroup", "ns", "a", pg("a", "10")) == pg("a", "10")  # caught up: entry dropped
    assert len(e) == 0


def test_the_echo_is_recognised_and_clears_the_entry() -> None:
    e = WriteExpectations()
    e.wrote("PodGroup", pg("a", "10"))
    assert e.observe("PodGroup", "ADDED", pg("a", "10")) is True
    assert len(e) == 0
    assert e.observe("PodGroup", "MODIFIED", pg("a", "10")) is False  # nothing expected any more


def test_a_hand_delete_after_our_create_is_not_answered_from_memory() -> None:
    """The bug of the faults issue: create remembered, echo ignored, then DELETED → must re-create."""
    e = WriteExpectations()
    e.wrote("PodGroup", pg("a", "10"))
    assert e.observe("PodGroup", "ADDED", pg("a", "10"))  # echo
    assert e.observe("PodGroup", "DELETED", pg("a", "11")) is False  # a person deleted it: news
    assert e.current("PodGroup", "ns", "a", None) is None  # the writer sees it is gone and creates it


def test_a_delete_before_the_echo_clears_the_entry_too() -> None:
    e = WriteExpectations()
    e.wrote("PodGroup", pg("a", "10"))
    assert e.observe("PodGroup", "DELETED", pg("a", "12")) is False
    assert e.current("PodGroup", "ns", "a", None) is None


def test_somebody_elses_edit_clears_the_entry() -> None:
    e = WriteExpectations()
    e.wrote("PodGroup", pg("a", "10"))
    edited = pg("a", "11", min_member=7)
    assert e.observe("PodGroup", "MODIFIED", edited) is False
    assert e.current("PodGroup", "ns", "a", edited) == edited


def test_a_newer_cached_version_supersedes_our_write() -> None:
    e = WriteExpectations()
    e.wrote("PodGroup", pg("a", "10"))
    newer = pg("a", "12", min_member=3)
    assert e.current("PodGroup", "ns", "a", newer) == newer


def test_entries_expire() -> None:
    e = WriteExpectations(ttl=0.01)
    e.wrote("PodGroup", pg("a", "10"))
    time.sleep(0.02)
    assert e.current("PodGroup", "ns", "a", None) is None


def test_our_delete_until_the_watch_agrees() -> None:
    e = WriteExpectations()
    e.deleted("PodGroup", "ns", "a", "u1")
    assert e.current("PodGroup", "ns", "a", pg("a", "10")) is None  # cache still shows it
    assert e.observe("PodGroup", "DELETED", pg("a", "10")) is True  # the echo of our delete
    assert e.current("PodGroup", "ns", "a", pg("a", "10", uid="u2")) == pg("a", "10", uid="u2")


def test_recreated_object_with_another_uid_is_not_our_delete() -> None:
    e = WriteExpectations()
    e.deleted("PodGroup", "ns", "a", "u1")
    fresh = pg("a", "20", uid="u2")
    assert e.current("PodGroup", "ns", "a", fresh) == fresh


def test_bounded() -> None:
    e = WriteExpectations(max_entries=3)
    for i in range(10):
        e.wrote("Pod", pg(f"p{i}", str(i)))
    assert len(e) == 3
    assert e.current("Pod", "ns", "p0", None) is None and e.current("Pod", "ns", "p9", None) is not None


def test_an_event_older_than_our_write_keeps_the_entry() -> None:
    """The scheduler bound the pod (rv 11) before our patch (rv 12) but the watch delivers it after:
    it must not make us patch again from the older cached version."""
    e = WriteExpectations()
    e.wrote("Pod", pg("p", "12"))
    assert e.observe("Pod", "MODIFIED", pg("p", "11")) is False
    assert e.current("Pod", "ns", "p", pg("p", "11")) == pg("p", "12")
    assert e.observe("Pod", "MODIFIED", pg("p", "12")) is True  # then the echo
    assert len(e) == 0


def test_our_write_is_remembered_without_its_managed_fields_and_the_callers_object_is_left_alone() -> None:
    e = WriteExpectations()
    written = pg("a", "10")
    written["metadata"]["managedFields"] = [{"manager": "kai-pod-grouper", "fieldsV1": {"f:spec": {}}}]
    e.wrote("PodGroup", written)
    assert e.current("PodGroup", "ns", "a", None) == pg("a", "10")
    assert written["metadata"]["managedFields"][0]["manager"] == "kai-pod-grouper"  # the writer's copy intact
    assert e.observe("PodGroup", "MODIFIED", pg("a", "10")) is True  # still recognised as our echo
