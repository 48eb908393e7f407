"""Hostile input offline: ``grouper plan`` and ``grouper describe -f`` answer every malformed or
hostile file with a message naming the object, the field and the expression — never a traceback
— and the right exit code."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.cli.main import main

REPO = Path(__file__).resolve().parents[2]
KARTA = yaml.safe_load((REPO / "examples" / "batchling-karta.yaml").read_text())
WORKLOAD_DOCS = list(yaml.safe_load_all((REPO / "examples" / "custom-batchling.yaml").read_text()))


def _write(tmp_path: Path, name: str, docs: list[Any] | bytes) -> str:
    f = tmp_path / name
    if isinstance(docs, bytes):
        f.write_bytes(docs)
    else:
        f.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(f)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text
    return code, text


def _pod(**meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "default", **meta},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]},
    }


FILES: dict[str, tuple[Any, int, str]] = {
    "binary file": (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4, 2, "not a text file"),
    "latin-1 file": ("kind: caf\xe9".encode("latin-1"), 2, "not UTF-8 text"),
    "JSON nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, 2, "nests too deeply"),
    "YAML nested 1,000 deep": (b"a: " + b"{b: " * 1000 + b"1" + b"}" * 1000, 2, "nests too deeply"),
    "a list, not an object": (b"- a\n- b\n", 2, "expected a Kubernetes object (a mapping), got list"),
    "no kind": (b"apiVersion: v1\nmetadata: {name: x}\n", 2, "field kind is missing"),
    "name not a string": (b"apiVersion: v1\nkind: Pod\nmetadata: {name: [x]}\n", 2,
                          "field metadata.name must be a non-empty string"),
    "namespace not a string": (b"apiVersion: v1\nkind: Pod\nmetadata: {name: x, namespace: 3}\n", 2,
                               "field metadata.namespace must be a string"),
    "invalid YAML": (b"apiVersion: v1\nkind: Pod\nmetadata: {name: x\n", 2, "invalid YAML"),
    "infinite number": (b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {n: .inf}\n", 2,
                        "field spec.n: inf is not a JSON number"),
    "ownerReferences: hello": ([_pod(ownerReferences="hello")], 1,
                               "Pod default/p1: field metadata.ownerReferences: must be a list of owner references, got str"),
    "ownerReferences item not an object": ([_pod(ownerReferences=["x"])], 1,
                                           "field metadata.ownerReferences[0]: must be an object"),
    "ownerReference without a name": ([_pod(ownerReferences=[{"apiVersion": "v1", "kind": "X"}])], 1,
                                      "field metadata.ownerReferences[0].name: must be a non-empty string"),
    "labels: [a, b]": ([_pod(labels=["a", "b"])], 1, "field metadata.labels: expected a map of strings, got list"),
    "annotations: 5": ([_pod(annotations=5)], 1, "Pod default/p1: field metadata.annotations: expected a map of strings, got int"),
    "queue not a label value": ([_pod(labels={"kai.scheduler/queue": "not a/valid value!"})], 1,
                                "spec.queue 'not a/valid value!' is not a valid label value"),
}


@pytest.mark.parametrize("name", FILES)
def test_plan_hostile_files(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs, code, expected = FILES[name]
    path = _write(tmp_path, "in.json" if "JSON" in name else "in.yaml", docs)
    got, text = _run(capsys, "plan", "-f", path)
    assert (got, expected in text) == (code, True), text


def test_pod_without_namespace_or_uid_is_planned_in_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod()
    del pod["metadata"]["namespace"]
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "p.yaml", [pod]))
    assert code == 0 and "PodGroup default/pg-p1-" in text and "PodGroup /" not in text
    code, text = _run(capsys, "plan", "-n", "team-b", "-f", _write(tmp_path, "p.yaml", [pod]))
    assert code == 0 and "PodGroup team-b/pg-p1-" in text


def _batchling(replicas: Any) -> list[Any]:
    docs = copy.deepcopy(WORKLOAD_DOCS)
    docs[0]["spec"]["workers"]["replicas"] = replicas
    return docs


@pytest.mark.parametrize("replicas", [-3, 0])
def test_zero_or_negative_replicas_are_explained(
    replicas: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    k = _write(tmp_path, "k.yaml", [KARTA])
    w = _write(tmp_path, "w.yaml", _batchling(replicas))
    code, text = _run(capsys, "plan", "-f", k, "-f", w)
    assert code == 1
    assert (
        f"Karta example-com-batchling-v1, component worker: sub-group worker has no pods to wait for: its scale "
        f"is 0 (component worker: replicas {replicas} (expression '.spec.workers.replicas // 1'))"
    ) in text
    assert "must expose a replica scale definition" not in text
    code, text = _run(capsys, "describe", "-f", w, "-f", k)
    assert "replicas: -" not in text and "gpu: -" not in text
    if replicas < 0:
        assert "component worker: replicas -3 is negative, shown as 0 (expression '.spec.workers.replicas // 1')" in text


def test_null_replicas_fall_back_to_the_expression_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "k.yaml", [KARTA]),
                      "-f", _write(tmp_path, "w.yaml", _batchling(None)))
    assert code == 0 and "sub-group worker  minMember=1" in text


@pytest.mark.parametrize("replicas,expected", [(2.5, "replicas value 2.5 at index 0 is not an integer"),
                                               ("x", 'replicas value "x" at index 0 is not a number'),
                                               (2**40, "replicas value 1099511627776 at index 0 is out of range for int32")])
def test_replicas_of_the_wrong_type(replicas: Any, expected: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "k.yaml", [KARTA]),
                      "-f", _write(tmp_path, "w.yaml", _batchling(replicas)))
    assert code == 1
    assert f"component worker: {expected} (expression '.spec.workers.replicas // 1')" in text


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_non_finite_replicas_are_refused_at_load(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = tmp_path / "w.yaml"
    w.write_text((REPO / "examples" / "custom-batchling.yaml").read_text().replace("replicas: 3", f"replicas: {value}"))
    for argv in (["plan", "-f", str(w)], ["describe", "-f", str(w)]):
        code, text = _run(capsys, *argv)
        assert code == 2 and "field spec.workers.replicas:" in text and "is not a JSON number" in text


def _invalid_karta(**changes: Any) -> dict[str, Any]:
    k = copy.deepcopy(KARTA)
    worker = k["spec"]["structureDefinition"]["childComponents"][1]
    worker["scaleDefinition"]["replicasPath"] = changes.get("expr", ".spec.workers.replicas |= 3")
    return k


@pytest.mark.parametrize(
    "expr,expected",
    [(".spec.workers.replicas |= 3", "modifying operator '|='"),
     (".spec | keys_unsorted | length", "'keys_unsorted/0' is not available in gojq"),
     ("def f(x): x,x; " + "f(" * 30 + "." + ")" * 30, "exponential time"),
     ('("x" * 1e9) | length', "failed validation")],
)
def test_plan_with_an_invalid_karta_exits_non_zero_and_says_so(
    expr: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    k = _write(tmp_path, "k.yaml", [_invalid_karta(expr=expr)])
    w = _write(tmp_path, "w.yaml", WORKLOAD_DOCS)
    code, text = _run(capsys, "plan", "-f", k, "-f", w)
    assert code == 2
    assert "Karta example-com-batchling-v1 is invalid" in text and expected in text
    assert "spec.structureDefinition.childComponents[1].scaleDefinition.replicasPath" in text
    assert "not planning with an invalid Karta" in text


def test_plan_with_an_invalid_definitions_dir_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "defs"
    d.mkdir()
    (d / "k.yaml").write_text(yaml.safe_dump(_invalid_karta(expr="def f(x): x+x; " + "f(" * 40 + "." + ")" * 40)))
    code, text = _run(capsys, "plan", "--definitions", str(d), "-f", _write(tmp_path, "w.yaml", WORKLOAD_DOCS))
    assert code == 2 and "exponential time" in text


def test_a_500_deep_component_chain_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    k = copy.deepcopy(KARTA)
    kids = k["spec"]["structureDefinition"]["childComponents"]
    for i in range(500):
        kids.append({"name": f"level{i}", "ownerRef": "worker" if i == 0 else f"level{i - 1}",
                     "kind": {"group": "", "version": "v1", "kind": "Pod"}})
    path = _write(tmp_path, "k.yaml", [k])
    code, text = _run(capsys, "plan", "-f", path, "-f", _write(tmp_path, "w.yaml", WORKLOAD_DOCS))
    assert code == 2 and "components, more than the limit of 256" in text
    del kids[200:]
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "k2.yaml", [k]), "-f", _write(tmp_path, "w.yaml", WORKLOAD_DOCS))
    assert code == 2 and "more than 32 ownerRef levels below the root" in text
    code, text = _run(capsys, "describe", "-f", _write(tmp_path, "w.yaml", WORKLOAD_DOCS), "-f", path)
    assert code != 0 and "limit of 256" in text


def test_a_slow_expression_times_out_naming_its_component_and_expression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Data-dependent CPU (a triple loop over a big list) passes validation; the sandbox ends it."""
    slow = "reduce (.spec.items[] as $a | .spec.items[] as $b | .spec.items[]) as $x (0; . + 1)"
    k = copy.deepcopy(KARTA)
    k["spec"]["structureDefinition"]["childComponents"][1]["scaleDefinition"]["replicasPath"] = slow
    docs = copy.deepcopy(WORKLOAD_DOCS)
    docs[0]["spec"]["items"] = list(range(3000))
    code, text = _run(capsys, "plan", "--karta-timeout", "0.5", "-f", _write(tmp_path, "k.yaml", [k]), "-f", _write(tmp_path, "w.yaml", docs))
    assert code == 1
    assert "component worker" in text and f"(expression '{slow}')" in text
    assert "time limit of 0.5s" in text or f"expression '{slow}' of component worker timed out" in text


