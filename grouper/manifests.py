"""Read Kubernetes manifests (YAML or JSON, multi-document, ``kind: List``) from files."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


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


def _load_file(path: Path) -> list[Manifest]:
    try:
        text = path.read_text() if str(path) != "-" else __import__("sys").stdin.read()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: invalid YAML: {exc}") from exc
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
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ManifestError(f"{source}: {obj.get('kind')}: field metadata.name is missing")
    return Manifest(obj, source)
