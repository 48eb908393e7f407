"""Read Kubernetes manifests (YAML or JSON, multi-document, ``kind: List``) from files."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grouper.model.shape import ShapeError, measure


class ManifestError(Exception):
    """A file that cannot be read or parsed; the message names the file and the position."""


@dataclass
class Manifest:
    obj: dict[str, Any]
    source: str  # "path#index"


def load_manifests(paths: Iterable[str | Path]) -> list[Manifest]:
    out: list[Manifest] = []
    for raw in paths:
        path = Path(raw)
        files = sorted(p for p in path.rglob("*") if p.suffix in {".yaml", ".yml", ".json"}) if path.is_dir() else [path]
        for file in files:
            out.extend(_load_file(file))
    return out


MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_NESTING = 100  # Kubernetes objects nest far less; deeper input is refused before it is walked


def _load_file(path: Path) -> list[Manifest]:
    try:
        raw = path.read_bytes() if str(path) != "-" else sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ManifestError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    if b"\x00" in raw:
        raise ManifestError(f"{path}: not a text file (contains NUL bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: invalid YAML: {exc}") from None
    except RecursionError:
        raise ManifestError(f"{path}: nests too deeply to parse (limit {MAX_NESTING} levels)") from None
    for index, doc in enumerate(docs):
        try:  # first: the checks below and every later reader walk the document as a tree
            measure(doc, max_depth=MAX_NESTING)
        except ShapeError as exc:
            raise ManifestError(f"{path}: document {index}: {exc}") from None
        where = _non_json(doc)
        if where is not None:
            raise ManifestError(f"{path}: document {index}: field {where[0]}: {where[1]}")
    out: list[Manifest] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ManifestError(f"{path}: document {index}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else None
        if isinstance(items, list):
            for j, item in enumerate(items):
                if not isinstance(item, dict):
                    raise ManifestError(f"{path}: document {index}: items[{j}] is not an object")
                out.append(_check(item, f"{path}#{index}.items[{j}]"))
        else:
            out.append(_check(doc, f"{path}#{index}"))
    return out


def _check(obj: dict[str, Any], source: str) -> Manifest:
    for fld in ("apiVersion", "kind"):
        if not isinstance(obj.get(fld), str) or not obj.get(fld):
            raise ManifestError(f"{source}: field {fld} is missing")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ManifestError(f"{source}: {obj.get('kind')}: field metadata must be a mapping")
    if not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise ManifestError(f"{source}: {obj.get('kind')}: field metadata.name must be a non-empty string")
    ns = meta.get("namespace")
    if ns is not None and not isinstance(ns, str):
        raise ManifestError(f"{source}: {obj.get('kind')} {meta['name']}: field metadata.namespace must be a string")
    return Manifest(obj, source)


def _non_json(value: Any) -> tuple[str, str] | None:
    """(field path, problem) of the first value the API server could not hold: a non-finite
    number (YAML ``.inf`` / ``.nan``) or a non-string key (dates are left to the readers)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, at = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return at or "(document)", f"{v} is not a JSON number"
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    return at or "(document)", f"key {k!r} is not a string"
                stack.append((x, f"{at}.{k}" if at else k))
        elif isinstance(v, list):
            stack.extend((x, f"{at}[{i}]") for i, x in enumerate(v))
    return None


# Fields whose JSON type the API server enforces for every object (ObjectMeta) or every pod (PodSpec).
_STRING_MAPS = ("labels", "annotations")
_POD_LISTS = ("containers", "initContainers", "ephemeralContainers", "volumes", "tolerations")


def schema_problem(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(field, what was expected) for the first field of ``obj`` of a type the API server would refuse:
    ``metadata.labels``/``annotations`` not maps of strings, ``metadata.ownerReferences`` not a list of
    objects, ``spec``/``status`` not objects, a pod's container/volume lists not lists of objects. Readers
    that take a file's objects as the API server would serve them (``describe -f``) check this first."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for section in _STRING_MAPS:
            v = meta.get(section)
            if v is None:
                continue
            if not isinstance(v, dict):
                return f"metadata.{section}", f"expected a map of strings, got {type(v).__name__}"
            for k, x in v.items():
                if not isinstance(x, str):
                    return f"metadata.{section}[{k!r}]", f"expected a string, got {type(x).__name__}"
        refs = meta.get("ownerReferences")
        if refs is not None and not (isinstance(refs, list) and all(isinstance(r, dict) for r in refs)):
            return "metadata.ownerReferences", "expected a list of owner references (objects)"
    for part in ("spec", "status"):
        v = obj.get(part)
        if v is not None and not isinstance(v, dict):
            return part, f"expected an object, got {type(v).__name__}"
    spec = obj.get("spec")
    if obj.get("kind") == "Pod" and isinstance(spec, dict):
        for name in _POD_LISTS:
            v = spec.get(name)
            if v is not None and not (isinstance(v, list) and all(isinstance(x, dict) for x in v)):
                return f"spec.{name}", "expected a list of objects"
    return None
