"""What start-up imports: the CLI never loads the HTTP service stack (FastAPI, pydantic, uvicorn) to build
its parser, and nothing loads the ``kubernetes`` package (kubeconfig files are read by grouper/kube/kubeconfig.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

PROBE = """
import json, sys
import grouper.cli.main as m
m.build_parser()
parser_modules = set(sys.modules)
import grouper.runtime.service
print(json.dumps({"parser": sorted(parser_modules), "run": sorted(sys.modules)}))
"""


def imported() -> dict[str, set[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                         cwd=tempfile.gettempdir()).stdout
    return {k: {name.split(".", 1)[0] for name in v} for k, v in json.loads(out).items()}


def test_cli_parser_does_not_import_the_service_stack_and_nothing_imports_kubernetes() -> None:
    seen = imported()
    assert not {"fastapi", "pydantic", "uvicorn", "starlette"} & seen["parser"]
    assert {"fastapi", "uvicorn", "aiohttp"} <= seen["run"]  # the service still has them
    assert "kubernetes" not in seen["run"]
