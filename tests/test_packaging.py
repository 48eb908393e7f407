"""The wheel is the product: runtime modules and the built-in Karta catalog, no development tooling.

Builds the wheel the way release tooling does (``python -m build``; without build isolation so no network is
needed), then runs the CLI from the unpacked wheel outside the checkout, which is how an installed grouper
(and the image) finds its catalog.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (whl,) = out.glob("kai_pod_grouper-*.whl")
    return whl


def test_wheel_holds_only_the_runtime_package_and_its_catalog(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"grouper", next(t for t in top if t.endswith(".dist-info"))}, top
    assert not [n for n in names if "devcluster" in n or n.endswith("/demo.py") or "/tests/" in n]
    shipped = {n.removeprefix("grouper/definitions/") for n in names if n.startswith("grouper/definitions/")}
    assert shipped == {p.name for p in (ROOT / "definitions").iterdir() if p.is_file()}
    assert "grouper/cli/main.py" in names and "grouper/kube/transport.py" in names
    # the web view's page shell and static files are package data (grouper/api/ui/routes.py reads them)
    assert {f"grouper/api/ui/static/{f}" for f in ("index.html", "app.js", "ui.css", "icon.svg")} <= set(names)


def test_installed_wheel_finds_its_shipped_catalog(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {k: v for k, v in os.environ.items() if k != "GROUPER_DEFINITIONS"}
    env["PYTHONPATH"] = str(site)  # ahead of the editable install of the checkout
    probe = (
        "import json, grouper, grouper.runtime.settings as s, grouper.cli.common as c;"
        "print(json.dumps([grouper.__file__, s.default_definitions_dir(), str(c.default_definitions_dir())]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    module, run_default, cli_default = json.loads(out)
    assert Path(module).is_relative_to(site)
    assert run_default == cli_default == str(site / "grouper" / "definitions")

    listed = subprocess.run([sys.executable, "-m", "grouper.cli.main", "definitions", "list", "-o", "json"],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["items"]
    assert {i["kind"] for i in items} >= {"JobSet", "PyTorchJob", "RayCluster", "LeaderWorkerSet"}
    assert all(i["valid"] for i in items)
