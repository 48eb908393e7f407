"""The per-workload-type defaults ConfigMap (``--default-priorities-configmap-name/-namespace``).

Key ``types`` holds a JSON list of ``{typeName, group, priorityName, preemptibility}``. Entries are
indexed by ``Kind.group`` (``Kind`` when the group is empty, as Go's ``GroupKind.String()``); a lookup
tries ``Kind.group`` first, then the kind alone, so one entry can cover every group of a kind.
Like KAI's ``encoding/json`` decoding, field names match case-insensitively, unknown fields are
ignored, and a later entry for the same key replaces an earlier one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from grouper.model.errors import GroupingError
from grouper.model.objects import GVK, Obj, describe

TYPES_KEY = "types"
_FIELDS = {"typename": "type_name", "group": "group", "priorityname": "priority_name",
           "preemptibility": "preemptibility"}


class DefaultsConfigMapError(GroupingError):
    """The defaults ConfigMap cannot be read. The default grouper logs it and uses its fallback."""

    reason = "InvalidDefaultsConfigMap"


@dataclass(frozen=True)
class TypeDefaults:
    type_name: str = ""
    group: str = ""
    priority_name: str = ""
    preemptibility: str = ""

    @property
    def key(self) -> str:
        return group_kind_key(self.group, self.type_name)


def group_kind_key(group: str, kind: str) -> str:
    """Go's ``schema.GroupKind{Group, Kind}.String()``."""
    return f"{kind}.{group}" if group else kind


def parse_defaults_configmap(cm: Obj | None) -> dict[str, TypeDefaults]:
    """``group_kind_key`` → entry. Raises ``DefaultsConfigMapError`` naming the ConfigMap and field."""
    if cm is None:
        raise DefaultsConfigMapError("default priorities ConfigMap is missing")
    where = describe({**cm, "kind": cm.get("kind") or "ConfigMap"})
    data = cm.get("data")
    if not isinstance(data, Mapping) or TYPES_KEY not in data:
        raise DefaultsConfigMapError(f'data does not contain the "{TYPES_KEY}" key', obj=where)
    field = f'data["{TYPES_KEY}"]'
    raw = data[TYPES_KEY]
    if not isinstance(raw, str):
        raise DefaultsConfigMapError("expected a JSON string", obj=where, field=field)
    try:
        parsed = json.loads(raw)
    except ValueError as err:
        raise DefaultsConfigMapError(f"invalid JSON: {err}", obj=where, field=field) from err
    if parsed is None:
        return {}
    if not isinstance(parsed, list):
        raise DefaultsConfigMapError("expected a JSON list of type entries", obj=where, field=field)
    out: dict[str, TypeDefaults] = {}
    for index, item in enumerate(parsed):
        if item is None:
            item = {}
        if not isinstance(item, dict):
            raise DefaultsConfigMapError(f"entry {index} is not an object", obj=where, field=field)
        values: dict[str, str] = {}
        for key, value in item.items():
            attr = _FIELDS.get(key.lower())
            if attr is None:
                continue
            if value is not None and not isinstance(value, str):
                raise DefaultsConfigMapError(f"entry {index}: {key} must be a string, got {value!r}",
                                             obj=where, field=field)
            values[attr] = value or ""
        entry = TypeDefaults(**values)
        out[entry.key] = entry
    return out


def defaults_for_kind(defaults: Mapping[str, TypeDefaults], gvk: GVK) -> TypeDefaults | None:
    """The entry for ``gvk``'s group/kind: ``Kind.group`` first, then ``Kind``; None without a kind."""
    if not defaults or not gvk.kind:
        return None
    return defaults.get(group_kind_key(gvk.group, gvk.kind)) or defaults.get(gvk.kind)


def default_priority_class_for_kind(defaults: Mapping[str, TypeDefaults], gvk: GVK) -> str:
    """The configured priority class name for ``gvk`` ("" when none)."""
    entry = defaults_for_kind(defaults, gvk)
    return entry.priority_name if entry else ""


__all__ = [
    "DefaultsConfigMapError",
    "TypeDefaults",
    "default_priority_class_for_kind",
    "defaults_for_kind",
    "group_kind_key",
    "parse_defaults_configmap",
]