def _alias_bomb(head: str) -> bytes:
    """A "billion laughs" of YAML anchors: 9 levels of 9 aliases each, 9^9 values as a tree, ~500 bytes."""
    lines = [head, "x:", "  a0: &a0 [x,x,x,x,x,x,x,x,x]"]
    lines += [f"  a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return ("\n".join(lines) + "\n").encode()


POD_HEAD = "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb, namespace: default}"
KARTA_HEAD = ("apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {name: bomb}\nspec:\n  structureDefinition:\n"
              "    rootComponent: {name: r, kind: {group: g, version: v1, kind: K}}")


@pytest.mark.timeout(60)  # the guard: before the fix both commands walked the 9^9 tree (killed at 90 s)
@pytest.mark.parametrize("head", [POD_HEAD, KARTA_HEAD], ids=["pod", "karta"])
def test_a_yaml_alias_bomb_is_refused_by_plan_and_validate(
    head: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "bomb.yaml", _alias_bomb(head))
    code, text = _run(capsys, "plan", "-f", path)
    assert code == 2, text
    assert "YAML aliases expand the document by more than 100000 values" in text and "field x.a" in text
    code, text = _run(capsys, "definitions", "validate", path)
    assert code == 1, text
    assert "YAML aliases expand the document by more than 100000 values" in text


def test_a_recursive_alias_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "rec.yaml", f"{KARTA_HEAD}\nx: &a {{y: [*a]}}\n".encode())
    for argv, want in ((["plan", "-f", path], 2), (["definitions", "validate", path], 1)):
        code, text = _run(capsys, *argv)
        assert code == want and "field x.y[0]" in text and "a YAML alias refers to a node that contains it" in text, text


