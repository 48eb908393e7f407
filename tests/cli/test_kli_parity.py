"""kli v0.3 parity of ``grouper describe`` (Workload Map ``cli/pkg/generator/describe.go`` and its tests):
``--pod-limit N`` shows unhealthy pods first (a completed pod is not unhealthy) and notes
``... and K more (U unhealthy shown)`` / ``(U of T unhealthy shown)`` in the status column; a component's own
pods (and the note) come before its child components; ``Phase:`` names every matched phase; file mode says
``(file mode: no live status)``. Live: against the local API server with pods of a real ReplicaSet."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import Kube, wait_until

from devtools.cluster import LocalCluster
from grouper.cli.main import main
from grouper.describe import render_table
from grouper.describe.resources import ZERO
from grouper.describe.view import ComponentNode, DescribeView, PodView, Replicas


def pv(name: str, phase: str = "Running", ready: bool = True, reason: str | None = None) -> PodView:
    return PodView(name, phase, ready, "node-1" if phase != "Pending" else None, reason, ZERO)


def view(**kw: Any) -> DescribeView:
    base: dict[str, Any] = {"name": "w", "namespace": "ns", "kind": "Widget", "api_version": "example.com/v1",
                            "created_at": None, "definition": "widgets", "origin": "cluster:Karta/widgets",
                            "phases": ["Running"], "file_mode": False}
    return DescribeView(**{**base, **kw})


def tree(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[2:lines.index("", 2)]


def test_a_components_own_pods_come_before_its_children_and_the_note_keeps_the_branch_open() -> None:
    mid = ComponentNode("mid", "mid", replicas=Replicas(2, 2, 1),
                        pods=[pv("mid-0"), pv("mid-1", "Pending", False, "Unschedulable"), pv("mid-2")],
                        children=[ComponentNode("leaf", "leaf", replicas=Replicas(1, 1, 1), pods=[pv("leaf-0")])])
    lines = tree(render_table(view(components=[mid]), pod_limit=1))
    assert [re.split(r"(?<=\S)\s{3,}", line)[0] for line in lines] == [
        "`-- mid", "    |-- mid-1", "    |-- ...", "    `-- leaf", "        `-- leaf-0"]
    assert lines[2].split("...", 1)[1].strip() == "and 2 more (1 unhealthy shown)"
    # the note sits in the status column, aligned with the pods' status
    assert lines[2].index("and 2 more") == lines[1].index("Pending (Unschedulable)")


def test_unhealthy_first_completed_pods_are_not_unhealthy_and_the_total_is_named() -> None:
    worker = ComponentNode("worker", "worker", replicas=Replicas(3, 3, 0), pods=[
        pv("worker-0", "Succeeded", False, "PodCompleted"), pv("worker-1", "Succeeded", False, "PodCompleted"),
        pv("worker-2", "Pending", False, "Unschedulable")])
    lines = tree(render_table(view(components=[worker]), pod_limit=1))
    assert "worker-2" in lines[1] and lines[2].endswith("and 2 more (1 unhealthy shown)")
    failing = ComponentNode("worker", "worker", replicas=Replicas(3, 3, 0), pods=[
        pv(f"worker-{i}", "Pending", False, "Unschedulable") for i in range(3)])
    text = render_table(view(components=[failing]), pod_limit=1)
    assert re.search(r"`-- \.\.\. +and 2 more \(1 of 3 unhealthy shown\)$", text, re.M)
    assert "more (" not in render_table(view(components=[failing]), pod_limit=3)
    assert render_table(view(components=[failing]), pod_limit=0) == render_table(view(components=[failing]))


def test_every_matched_phase_and_file_mode() -> None:
    c = [ComponentNode("worker", "worker", replicas=Replicas(4, 0, 0))]
    assert "\nPhase: Running,Degraded\n" in render_table(view(components=c, phases=["Running", "Degraded"]))
    text = render_table(view(components=c, file_mode=True))
    assert text.splitlines()[1] == "(file mode: no live status)"
    assert "Phase:" not in text and "age:" not in text and "replicas: 4" in text


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "busybox"}]}}}}


def _run_ready(kube: Kube, ns: str, pod: str) -> None:
    """What kube-scheduler and a kubelet would do: bind the pod, report it Running and Ready."""
    kube.create(f"/api/v1/namespaces/{ns}/pods/{pod}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}})
    kube.patch(f"/api/v1/namespaces/{ns}/pods/{pod}/status", {"status": {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"},
        {"type": "ContainersReady", "status": "True"}]}}, type="strategic")


def test_pod_limit_live(cluster: LocalCluster, kube: Kube, namespace: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("web", 4))
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    wait_until(lambda: len(kube.list(pods_path, label_selector="app=web")) == 4, 60, what="the ReplicaSet's pods")
    names = sorted(p["metadata"]["name"] for p in kube.list(pods_path, label_selector="app=web"))
    for name in names[:2]:
        _run_ready(kube, namespace, name)
    code = main(["describe", "deployment/web", "-n", namespace, "--kubeconfig", cluster.kubeconfig_path,
                 "--pod-limit", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = tree(out)
    pending = [r for r in rows if "Pending" in r]
    assert len(pending) == 1 and pending[0].split()[1] in names[2:]  # an unhealthy pod took the one row
    assert rows[-1].split("...", 1)[1].strip() == "and 3 more (1 of 2 unhealthy shown)"
    assert not any(n in out for n in names[:2])  # the healthy ones are the hidden ones
    assert re.search(r"^Phase: \S+", out, re.M)


# ------------------------------------------------------------------------------------------ definitions

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "definitions"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_definitions_wide_and_no_headers(capsys: pytest.CaptureFixture[str]) -> None:
    code, wide, _ = cli(capsys, "definitions", "-o", "wide")
    assert code == 0
    head, *rows = wide.splitlines()
    assert head.split()[-3:] == ["EFFECT", "COMPONENTS", "WARNINGS"]
    jobset = next(r for r in rows if r.startswith("jobset-x-k8s-io-jobset-v1alpha2 "))
    assert re.search(r"\s{3}jobset, replicatedjob\s{3,}0$", jobset), jobset
    # the parent's flags survive the subcommand, and the subcommand's own flags work
    assert cli(capsys, "definitions", "-o", "wide", "list")[1] == wide
    assert cli(capsys, "definitions", "list", "-o", "wide")[1] == wide
    code, bare, _ = cli(capsys, "definitions", "list", "--no-headers")
    assert code == 0 and [line.split() for line in bare.splitlines()] == [
        line.split() for line in cli(capsys, "definitions")[1].splitlines()[1:]] and not bare.startswith("NAME")
    code, out, _ = cli(capsys, "definitions", "-o", "wide", "--no-headers")
    assert code == 0 and out.splitlines()[0].startswith("agents-x-k8s-io-sandbox-v1beta1 ")
    data = json.loads(cli(capsys, "definitions", "-o", "json")[1])
    item = next(i for i in data["items"] if i["name"] == "jobset-x-k8s-io-jobset-v1alpha2")
    assert item["components"][0] == "jobset" and item["experimental"] is False and data["hiddenExperimental"] == []


def _experimental_catalog(tmp_path: Path) -> Path:
    """The shipped batch Job definition marked ``spec.experimental: true`` (no shipped one is), plus a plain one."""
    d = tmp_path / "catalog"
    d.mkdir()
    job = yaml.safe_load((CATALOG / "batch-job-v1.yaml").read_text())
    job["spec"]["experimental"] = True
    (d / "batch-job-v1.yaml").write_text(yaml.safe_dump(job))
    shutil.copy(CATALOG / "apps-deployment-v1.yaml", d / "apps-deployment-v1.yaml")
    return d


def test_no_shipped_definition_is_experimental() -> None:
    for f in sorted(CATALOG.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            assert "experimental" not in (doc.get("spec") or {}), f


def test_experimental_catalog_definitions_are_hidden_unless_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _experimental_catalog(tmp_path)
    assert cli(capsys, "definitions", "validate", str(d))[0] == 0  # the mark is a valid field
    code, out, err = cli(capsys, "definitions", "--definitions", str(d))
    assert code == 0 and "batch-job-v1" not in out and "apps-deployment-v1" in out
    assert "1 experimental catalog definition hidden (batch-job-v1); --catalog-experimental-definitions shows them" in err
    code, out, err = cli(capsys, "definitions", "--definitions", str(d), "--catalog-experimental-definitions")
    row = next(line for line in out.splitlines() if line.startswith("batch-job-v1 "))
    assert code == 0 and "(experimental)" in row and not err
    data = json.loads(cli(capsys, "definitions", "list", "--definitions", str(d), "-o", "json")[1])
    assert data["hiddenExperimental"] == ["batch-job-v1"]
    # describe (and get workloads) resolve kinds without it unless asked
    job = REPO / "tests" / "catalog" / "fixtures" / "job" / "running.yaml"
    code, _, err = cli(capsys, "describe", "-f", str(job), "--definitions", str(d))
    assert code == 3 and "no Karta definition covers Job.v1.batch" in err
    code, out, _ = cli(capsys, "describe", "-f", str(job), "--definitions", str(d), "--catalog-experimental-definitions")
    assert code == 0 and out.startswith("Job/preprocess ") and "definition: batch-job-v1 " in out
    # a string is not the mark
    job_doc = yaml.safe_load((d / "batch-job-v1.yaml").read_text())
    job_doc["spec"]["experimental"] = "true"
    (d / "batch-job-v1.yaml").write_text(yaml.safe_dump(job_doc))
    assert "batch-job-v1" in cli(capsys, "definitions", "--definitions", str(d))[1]


def test_get_workloads_hides_experimental_kinds_live(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _experimental_catalog(tmp_path)
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                          "containers": [{"name": "c", "image": "busybox"}]}}}})
    argv = ["get", "workloads", "-n", namespace, "--kubeconfig", cluster.kubeconfig_path, "--definitions", str(d)]
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    assert " etl " not in out
    code, out, err = cli(capsys, *argv, "--catalog-experimental-definitions")
    assert code == 0 and re.search(rf"^{namespace}\s+etl\s+Job\s", out, re.M), out + err


# ------------------------------------------------------------------------------------------ completion


def complete(script: str, words: list[str], cwd: Path | None = None) -> list[str]:
    """COMPREPLY of the generated bash function for ``words`` (the last one is being completed)."""
    program = (f"{script}\nCOMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
               "_grouper_complete\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, cwd=cwd, check=True).stdout
    return [line for line in out.splitlines() if line]


@pytest.fixture(scope="module")
def bash_script() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["completion", "bash"]) == 0
    return out.getvalue()


def test_bash_completion(bash_script: str, tmp_path: Path) -> None:
    assert "complete -o default -F _grouper_complete grouper" in bash_script
    assert set(complete(bash_script, ["grouper", "de"])) == {"definitions", "describe"}
    assert complete(bash_script, ["grouper", "definitions", "l"]) == ["list"]
    assert complete(bash_script, ["grouper", "definitions", "-o", ""]) == ["table", "wide", "json"]
    assert complete(bash_script, ["grouper", "definitions", "list", "--no"]) == ["--no-headers"]
    assert complete(bash_script, ["grouper", "definitions", "--cat"]) == ["--catalog-experimental-definitions"]
    assert complete(bash_script, ["grouper", "describe", "--pod"]) == ["--pod-limit"]
    assert {"jobset", "job", "pytorchjob", "raycluster"} <= set(complete(bash_script, ["grouper", "describe", ""]))
    assert complete(bash_script, ["grouper", "wh"]) == ["why"]
    assert {"jobset", "pytorchjob"} <= set(complete(bash_script, ["grouper", "why", ""]))
    assert complete(bash_script, ["grouper", "why", "-o", ""]) == ["text", "json", "yaml"]
    assert complete(bash_script, ["grouper", "get", "workloads", "-o", ""]) == ["table", "wide", "json"]
    # a flag's value is skipped when finding the command path: -n NS does not confuse it
    assert complete(bash_script, ["grouper", "describe", "-n", "definitions", "--pod"]) == ["--pod-limit"]
    assert complete(bash_script, ["grouper", "completion", ""]) == ["bash", "zsh"]
    (tmp_path / "defs-dir").mkdir()
    (tmp_path / "defs-file.yaml").write_text("")
    assert complete(bash_script, ["grouper", "definitions", "--definitions", "defs"], cwd=tmp_path) == ["defs-dir"]
    assert set(complete(bash_script, ["grouper", "describe", "-f", "defs"], cwd=tmp_path)) == {"defs-dir", "defs-file.yaml"}


def test_zsh_completion_uses_the_bash_function_through_bashcompinit(
    bash_script: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "completion", "zsh")
    assert code == 0
    assert out.startswith("#compdef grouper\n") and "autoload -U +X bashcompinit && bashcompinit\n" in out
    assert out.endswith(bash_script)
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0
    with pytest.raises(SystemExit) as usage:
        main(["completion", "fish"])
    assert usage.value.code == 2 and "invalid choice: 'fish'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ documentation


def test_exit_codes_and_environment_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    from grouper.cli import impact
    from grouper.cli.commands import definitions, describe, explain, get, plan, why

    doc = (REPO / "docs" / "cli.md").read_text()
    table = doc[doc.index("## Exit codes"):]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| `")}
    for command, module in [("`plan`", plan), ("`describe`", describe), ("`definitions validate`", definitions),
                            ("`get`", get), ("`explain`", explain), ("`definitions impact`", impact), ("`why`", why)]:
        cells = [c.strip() for c in rows[command].split("|")[2:-1]]
        for name in dir(module):
            if name.startswith("EXIT_"):
                code = getattr(module, name)
                assert cells[code], f"{command}: exit {code} ({name}) is not documented"
    env = doc[doc.index("## Environment variables"):doc.index("## Exit codes")]
    read = r"environ(?:\.get\(|\[)[\"'](GROUPER_[A-Z_]+)"  # the variables the command line reads itself
    used = set(re.findall(read, "".join(p.read_text() for p in (REPO / "grouper" / "cli").rglob("*.py"))))
    assert used and all(f"`{v}`" in env for v in used), used
    with pytest.raises(SystemExit):
        main(["--help"])
    main_help = capsys.readouterr().out
    assert "GROUPER_DEFINITIONS" in main_help and "docs/cli.md" in main_help
