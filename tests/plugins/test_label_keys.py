"""Each plugin declares the pod labels it reads (``label_keys``): the API shows those, and no list of its own."""

from __future__ import annotations

from pathlib import Path

from grouper.api.views import plugin_label_keys
from grouper.karta import load_file
from grouper.plugins.default import DefaultGrouper
from grouper.plugins.jobset import JOB_INDEX_LABEL, REPLICATED_JOB_LABEL
from grouper.plugins.karta import KartaGrouper, definition_label_keys
from grouper.plugins.registry import native_plugins

DEFINITIONS = Path(__file__).resolve().parents[2] / "definitions"


def test_every_native_plugin_declares_the_labels_it_reads() -> None:
    for gvk, plugin in native_plugins().items():
        keys = plugin.label_keys  # type: ignore[attr-defined]
        assert isinstance(keys, frozenset) and all(isinstance(k, str) and k for k in keys), gvk
    table = native_plugins()
    assert {REPLICATED_JOB_LABEL, JOB_INDEX_LABEL} <= table[("jobset.x-k8s.io", "v1alpha2", "JobSet")].label_keys  # type: ignore[attr-defined]
    assert "project" in DefaultGrouper.label_keys and "kai.scheduler/subgroup-name" in DefaultGrouper.label_keys
    # what the API shows: the union of the declarations, nothing else
    union = frozenset().union(*(p.label_keys for p in table.values()))  # type: ignore[attr-defined]
    assert plugin_label_keys() == union


def test_a_karta_definition_reads_the_label_keys_its_jq_paths_name() -> None:
    [sandbox] = load_file(DEFINITIONS / "agents-x-k8s-io-sandbox-v1beta1.yaml")
    assert definition_label_keys(sandbox) == {"agents.x-k8s.io/sandbox-name-hash"}
    assert KartaGrouper(sandbox).label_keys == {"agents.x-k8s.io/sandbox-name-hash"}
    # a key a path computes (``$l[...]`` of a variable) is not derivable: not listed
    [grove] = load_file(DEFINITIONS / "grove-io-podcliqueset-v1alpha1.yaml")
    assert "grove.io/podcliqueset-replica-index" in definition_label_keys(grove)  # named literally
    assert "grove.io/podclique" not in definition_label_keys(grove)  # read through $l[...] and .[...] only