def test_shared_anchors_within_the_budget_are_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Anchors as people use them (one shared container list) still plan."""
    doc = (b"apiVersion: v1\nkind: Pod\nmetadata: {name: p1, namespace: default}\n"
           b"spec:\n  schedulerName: kai-scheduler\n  containers: &c [{name: c, image: x}]\n  initContainers: *c\n")
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "p.yaml", doc))
    assert code == 0 and "PodGroup default/pg-p1-" in text, text


@pytest.mark.parametrize("suffix", ["json", "yaml"])
@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_deep_nesting_is_a_clear_error_for_plan_and_validate(
    suffix: str, stdin: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    body = (b'{"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": "d"}, "spec": '
            + b"[" * 50_000 + b"]" * 50_000 + b"}")
    path = _write(tmp_path, f"deep.{suffix}", body)
    for argv, want in ((["plan", "-f"], 2), (["definitions", "validate"], 1)):
        if stdin:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
        code, text = _run(capsys, *argv, "-" if stdin else path)
        assert code == want and "nests too deeply to parse" in text and "RecursionError" not in text, text


# ---------------------------------------------------------------- fuzz: odd types anywhere in the workloads

FUZZ_DOCS = [d for f in ("deployment.yaml", "batch-job.yaml", "custom-batchling.yaml")
             for d in yaml.safe_load_all((REPO / "examples" / f).read_text()) if d]


def _paths(v: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, (*at, i))
    return out


FUZZ_PATHS = [(i, p) for i, d in enumerate(FUZZ_DOCS) for p in _paths(d)]
ODD = st.sampled_from([5, -1, 2.5, True, None, "", "x", [], ["a"], [{"a": 1}], {}, {"a": 1}, {"k": [1]}, 10**308])


@pytest.mark.parametrize("command", ["plan", "describe"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(st.sampled_from(FUZZ_PATHS), ODD), min_size=1, max_size=3))
def test_odd_types_anywhere_in_the_manifests_never_crash_plan_or_describe(
    command: str, mutations: list[tuple[tuple[int, tuple[Any, ...]], Any]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every field of a Deployment, a Job and a Karta workload (with their ReplicaSet and pods), replaced by
    a value of another type: plan and describe -f answer with a message, never a traceback or an internal
    error (exit codes as documented: plan 0/1/2, describe non-zero with a message)."""
    docs = copy.deepcopy(FUZZ_DOCS)
    for (i, path), value in mutations:
        cur: Any = docs[i]
        try:
            for step in path[:-1]:
                cur = cur[step]
            cur[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced a parent
    empty = tmp_path / "no-definitions"
    empty.mkdir(exist_ok=True)
    k = _write(tmp_path, "k.yaml", [KARTA])
    w = _write(tmp_path, "w.yaml", docs)
    if command == "plan":
        code, text = _run(capsys, "plan", "--definitions", str(empty), "-f", k, "-f", w)
        assert code in (0, 1, 2), text
    else:
        code, text = _run(capsys, "describe", "-f", w, "-f", k)
    assert "internal error" not in text and "Error(" not in text, text


def test_a_309_digit_number_is_cut_in_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "k.yaml", [KARTA]),
                      "-f", _write(tmp_path, "w.yaml", _batchling(10**308)))
    assert code == 1 and "replicas value 100000000000…(309 digits) at index 0 is out of range for int32" in text, text
    pod = _pod(annotations={"kai.scheduler/batch-min-member": "1" + "0" * 308})
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default", "uid": "u-j"},
           "spec": {"parallelism": 2}}
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-j",
                                           "controller": True}]
    job["metadata"]["annotations"] = pod["metadata"].pop("annotations")
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "j.yaml", [job, pod]))
    assert code == 1 and "100000000000…(309 digits) is out of range" in text and "0" * 40 not in text, text


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_plan_skips_finished_pods_as_the_controller_does(
    phase: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = {**_pod(), "status": {"phase": phase}}
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "p.yaml", [pod]))
    assert code == 0 and "PodGroup" not in text, text
    assert f"skipped pod default/p1: PodTerminal (pod phase is {phase}: finished pods are not grouped)" in text
    running = {**_pod(), "status": {"phase": "Running"}}
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "p.yaml", [running]))
    assert code == 0 and "PodGroup default/pg-p1-" in text


