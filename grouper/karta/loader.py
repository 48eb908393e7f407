"""Turn Karta documents (YAML/JSON files, directories, cluster objects) into ``KartaDefinition``.

Strict about types (a field of the wrong JSON type is a ``KartaLoadError`` naming the field),
lenient about unknown fields (ignored, as the API server would prune them). Applies the CRD
defaults the API server would apply (karta.md §1.3, §7.4): ``typeFieldName: type``,
``statusFieldName: status``, ``messageFieldName: message``, ``reasonFieldName: reason``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

from grouper.karta.errors import KartaLoadError
from grouper.karta.model import (
    FRAGMENT_FIELDS,
    KARTA_API_VERSION,
    KARTA_KIND,
    LEGACY_API_VERSION,
    LEGACY_KIND,
    STATUS_KEYS,
    AlphaPodGroup,
    Component,
    ComponentTypeSelector,
    ConditionMatcher,
    ConditionsDefinition,
    ExpressionMatcher,
    GangScheduling,
    KartaDefinition,
    PodGroupMapping,
    PodGroupMember,
    PodSelector,
    ScaleDefinition,
    SpecDefinition,
    StatusDefinition,
    StatusMatcher,
    SubGroupMapping,
    SuspendAction,
    SuspendDefinition,
    TopologySpec,
)
from grouper.model.objects import GVK
from grouper.model.shape import ShapeError, measure

ACCEPTED = {(KARTA_API_VERSION, KARTA_KIND), (LEGACY_API_VERSION, LEGACY_KIND)}
_LIST_KINDS = {"KartaList", "ResourceInterfaceList", "List"}
_SUFFIXES = (".yaml", ".yml", ".json")


# ---------------------------------------------------------------- typed field readers


def _obj(value: Any, path: str, *, required: bool = False) -> dict[str, Any] | None:
    if value is None:
        if required:
            raise KartaLoadError("is required", field=path)
        return None
    if not isinstance(value, dict):
        raise KartaLoadError(f"must be an object, got {type(value).__name__}", field=path)
    return value


def _req_obj(value: Any, path: str) -> dict[str, Any]:
    out = _obj(value, path, required=True)
    assert out is not None
    return out


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise KartaLoadError(f"must be a list, got {type(value).__name__}", field=path)
    return value


def _obj_items(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(item path, item)`` for each item of a list of objects (each one required), checked in order."""
    for i, item in enumerate(_list(value, path)):
        item_path = f"{path}[{i}]"
        yield item_path, _req_obj(item, item_path)


