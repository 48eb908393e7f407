"""The Helm chart (deploy/chart/) and the plain manifests rendered from it.

The chart's templates are the single source of the grouper's RBAC and Deployment; ``deploy/rbac.yaml`` (the
ServiceAccount and RBAC alone, applied by the tests and the demo) and ``deploy/manifests/kai-pod-grouper.yaml``
(everything, for ``kubectl apply -k deploy/``) are ``helm template`` with the default values, written by
``python -m devtools.chart`` (``make manifests``); tests/deploy/test_chart.py fails when they are stale.
``helm`` is built from its Go module like the control plane (devtools/cluster/build.py, ``--only helm``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster import build

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "chart"
RBAC_FILE = REPO / "deploy" / "rbac.yaml"
MANIFESTS_FILE = REPO / "deploy" / "manifests" / "kai-pod-grouper.yaml"
NAMESPACE = "kai-system"
RELEASE = "kai-pod-grouper"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
_GENERATED = (
    "# GENERATED from deploy/chart (helm template {release} deploy/chart -n {ns}, default values){what}.\n"
    "# Do not edit: change the chart and run `make manifests` (tests/deploy/test_chart.py checks it is current).\n"
)


def helm() -> str:
    """The helm binary, built from devtools/helm/go.mod when missing or stale."""
    return str(build.ensure_binaries(names=("helm",)) / "helm")


def template(
    values: dict[str, Any] | None = None,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    extra: tuple[str, ...] = (),
) -> str:
    """``helm template`` of the chart; ``values`` are given as a values file (JSON is YAML)."""
    cmd = [helm(), "template", release, str(CHART), "--namespace", namespace, *extra]
    if values:
        cmd += ["--values", "-"]
    proc = subprocess.run(cmd, input=json.dumps(values or {}), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"helm template failed: {proc.stderr.strip()}")
    return proc.stdout


def documents(rendered: str) -> list[str]:
    """The non-empty YAML documents of a render, each with its comments."""
    return [d.strip("\n") for d in rendered.split("\n---\n") if yaml.safe_load(d.strip("-\n ") or "null")]


def _namespace(ns: str) -> str:
    return f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}"


def rendered_files() -> dict[Path, str]:
    """What ``make manifests`` writes: the RBAC file and the whole-chart file, from the default values."""
    docs = documents(template())
    rbac = [d for d in docs if yaml.safe_load(d)["kind"] in RBAC_KINDS]
    head = _GENERATED.format(release=RELEASE, ns=NAMESPACE, what="{what}")
    return {
        RBAC_FILE: head.format(what=": the ServiceAccount and its RBAC")
        + "\n---\n".join([_namespace(NAMESPACE), *rbac]) + "\n",
        MANIFESTS_FILE: head.format(what=" without the CRDs (deploy/crds)")
        + "\n---\n".join([_namespace(NAMESPACE), *docs]) + "\n",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.chart", description="render deploy/ from deploy/chart")
    ap.add_argument("--check", action="store_true", help="fail when a rendered file is not current")
    args = ap.parse_args(argv)
    stale = []
    for path, text in rendered_files().items():
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}", file=sys.stderr)
    if args.check and stale:
        print(f"stale (run `make manifests`): {', '.join(str(p.relative_to(REPO)) for p in stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