# ---------------------------------------------------------------- gangs that can never be satisfied: warnings


def _coordinator_takes_all() -> dict[str, Any]:
    k = copy.deepcopy(KARTA)
    k["spec"]["structureDefinition"]["childComponents"][0]["podSelector"]["componentTypeSelector"] = {
        "keyPath": ".metadata.namespace", "value": "team-a"}
    return k


def _relabelled() -> list[Any]:
    docs = copy.deepcopy(WORKLOAD_DOCS)
    [d for d in docs if d["kind"] == "Pod"][-1]["metadata"]["labels"]["example.com/role"] = "other"
    return docs


GANGS = {
    "a selector that matches every pod": (_coordinator_takes_all, lambda: WORKLOAD_DOCS,
                                          "sub-group worker needs 3 pods (minMember) but none of the PodGroup's 4 pods is in it (coordinator: 4)"),
    "a minimum of 1,000,000": (lambda: KARTA, lambda: _batchling(1_000_000),
                               "sub-group worker needs 1000000 pods (minMember), above 100,000: the gang can never be scheduled"),
    "a pod relabelled out of its component": (lambda: KARTA, _relabelled,
                                              "pod sim-sweep-worker-2 is in no sub-group (no component matches, or the pod was "
                                              "relabelled out of its component)"),
}


@pytest.mark.parametrize("name", GANGS)
def test_plan_warns_of_gangs_that_can_never_be_satisfied(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    karta, workload, expected = GANGS[name]
    k, w = _write(tmp_path, "k.yaml", [karta()]), _write(tmp_path, "w.yaml", workload())
    code, text = _run(capsys, "plan", "-f", k, "-f", w)
    assert code == 0 and f"warning: PodGroup team-a/pg-5c1b2a3e-0000-4000-8000-000000002601-batchling: {expected}" in text, text
    code, text = _run(capsys, "plan", "-o", "json", "-f", k, "-f", w)
    assert code == 0 and any(expected in x for x in __import__("json").loads(text)["warnings"]), text


def test_plan_does_not_warn_of_a_sound_gang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _run(capsys, "plan", "-f", _write(tmp_path, "k.yaml", [KARTA]), "-f", _write(tmp_path, "w.yaml", WORKLOAD_DOCS))
    assert code == 0 and "warning" not in text, text


def test_validate_warns_of_a_literal_minimum_beyond_the_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    k = copy.deepcopy(KARTA)
    k["spec"]["structureDefinition"]["childComponents"][1]["scaleDefinition"]["replicasPath"] = "61200000"
    code, text = _run(capsys, "definitions", "validate", _write(tmp_path, "k.yaml", [k]))
    assert code == 0, text  # a warning: the definition is still valid
    assert ("warning: example-com-batchling-v1: spec.structureDefinition.childComponents[1].scaleDefinition.replicasPath: "
            "replicas is always 61200000, above 100,000 pods") in text
