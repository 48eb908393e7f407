"""What start-up imports: the CLI never loads the HTTP service stack (FastAPI, pydantic, uvicorn) to build
its parser, the service module neither FastAPI nor pydantic (the API loads once the service is ready; the
probes answer without it, tests/runtime/test_ready_imports.py pins that for a running ``grouper run``), and
nothing loads the ``kubernetes`` package (kubeconfig files are read by grouper/kube/kubeconfig.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

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
    assert {"uvicorn", "aiohttp"} <= seen["run"]  # the service still has them
    # ... but not the HTTP API: it loads in a thread once ready (grouper/runtime/http_front.py), and the
    # probes' answers are plain dataclasses (grouper/api/health.py), so nothing imports pydantic either
    assert not {"fastapi", "starlette", "pydantic", "pydantic_core"} & seen["run"]
    assert "kubernetes" not in seen["run"]


RUN_ONLY_PROBE = """
import json, sys
import grouper.cli.main as m
argv = ["run", "--qps", "7", "--definitions", "/nowhere"]
parsed = m.build_parser(argv).parse_args(argv)
commands = sorted(n for n in sys.modules if n.startswith("grouper.cli.commands."))
full = m.build_parser().parse_args(argv)
same = {k: v for k, v in vars(parsed).items() if k != "func"} == {k: v for k, v in vars(full).items() if k != "func"}
print(json.dumps({"commands": commands, "same": same, "func": parsed.func.__module__}))
"""


def test_grouper_run_builds_only_its_own_command_and_parses_as_the_full_parser_does() -> None:
    out = subprocess.run([sys.executable, "-c", RUN_ONLY_PROBE], capture_output=True, text=True, check=True,
                         cwd=tempfile.gettempdir()).stdout
    seen = json.loads(out)
    assert seen["commands"] == ["grouper.cli.commands.run"]
    assert seen["same"] and seen["func"] == "grouper.cli.commands.run"


def test_the_preloaded_catalog_is_the_registry_the_service_would_build(tmp_path: Path) -> None:
    """``grouper run`` loads the catalog in a thread while it imports the service: the same definitions, the
    same validation reports, and a broken file still among the load errors reported at start-up."""
    from grouper.karta import DefinitionRegistry
    from grouper.runtime.preload import preload_definitions
    from grouper.runtime.settings import RunSettings, default_definitions_dir

    catalog = Path(default_definitions_dir())
    custom = tmp_path / "catalog"
    custom.mkdir()
    for f in sorted(catalog.glob("*.yaml"))[:3]:
        (custom / f.name).write_text(f.read_text())
    (custom / "zz-broken.yaml").write_text("kind: [unclosed\n")
    preloaded = preload_definitions(RunSettings(definitions=str(custom))).result(timeout=120)
    direct = DefinitionRegistry(custom)
    assert [(x.definition.name, x.origin, x.report) for x in preloaded.all()] == \
        [(x.definition.name, x.origin, x.report) for x in direct.all()]
    assert len(preloaded.all()) == 3
    assert [str(e) for e in preloaded.load_errors] == [str(e) for e in direct.load_errors]
    assert len(preloaded.load_errors) == 1 and "zz-broken.yaml" in str(preloaded.load_errors[0])