def _str(value: Any, path: str, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise KartaLoadError("is required", field=path)
        return None
    if not isinstance(value, str):
        raise KartaLoadError(f"must be a string, got {type(value).__name__}", field=path)
    return value


def _req_str(value: Any, path: str) -> str:
    out = _str(value, path, required=True)
    assert out is not None
    return out


def _str_list(value: Any, path: str) -> tuple[str, ...]:
    return tuple(_req_str(v, f"{path}[{i}]") for i, v in enumerate(_list(value, path)))


def _gvk(value: Any, path: str) -> GVK | None:
    d = _obj(value, path)
    if d is None:
        return None
    return GVK(
        _str(d.get("group"), f"{path}.group") or "",
        _str(d.get("version"), f"{path}.version") or "",
        _str(d.get("kind"), f"{path}.kind") or "",
    )


# ---------------------------------------------------------------- component parts


def _spec(value: Any, path: str) -> SpecDefinition | None:
    d = _obj(value, path)
    if d is None:
        return None
    frag_raw = _obj(d.get("fragmentedPodSpecDefinition"), f"{path}.fragmentedPodSpecDefinition")
    fragmented: dict[str, str] | None = None
    if frag_raw is not None:
        fragmented = {}
        for name in FRAGMENT_FIELDS:
            p = _str(frag_raw.get(name), f"{path}.fragmentedPodSpecDefinition.{name}")
            if p:
                fragmented[name] = p
    return SpecDefinition(
        pod_template_spec_path=_str(d.get("podTemplateSpecPath"), f"{path}.podTemplateSpecPath") or None,
        pod_spec_path=_str(d.get("podSpecPath"), f"{path}.podSpecPath") or None,
        metadata_path=_str(d.get("metadataPath"), f"{path}.metadataPath") or None,
        fragmented=fragmented,
    )


def _scale(value: Any, path: str) -> ScaleDefinition | None:
    d = _obj(value, path)
    if d is None:
        return None
    return ScaleDefinition(
        replicas_path=_str(d.get("replicasPath"), f"{path}.replicasPath") or None,
        min_replicas_path=_str(d.get("minReplicasPath"), f"{path}.minReplicasPath") or None,
        max_replicas_path=_str(d.get("maxReplicasPath"), f"{path}.maxReplicasPath") or None,
    )


def _matcher(value: Any, path: str) -> StatusMatcher:
    d = _req_obj(value, path)
    conds: list[ConditionMatcher] = []
    for cp, cd in _obj_items(d.get("byConditions"), f"{path}.byConditions"):
        conds.append(
            ConditionMatcher(
                type=_req_str(cd.get("type"), f"{cp}.type"),
                status=_str(cd.get("status"), f"{cp}.status") or None,
                reason=_str(cd.get("reason"), f"{cp}.reason") or None,
            )
        )
    expr: ExpressionMatcher | None = None
    ed = _obj(d.get("byExpression"), f"{path}.byExpression")
    if ed is not None:
        expr = ExpressionMatcher(
            expression=_req_str(ed.get("expression"), f"{path}.byExpression.expression"),
            expected_result=_req_str(ed.get("expectedResult"), f"{path}.byExpression.expectedResult"),
        )
    return StatusMatcher(
        by_phase=_str(d.get("byPhase"), f"{path}.byPhase") or None,
        by_conditions=tuple(conds),
        by_expression=expr,
    )


def _status(value: Any, path: str) -> StatusDefinition | None:
    d = _obj(value, path)
    if d is None:
        return None
    phase_path: str | None = None
    pd = _obj(d.get("phaseDefinition"), f"{path}.phaseDefinition")
    if pd is not None:
        phase_path = _str(pd.get("path"), f"{path}.phaseDefinition.path") or None
    conditions: ConditionsDefinition | None = None
    cd = _obj(d.get("conditionsDefinition"), f"{path}.conditionsDefinition")
    if cd is not None:
        cp = f"{path}.conditionsDefinition"
        # CRD defaults apply when a field is absent or empty (omitempty on the Go side).
        conditions = ConditionsDefinition(
            path=_str(cd.get("path"), f"{cp}.path") or "",
            type_field=_str(cd.get("typeFieldName"), f"{cp}.typeFieldName") or "type",
            status_field=_str(cd.get("statusFieldName"), f"{cp}.statusFieldName") or "status",
            message_field=_str(cd.get("messageFieldName"), f"{cp}.messageFieldName") or "message",
            reason_field=_str(cd.get("reasonFieldName"), f"{cp}.reasonFieldName") or "reason",
        )
    mappings: dict[str, tuple[StatusMatcher, ...]] = {}
    md = _obj(d.get("statusMappings"), f"{path}.statusMappings") or {}
    for status, key in STATUS_KEYS.items():
        if key in md:
            mp = f"{path}.statusMappings.{key}"
            mappings[status] = tuple(_matcher(m, f"{mp}[{i}]") for i, m in enumerate(_list(md[key], mp)))
    return StatusDefinition(phase_path=phase_path, conditions=conditions, mappings=mappings)


def _suspend(value: Any, path: str) -> SuspendDefinition | None:
    d = _obj(value, path)
    if d is None:
        return None

    def actions(key: str) -> tuple[SuspendAction, ...]:
        out = []
        for ap, ad in _obj_items(d.get(key), f"{path}.{key}"):
            out.append(
                SuspendAction(
                    _req_str(ad.get("path"), f"{ap}.path"), _req_str(ad.get("value"), f"{ap}.value")
                )
            )
        return tuple(out)

    return SuspendDefinition(actions("suspendActions"), actions("resumeActions"))


def _pod_selector(value: Any, path: str) -> PodSelector | None:
    d = _obj(value, path)
    if d is None:
        return None
    cts: ComponentTypeSelector | None = None
    cd = _obj(d.get("componentTypeSelector"), f"{path}.componentTypeSelector")
    if cd is not None:
        cp = f"{path}.componentTypeSelector"
        labels_raw = _obj(cd.get("matchLabels"), f"{cp}.matchLabels") or {}
        labels = {str(k): _req_str(v, f"{cp}.matchLabels.{k}") for k, v in labels_raw.items()}
        cts = ComponentTypeSelector(
            key_path=_str(cd.get("keyPath"), f"{cp}.keyPath") or None,
            value=_str(cd.get("value"), f"{cp}.value"),
            match_labels=labels,
        )
    inst = _obj(d.get("componentInstanceSelector"), f"{path}.componentInstanceSelector")
    rep = _obj(d.get("replicaSelector"), f"{path}.replicaSelector")
    return PodSelector(
        component_type=cts,
        instance_id_path=(_str(inst.get("idPath"), f"{path}.componentInstanceSelector.idPath") or None)
        if inst is not None
        else None,
        has_instance_selector=inst is not None,
        replica_key_path=(_str(rep.get("keyPath"), f"{path}.replicaSelector.keyPath") or None)
        if rep is not None
        else None,
        has_replica_selector=rep is not None,
    )


def _component(value: Any, path: str) -> Component:
    d = _req_obj(value, path)
    return Component(
        name=_str(d.get("name"), f"{path}.name") or "",
        path=path,
        kind=_gvk(d.get("kind"), f"{path}.kind"),
        owner_ref=_str(d.get("ownerRef"), f"{path}.ownerRef"),
        spec=_spec(d.get("specDefinition"), f"{path}.specDefinition"),
        scale=_scale(d.get("scaleDefinition"), f"{path}.scaleDefinition"),
        status=_status(d.get("statusDefinition"), f"{path}.statusDefinition"),
        suspend=_suspend(d.get("suspendDefinition"), f"{path}.suspendDefinition"),
        instance_id_path=_str(d.get("instanceIdPath"), f"{path}.instanceIdPath") or None,
        pod_selector=_pod_selector(d.get("podSelector"), f"{path}.podSelector"),
    )


def _topology(value: Any, path: str) -> TopologySpec | None:
    d = _obj(value, path)
    if d is None:
        return None
    return TopologySpec(
        topology_name=_str(d.get("topologyName"), f"{path}.topologyName") or "",
        preferred_level=_str(d.get("preferredTopologyLevel"), f"{path}.preferredTopologyLevel") or "",
        required_level=_str(d.get("requiredTopologyLevel"), f"{path}.requiredTopologyLevel") or "",
    )


def _gang(value: Any, path: str) -> GangScheduling | None:
    d = _obj(value, path)
    if d is None:
        return None
    pod_group: PodGroupMapping | None = None
    pgd = _obj(d.get("podGroup"), f"{path}.podGroup")
    if pgd is not None:
        pp = f"{path}.podGroup"
        subs = []
        for sp, sd in _obj_items(pgd.get("subGroups"), f"{pp}.subGroups"):
            subs.append(
                SubGroupMapping(
                    component_name=_str(sd.get("componentName"), f"{sp}.componentName") or "",
                    topology=_topology(sd.get("topology"), f"{sp}.topology"),
                )
            )
        pod_group = PodGroupMapping(
            name=_str(pgd.get("name"), f"{pp}.name") or "",
            topology=_topology(pgd.get("topology"), f"{pp}.topology"),
            sub_groups=tuple(subs),
        )
    groups: list[AlphaPodGroup] = []
    for gp, gd in _obj_items(d.get("podGroups"), f"{path}.podGroups"):
        members = []
        for mp, md in _obj_items(gd.get("members"), f"{gp}.members"):
            members.append(
                PodGroupMember(
                    component_name=_str(md.get("componentName"), f"{mp}.componentName") or "",
                    group_by_key_paths=_str_list(md.get("groupByKeyPaths"), f"{mp}.groupByKeyPaths"),
                    filters=_str_list(md.get("filters"), f"{mp}.filters"),
                )
            )
        groups.append(AlphaPodGroup(name=_str(gd.get("name"), f"{gp}.name") or "", members=tuple(members)))
    gang = GangScheduling(pod_group=pod_group, pod_groups=tuple(groups))
    return gang if gang.has_instructions else None


# ---------------------------------------------------------------- public API


# Input limits (a Karta is a few KB in practice; these keep a hostile one from costing minutes
# of validation or megabytes of memory in the controller). The API server caps objects at ~1.5 MB.
MAX_OBJECT_BYTES = 256 * 1024
MAX_COMPONENTS = 256
MAX_NESTING = 64  # JSON nesting depth of the object
MAX_COMPONENT_DEPTH = 32  # ownerRef chain length from a child up to the root
MAX_FILE_BYTES = 4 * 1024 * 1024


def check_limits(obj: dict[str, Any]) -> None:
    """Raise ``KartaLoadError`` when ``obj`` is beyond the input limits (before parsing it)."""
    try:  # first: the checks below walk the object as a tree (YAML aliases share nodes: see model.shape)
        measure(obj, max_depth=MAX_NESTING)
    except ShapeError as e:
        raise KartaLoadError(e.message, field=e.field or None) from None
    spec = obj.get("spec")
    sd = spec.get("structureDefinition") if isinstance(spec, dict) else None
    kids = sd.get("childComponents") if isinstance(sd, dict) else None
    if isinstance(kids, list) and len(kids) + 1 > MAX_COMPONENTS:
        raise KartaLoadError(
            f"{len(kids) + 1} components, more than the limit of {MAX_COMPONENTS}",
            field="spec.structureDefinition.childComponents",
        )
    try:
        size = len(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError) as e:
        raise KartaLoadError(f"the object is not JSON-serializable: {e}") from None
    if size > MAX_OBJECT_BYTES:
        raise KartaLoadError(f"the object is {size} bytes, more than the limit of {MAX_OBJECT_BYTES}")


def _check_depth(root: Component, children: list[Component]) -> None:
    by_name = {c.name: c for c in children}
    for i, c in enumerate(children):
        depth, cur, seen = 1, c, {c.name}
        while cur.owner_ref and cur.owner_ref != root.name and cur.owner_ref in by_name:
            cur = by_name[cur.owner_ref]
            if cur.name in seen:
                break  # a cycle: the validator reports it
            seen.add(cur.name)
            depth += 1
            if depth > MAX_COMPONENT_DEPTH:
                raise KartaLoadError(
                    f"component '{c.name}' is more than {MAX_COMPONENT_DEPTH} ownerRef levels below the root",
                    field=f"spec.structureDefinition.childComponents[{i}].ownerRef",
                )


def from_object(obj: dict[str, Any], origin: str) -> KartaDefinition:
    """Parse one Karta (or legacy ResourceInterface) object. Raises ``KartaLoadError``."""
    if not isinstance(obj, dict):
        raise KartaLoadError(f"document must be an object, got {type(obj).__name__}")
    check_limits(obj)
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or (api_version, kind) not in ACCEPTED:
        raise KartaLoadError(
            f"unsupported apiVersion/kind {api_version}/{kind}; expected "
            f"{KARTA_API_VERSION} {KARTA_KIND} or {LEGACY_API_VERSION} {LEGACY_KIND}",
            field="apiVersion",
        )
    meta = _req_obj(obj.get("metadata"), "metadata")
    name = _str(meta.get("name"), "metadata.name", required=True) or ""
    if not name:
        raise KartaLoadError("must not be empty", field="metadata.name")
    rv = meta.get("resourceVersion")
    spec = _req_obj(obj.get("spec"), "spec")
    sd = _req_obj(spec.get("structureDefinition"), "spec.structureDefinition")
    root = _component(sd.get("rootComponent"), "spec.structureDefinition.rootComponent")
    children = [
        _component(c, f"spec.structureDefinition.childComponents[{i}]")
        for i, c in enumerate(_list(sd.get("childComponents"), "spec.structureDefinition.childComponents"))
    ]
    _check_depth(root, children)
    extra: list[GVK] = []
    for i, g in enumerate(
        _list(sd.get("additionalChildKinds"), "spec.structureDefinition.additionalChildKinds")
    ):
        gvk = _gvk(g, f"spec.structureDefinition.additionalChildKinds[{i}]")
        if gvk is not None:
            extra.append(gvk)
    instr = _obj(spec.get("optimizationInstructions"), "spec.optimizationInstructions") or {}
    gang = _gang(instr.get("gangScheduling"), "spec.optimizationInstructions.gangScheduling")
    return KartaDefinition(
        name=name,
        gvk=root.kind or GVK("", "", ""),
        origin=origin,
        api_version=str(api_version),
        resource_version=str(rv) if rv is not None else None,
        root=root,
        children=children,
        gang=gang,
        raw=copy.deepcopy(obj),
        additional_child_kinds=tuple(extra),
        deleting=bool(meta.get("deletionTimestamp")),
    )


# libyaml's parser (PyYAML's C extension), when built: ~10x faster than the pure-Python one. Only for catalog
# directories (``load_dir``: the shipped catalog, ``--definitions``), parsed at every start; what a user hands in
# (``load_file``, ``load_text``) keeps the pure-Python parser.
_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)


