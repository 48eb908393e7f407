"""``GVK.from_api_version``: parsed once per (apiVersion, kind) and kept, with a bounded table."""

from __future__ import annotations

from grouper.model import objects
from grouper.model.objects import GVK


def test_parses_core_and_grouped_api_versions() -> None:
    assert GVK.from_api_version("v1", "Pod") == GVK("", "v1", "Pod")
    assert GVK.from_api_version("jobset.x-k8s.io/v1alpha2", "JobSet") == GVK("jobset.x-k8s.io", "v1alpha2", "JobSet")
    assert GVK.from_api_version("", "Thing") == GVK("", "", "Thing")
    # kept: the same tuple the next time, and the kind is part of the key
    assert GVK.from_api_version("batch/v1", "Job") is GVK.from_api_version("batch/v1", "Job")
    assert GVK.from_api_version("batch/v1", "CronJob").kind == "CronJob"


def test_made_up_kinds_do_not_grow_the_table_without_bound() -> None:
    for i in range(3 * objects._GVKS.limit):
        assert GVK.from_api_version(f"evil{i}.example.com/v1", f"K{i}") == GVK(f"evil{i}.example.com", "v1", f"K{i}")
    assert len(objects._GVKS) <= objects._GVKS.limit
    assert GVK.from_api_version("v1", "Pod") == GVK("", "v1", "Pod")
