"""What ``grouper run`` does faster at start-up with the built-in catalog, pinned to what it did before.

- catalog directories are parsed with libyaml (``loader._fast_yaml``): the same values as the pure-Python
  parser for every shipped file; anything libyaml rejects or that nests too deeply gets the pure-Python
  parser's own error, so a broken catalog file is reported exactly as before;
- the registry compiles the whole catalog's jq in one sandbox round trip (``validate.precompile``) instead of
  one per definition: one worker process instead of the pool's four, and the same validation reports,
  a definition's jq error included.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from grouper.karta import DefinitionRegistry, load_dir, load_file
from grouper.karta.catalog import builtin_catalog_dir
from grouper.karta.jqrun import COMPILE_RESULTS
from grouper.karta.loader import MAX_NESTING
from grouper.karta.sandbox import SandboxPool

loader = importlib.import_module("grouper.karta.loader")
validate_module = importlib.import_module("grouper.karta.validate")
CATALOG = builtin_catalog_dir()
assert CATALOG is not None


@pytest.mark.parametrize("path", sorted(CATALOG.glob("*.yaml")), ids=lambda p: p.name)
def test_libyaml_parses_every_shipped_file_as_the_pure_python_parser_does(path: Path) -> None:
    text = path.read_text()
    assert loader._CSafeLoader is not None, "PyYAML without libyaml: the fast path is never taken"
    assert loader._fast_yaml(text) == list(yaml.safe_load_all(text))


def test_the_catalog_loads_as_the_same_definitions_as_file_by_file() -> None:
    defs, errors = load_dir(CATALOG)
    assert errors == []
    one_by_one = [d for f in sorted(CATALOG.glob("*.yaml")) for d in load_file(f, origin=f"builtin:{CATALOG.name}/{f.name}")]
    assert [d.raw for d in defs] == [d.raw for d in one_by_one]
    assert [(d.name, d.origin, d.gvk) for d in defs] == [(d.name, d.origin, d.gvk) for d in one_by_one]


def _errors_of(tmp_path: Path, name: str, text: str) -> tuple[list[str], str]:
    """(load_dir's errors for a catalog with this one file, load_file's error for the same file)."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / name).write_text(text)
    _, errors = load_dir(catalog)
    with pytest.raises(Exception) as direct:
        load_file(catalog / name)
    return [str(e) for e in errors], str(direct.value)


def test_a_broken_catalog_file_is_reported_in_the_pure_python_parsers_words(tmp_path: Path) -> None:
    errors, direct = _errors_of(tmp_path, "broken.yaml", "apiVersion: run.ai/v1alpha1\nkind: [unclosed\n")
    assert errors == [direct] and "invalid YAML" in direct


def test_deep_nesting_in_a_catalog_file_is_reported_as_before(tmp_path: Path) -> None:
    """libyaml would parse 500 levels where the pure-Python parser gives up: the fallback keeps the limit."""
    text = "spec: " + "[" * 500 + "]" * 500 + "\n"
    assert len(list(yaml.load_all(text, Loader=loader._CSafeLoader))) == 1  # libyaml alone takes it
    errors, direct = _errors_of(tmp_path, "deep.yaml", text)
    assert errors == [direct]
    shallow = "a: " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "\n"  # deeper than the fast path takes
    assert loader._fast_yaml(shallow) == list(yaml.safe_load_all(shallow))


def test_the_catalog_compiles_in_one_sandbox_worker_with_the_same_reports() -> None:
    COMPILE_RESULTS.clear()  # compile results are process-wide: another test may have compiled the catalog
    pool = SandboxPool()
    try:
        registry = DefinitionRegistry(CATALOG, pool=pool)
        assert len(pool.pids()) == 1  # one worker compiled everything (one per definition lane before: 4)
        batched = {x.definition.name: x.report for x in registry.all()}
    finally:
        pool.close()
    one_by_one_pool = SandboxPool()
    try:
        defs, _ = load_dir(CATALOG)
        COMPILE_RESULTS.clear()
        alone = {d.name: validate_module.validate(d, one_by_one_pool.lane(d.name)) for d in defs}
    finally:
        one_by_one_pool.close()
    assert batched == alone and len(batched) == len(defs)


def test_a_jq_error_in_a_builtin_definition_is_still_reported_when_the_registry_is_built(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    good = sorted(CATALOG.glob("batch-job-v1.yaml"))[0]
    (catalog / good.name).write_text(good.read_text())
    bad = yaml.safe_load(good.read_text())
    bad["metadata"]["name"] = "broken-job"
    bad["spec"]["structureDefinition"]["rootComponent"]["specDefinition"]["podTemplateSpecPath"] = ".spec | ]["
    (catalog / "broken.yaml").write_text(yaml.safe_dump(bad))
    COMPILE_RESULTS.clear()
    pool = SandboxPool()
    try:
        registry = DefinitionRegistry(catalog, pool=pool)
    finally:
        pool.close()
    broken = registry.get("broken-job")
    assert broken is not None and not broken.report.ok
    assert any(i.expression == ".spec | ][" and "failed to parse JQ expression" in i.message
               for i in broken.report.errors), broken.report.errors
    assert all(x.report.ok for x in registry.all() if x.definition.name != "broken-job")