def _fast_yaml(text: str) -> list[Any]:
    """``yaml.safe_load_all`` (same constructor and resolver, so the same values) through libyaml, falling back
    to the pure-Python parser for anything libyaml rejects or that nests deeper than ``MAX_NESTING``, so errors
    and the deep-nesting limit read exactly as without it."""
    if _CSafeLoader is not None:
        try:
            docs = list(yaml.load_all(text, Loader=_CSafeLoader))
            for doc in docs:
                measure(doc, max_depth=MAX_NESTING)
        except (yaml.YAMLError, ShapeError, RecursionError):
            pass
        else:
            return docs
    return list(yaml.safe_load_all(text))


def _documents(path: Path, *, fast: bool = False) -> list[Any]:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise KartaLoadError(f"file is {size} bytes, more than the limit of {MAX_FILE_BYTES}", file=str(path))
    raw = path.read_bytes()
    if b"\x00" in raw:
        raise KartaLoadError("not a text file (contains NUL bytes)", file=str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KartaLoadError(f"not UTF-8 text: {e}", file=str(path)) from None
    return parse_documents(text, str(path), json_only=path.suffix == ".json", fast=fast)


def parse_documents(text: str, source: str, *, json_only: bool = False, fast: bool = False) -> list[Any]:
    """YAML (or JSON) documents of ``text``; deep nesting and bad syntax are ``KartaLoadError``s.
    ``fast``: parse YAML with libyaml when it can (``_fast_yaml``)."""
    try:
        if json_only:
            data = json.loads(text)
            return data if isinstance(data, list) else [data]
        return _fast_yaml(text) if fast else list(yaml.safe_load_all(text))
    except json.JSONDecodeError as e:
        raise KartaLoadError(f"invalid JSON: {e}", file=source) from None
    except yaml.YAMLError as e:
        raise KartaLoadError(f"invalid YAML: {e}", file=source) from None
    except RecursionError:
        raise KartaLoadError("the document nests too deeply to parse", file=source) from None


def load_text(data: bytes, source: str, *, origin: str | None = None) -> list[KartaDefinition]:
    """All definitions in YAML/JSON bytes (e.g. stdin), with the same checks as ``load_file``."""
    if len(data) > MAX_FILE_BYTES:
        raise KartaLoadError(f"input is {len(data)} bytes, more than the limit of {MAX_FILE_BYTES}", file=source)
    if b"\x00" in data:
        raise KartaLoadError("not a text file (contains NUL bytes)", file=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KartaLoadError(f"not UTF-8 text: {e}", file=source) from None
    return _definitions(parse_documents(text, source), source, origin or f"file:{source}")


def _definitions(docs: list[Any], source: str, base: str) -> list[KartaDefinition]:
    out: list[KartaDefinition] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        items = [doc]
        if isinstance(doc, dict) and doc.get("kind") in _LIST_KINDS and isinstance(doc.get("items"), list):
            items = doc["items"]
        for item in items:
            try:
                out.append(from_object(item, base if index == 0 else f"{base}#{index}"))
            except KartaLoadError as e:
                raise e.located(source, index) from None
    return out


def load_file(path: str | Path, *, origin: str | None = None, fast: bool = False) -> list[KartaDefinition]:
    """All definitions in one YAML/JSON file (multi-document; ``*List`` objects are expanded).

    ``origin`` defaults to ``file:<path>``; the n-th document (n > 0) gets ``#n`` appended. ``fast``: see
    ``parse_documents``.
    """
    p = Path(path)
    return _definitions(_documents(p, fast=fast), str(p), origin or f"file:{p}")


def load_dir(
    path: str | Path, *, origin_prefix: str = "builtin"
) -> tuple[list[KartaDefinition], list[KartaLoadError]]:
    """Every ``*.yaml``/``*.yml``/``*.json`` directly in ``path`` (sorted by file name).

    A broken file does not stop the others; its error is returned. Origins look like
    ``builtin:definitions/jobset.yaml``. A missing directory yields nothing. YAML is parsed with libyaml when it
    can (``_fast_yaml``: the catalog is parsed at every start).
    """
    d = Path(path)
    defs: list[KartaDefinition] = []
    errors: list[KartaLoadError] = []
    if not d.is_dir():
        return defs, errors
    for f in sorted(d.iterdir()):
        if not f.is_file() or f.suffix not in _SUFFIXES:
            continue
        try:
            defs.extend(load_file(f, origin=f"{origin_prefix}:{d.name}/{f.name}", fast=True))
        except KartaLoadError as e:
            errors.append(e if e.file else e.located(str(f), e.index))
        except (OSError, UnicodeDecodeError) as e:
            errors.append(KartaLoadError(f"cannot read: {e}", file=str(f)))
    return defs, errors
