"""DefinitionRegistry: built-ins, cluster overrides, invalid/deleting/gang-less handling, threads."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

from grouper.karta import DefinitionRegistry
from grouper.model.objects import GVK
from tests.karta.fixtures import DATA, pyflow_karta

JOBSET = GVK("jobset.x-k8s.io", "v1alpha2", "JobSet")
PYFLOW = GVK("jobs.example.com", "v1", "PyFlow")


def jobset_cluster(name: str, gang: bool = True) -> dict[str, Any]:
    import yaml

    obj: dict[str, Any] = yaml.safe_load((DATA / "jobset.yaml").read_text())
    obj["metadata"] = {"name": name, "resourceVersion": "7"}
    if not gang:
        obj["spec"].pop("optimizationInstructions")
    return obj


def test_builtin_catalog_loaded_and_resolved(tmp_path: Path) -> None:
    reg = DefinitionRegistry(DATA)
    assert reg.load_errors == []
    r = reg.resolve(JOBSET)
    assert r.definition is not None and r.definition.origin == "builtin:data/jobset.yaml"
    assert {x.definition.name for x in reg.all()} >= {
        "jobset-x-k8s-io-jobset-v1alpha2",
        "kubeflow-org-pytorchjob-v1",
    }
    assert all(x.report.ok for x in reg.all())


def test_broken_builtin_file_reported_not_fatal(tmp_path: Path) -> None:
    d = tmp_path / "definitions"
    d.mkdir()
    shutil.copy(DATA / "jobset.yaml", d)
    (d / "broken.yaml").write_text("apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {}\nspec: {}\n")
    reg = DefinitionRegistry(d)
    assert len(reg.load_errors) == 1 and "metadata.name" in str(reg.load_errors[0])
    assert reg.resolve(JOBSET).definition is not None


def test_cluster_karta_overrides_builtin() -> None:
    reg = DefinitionRegistry(DATA)
    reg.upsert_cluster_object(jobset_cluster("my-jobset"))
    r = reg.resolve(JOBSET)
    assert r.definition is not None and r.definition.name == "my-jobset"
    assert r.skipped == {"jobset-x-k8s-io-jobset-v1alpha2": "overridden by a cluster Karta for the same kind"}
    reg.remove_cluster_object("my-jobset")
    r = reg.resolve(JOBSET)
    assert r.definition is not None and r.definition.name == "jobset-x-k8s-io-jobset-v1alpha2"


def test_gangless_cluster_karta_switches_builtin_off() -> None:
    reg = DefinitionRegistry(DATA)
    reg.upsert_cluster_object(jobset_cluster("quiet", gang=False))
    r = reg.resolve(JOBSET)
    assert (r.definition, r.error) == (None, None)
    assert r.skipped["quiet"] == "no gang scheduling instructions"


def test_invalid_cluster_karta_does_not_override_builtin() -> None:
    reg = DefinitionRegistry(DATA)
    bad = jobset_cluster("bad")
    bad["spec"]["structureDefinition"]["rootComponent"].pop("statusDefinition")
    loaded = reg.upsert_cluster_object(bad)
    assert loaded is not None and not loaded.report.ok
    r = reg.resolve(JOBSET)
    assert r.definition is not None and r.definition.name == "jobset-x-k8s-io-jobset-v1alpha2"
    assert r.skipped["bad"].startswith("invalid: ")
    assert {x.definition.name for x in r.candidates} == {"bad", "jobset-x-k8s-io-jobset-v1alpha2"}


def test_same_name_cluster_object_shadows_builtin_in_listing() -> None:
    reg = DefinitionRegistry(DATA)
    reg.upsert_cluster_object(jobset_cluster("jobset-x-k8s-io-jobset-v1alpha2"))
    names = [x.definition.name for x in reg.all()]
    assert names.count("jobset-x-k8s-io-jobset-v1alpha2") == 1
    assert reg.get("jobset-x-k8s-io-jobset-v1alpha2").source == "cluster"  # type: ignore[union-attr]


def test_unparseable_cluster_object_recorded() -> None:
    reg = DefinitionRegistry()
    reg.upsert_cluster_object(pyflow_karta({"podGroup": {"name": "t"}}))
    broken = pyflow_karta()
    broken["spec"]["structureDefinition"] = []
    assert reg.upsert_cluster_object(broken) is None
    assert "pyflow" in reg.cluster_errors()
    assert reg.resolve(PYFLOW).definition is None  # the previous version is dropped
    reg.upsert_cluster_object(pyflow_karta({"podGroup": {"name": "t"}}))
    assert reg.cluster_errors() == {} and reg.resolve(PYFLOW).definition is not None


def test_evaluators_cached_and_isolated_for_every_definition() -> None:
    reg = DefinitionRegistry(DATA)
    builtin = reg.resolve(JOBSET).definition
    assert builtin is not None
    ev = reg.evaluator(builtin)
    assert reg.evaluator(builtin) is ev and ev.isolated  # built-ins run bounded too
    assert not DefinitionRegistry(DATA, isolate_builtin=False).evaluator(builtin).isolated
    loaded = reg.upsert_cluster_object(jobset_cluster("mine"))
    assert loaded is not None
    assert reg.evaluator(loaded.definition).isolated
    assert not DefinitionRegistry(isolate_cluster=False).evaluator(loaded.definition).isolated


def test_concurrent_reads_while_updating() -> None:
    reg = DefinitionRegistry(DATA)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                r = reg.resolve(JOBSET)
                assert r.error is None and r.definition is not None
                reg.all()
                time.sleep(0)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(50):
        reg.upsert_cluster_object(jobset_cluster("mine"))
        if i % 2:
            reg.remove_cluster_object("mine")
    stop.set()
    for t in threads:
        t.join()
    assert errors == []


def test_karta_kinds_are_the_kinds_no_native_plugin_claims() -> None:
    """What the controller evaluates off its event loop: kinds a definition decides — built-in or from
    the cluster — and never a kind a native plugin decides (JobSet, Deployment, ...)."""
    from grouper.core.config import GroupingConfig
    from grouper.runtime.composition import build_grouper

    reg = DefinitionRegistry(Path(__file__).resolve().parents[2] / "definitions")
    hub = build_grouper(GroupingConfig(), reg).hub
    kinds = hub.karta_kinds()
    assert ("apps.nvidia.com", "NIMService") in kinds  # built-in only
    assert ("jobset.x-k8s.io", "JobSet") not in kinds and ("apps", "Deployment") not in kinds
    assert ("jobs.example.com", "PyFlow") not in kinds
    reg.upsert_cluster_object(pyflow_karta({"podGroups": [{"name": "all", "members": [{"componentName": "worker"}]}]}))
    assert ("jobs.example.com", "PyFlow") in hub.karta_kinds()  # a cluster Karta counts at once
    assert build_grouper(GroupingConfig(generic_karta_fallback=False), reg).hub.karta_kinds() == frozenset()


def test_state_counts_by_origin() -> None:
    """``podgrouper_karta_definitions{origin,state}``: an invalid cluster Karta and one that cannot be parsed
    both count as invalid cluster definitions."""
    reg = DefinitionRegistry(DATA)
    builtin = len(reg.all())
    bad = jobset_cluster("bad")
    bad["spec"]["structureDefinition"]["rootComponent"].pop("statusDefinition")
    reg.upsert_cluster_object(bad)
    reg.upsert_cluster_object(jobset_cluster("good"))
    broken = pyflow_karta()
    broken["spec"]["structureDefinition"] = []
    reg.upsert_cluster_object(broken)
    counts = reg.state_counts()
    assert (counts[("cluster", "valid")], counts[("cluster", "invalid")], counts[("cluster", "quarantined")]) == (1, 2, 0)
    assert counts[("builtin", "valid")] + counts[("builtin", "invalid")] == builtin
