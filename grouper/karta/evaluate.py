"""Applying a Karta definition to live objects (karta.md §3.2-§3.6).

``Evaluator(defn)`` answers: instance ids, pod templates, scale, status of a root object; which
component/instance a pod belongs to; subtree scale (minAvailable). Everything is a pure function
of (definition, root object, pod); results are cached per object version.

How a question is answered: the definition's expressions are split into three *batches* by the
object they read — ``root`` (instance ids, scale, status), ``spec`` (pod definitions, only needed
for listings) and ``pod`` (selectors, group keys, filters). The first question about an object
evaluates its whole batch in one fused jq run (``jqrun.evaluate_many``) and caches the outcomes
under the object's (uid, resourceVersion); later questions about the same object version cost a
dict lookup. A typical pod → PodGroup decision is therefore one jq run on the workload (shared by
all its pods) plus one on the pod.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grouper.karta.errors import KartaEvalError
from grouper.karta.jqrun import (
    DEFAULT_MAX_OUTPUTS,
    EACH_MAX_BYTES,
    EACH_MAX_INPUTS,
    IN_PROCESS,
    OBJECT_TEXTS,
    Outcome,
    Runner,
    evaluate_groups,
    evaluate_many,
)
from grouper.karta.jqsyntax import root_fields
from grouper.karta.model import (
    FRAGMENT_FIELDS,
    STATUS_ORDER,
    UNDEFINED_STATUS,
    Component,
    KartaDefinition,
    StatusMatcher,
)
from grouper.karta.values import INT32_MAX, decode_int32, go_quote, go_sprint, gojq_json, gojq_tostring

Obj = dict[str, Any]

ROOT, SPEC, POD = "root", "spec", "pod"

# Fields a Go decoder keeps when it decodes a value into ObjectMeta / PodSpec (unknowns dropped).
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
        "selfLink",
    }
)
POD_SPEC_FIELDS = frozenset(
    {
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "containers",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "hostnameOverride",
        "imagePullSecrets",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "os",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "restartPolicy",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
    }
)


@dataclass(frozen=True)
class Scale:
    """One instance's scale; ``None`` = not set (or the path yielded ``null``)."""

    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None

    @property
    def effective(self) -> int:
        """Gang rule: minReplicas if > 0, else replicas if > 0, else 0 (karta.md §3.6)."""
        if self.min_replicas is not None and self.min_replicas > 0:
            return self.min_replicas
        if self.replicas is not None and self.replicas > 0:
            return self.replicas
        return 0


@dataclass(frozen=True)
class StatusResult:
    """Every matched status in upstream order; ``primary`` is the first (our precedence)."""

    matched: list[str]
    primary: str


def _filter_keys(value: Any, keep: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k in keep}


class Evaluator:
    """Evaluates one definition. Thread-safe; cheap to keep one per definition.

    ``max_outputs``: per-expression output cap (upstream 1000; reaching it is an error).
    ``timeout_s``: per jq run; enforced only when runs happen in a worker process
    (``isolate=True`` or an explicit ``runner``) because libjq cannot be interrupted in-process.
    ``isolate``: run jq in the shared sandbox worker (for untrusted, cluster-supplied definitions).
    """

    def __init__(
        self,
        defn: KartaDefinition,
        *,
        max_outputs: int = DEFAULT_MAX_OUTPUTS,
        timeout_s: float = 10.0,
        isolate: bool = False,
        runner: Runner | None = None,
        cache_size: int = 1024,
    ) -> None:
        self.definition = defn
        self.max_outputs = max_outputs
        self.timeout_s = timeout_s
        if runner is None:
            if isolate:
                from grouper.karta.sandbox import shared_runner

                runner = shared_runner()
            else:
                runner = IN_PROCESS
        self.runner: Runner = runner
        self.isolated = runner is not IN_PROCESS
        self._batches = self._collect()
        self._fields = {name: _union_fields(exprs) for name, exprs in self._batches.items()}
        self._cache_size = cache_size
        self._cache: OrderedDict[tuple[Any, ...], dict[str, Outcome]] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------ plumbing

    def _collect(self) -> dict[str, tuple[str, ...]]:
        d = self.definition
        root: list[str] = []
        spec: list[str] = []
        pod: list[str] = []
        for c in d.components():
            if c.instance_id_path:
                root.append(c.instance_id_path)
            if c.scale:
                root.extend(c.scale.paths().values())
            if c.spec:
                spec.extend(
                    p
                    for p in (c.spec.pod_template_spec_path, c.spec.pod_spec_path, c.spec.metadata_path)
                    if p
                )
                if c.spec.fragmented:
                    spec.extend(c.spec.fragmented.values())
            sel = c.pod_selector
            if sel:
                if sel.component_type and sel.component_type.key_path:
                    pod.append(sel.component_type.key_path)
                if sel.instance_id_path:
                    pod.append(sel.instance_id_path)
                if sel.replica_key_path:
                    pod.append(sel.replica_key_path)
        st = d.root.status
        if st:
            if st.phase_path:
                root.append(st.phase_path)
            if st.conditions and st.conditions.path:
                root.append(st.conditions.path)
            for matchers in st.mappings.values():
                root.extend(m.by_expression.expression for m in matchers if m.by_expression)
        if d.gang:
            for g in d.gang.pod_groups:
                for m in g.members:
                    pod.extend(m.group_by_key_paths)
                    pod.extend(m.filters)
        return {
            ROOT: tuple(dict.fromkeys(root)),
            SPEC: tuple(dict.fromkeys(spec)),
            POD: tuple(dict.fromkeys(pod)),
        }

    def _outcomes(self, obj: Obj, batch: str) -> tuple[tuple[Any, ...], dict[str, Outcome]]:
        key, text = OBJECT_TEXTS.get(obj, self._fields[batch])
        ck = (key, batch)
        with self._lock:
            hit = self._cache.get(ck)
            if hit is not None:
                self._cache.move_to_end(ck)
                return key, hit
        res = evaluate_many(
            self._batches[batch],
            text,
            runner=self.runner,
            max_outputs=self.max_outputs,
            timeout_s=self.timeout_s,
        )
        self._store(ck, res)
        return key, res

    def prefetch(self, objs: Sequence[Obj], batch: str = POD, *, root: Obj | None = None) -> int:
        """Evaluate ``batch`` (default: the pod expressions) on the objects not cached yet, in one run
        per up to ``EACH_MAX_INPUTS`` objects, and cache the outcomes: a pass deciding many pods pays
        one sandbox round trip, not one per pod. ``root``: the workload's root object, whose root
        expressions ride along in the first run (else its first decision pays a run of its own). Best
        effort — what one run cannot answer is left to the per-object path, which gives the same
        outcomes. Returns how many objects it cached."""
        exprs = self._batches.get(batch) or ()
        if not exprs:
            return 0
        fields = self._fields[batch]
        todo: dict[tuple[Any, ...], str] = {}
        for obj in objs:
            key, text = OBJECT_TEXTS.get(obj, fields)
            with self._lock:
                if (key, batch) not in self._cache:
                    todo.setdefault(key, text)
        rider: tuple[tuple[Any, ...], str] | None = None
        if root is not None and self._batches.get(ROOT):
            key, text = OBJECT_TEXTS.get(root, self._fields[ROOT])
            with self._lock:
                if (key, ROOT) not in self._cache:
                    rider = (key, text)
        stored = 0
        for chunk in _chunks(list(todo.items())):
            if len(chunk) + (rider is not None) < 2:
                continue  # one object alone: its own path is one run as well
            groups: list[tuple[Sequence[str], list[str]]] = [(exprs, [text for _, text in chunk])]
            if rider is not None:
                groups.append((self._batches[ROOT], [rider[1]]))
            res = evaluate_groups(groups, runner=self.runner, max_outputs=self.max_outputs, timeout_s=self.timeout_s)
            if res is None:
                return stored  # the per-object path takes over (and names a slow expression)
            for (key, _), outcome in zip(chunk, res[0], strict=True):
                self._store((key, batch), outcome)
            if rider is not None:
                self._store((rider[0], ROOT), res[1][0])
                rider = None
            stored += len(chunk)
        return stored

    def _store(self, ck: tuple[Any, ...], res: dict[str, Outcome]) -> None:
        with self._lock:
            self._cache[ck] = res
            self._cache.move_to_end(ck)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _err(
        self, message: str, component: Component | str | None = None, expression: str | None = None
    ) -> KartaEvalError:
        comp = component.name if isinstance(component, Component) else component
        return KartaEvalError(message, definition=self.definition.name, component=comp, expression=expression)

    def _run(self, obj: Obj, batch: str, expr: str, component: Component | str | None = None) -> list[Any]:
        _, res = self._outcomes(obj, batch)
        out = res.get(expr)
        if out is None:
            out = self._adhoc(obj, expr)
        if out.error is not None:
            if out.blame is not None and out.blame != expr:
                # a timeout in the fused batch, or the quarantine it led to: the error is about the
                # expression that ran out of time and its component, not about this innocent one
                culprit = self._owner_of(out.blame)
                name = component.name if isinstance(component, Component) else component
                innocent = f"expression '{expr}'" + (f" of component {name}" if name else "")
                if out.quarantined:
                    raise self._err(f"JQ execution error: {out.error} ({innocent} was not evaluated)",
                                    culprit, out.blame)
                raise self._err(
                    f"JQ execution error: timed out, so {innocent} was not evaluated", culprit, out.blame
                )
            raise self._err(f"JQ execution error: {out.error}", component, expr)
        return list(out.values)

    def _owner_of(self, expr: str) -> str | None:
        """The first component (in definition order) whose fields use ``expr``."""
        for c in self.definition.components():
            if expr in _component_exprs(c):
                return c.name
        return None

    def _adhoc(self, obj: Obj, expr: str) -> Outcome:
        """An expression outside the definition's batches: evaluated alone, cached on its own."""
        key, text = OBJECT_TEXTS.get(obj, root_fields(expr))
        ck = (key, "=", expr)
        with self._lock:
            hit = self._cache.get(ck)
        if hit is not None:
            return hit[expr]
        res = evaluate_many(
            [expr], text, runner=self.runner, max_outputs=self.max_outputs, timeout_s=self.timeout_s
        )
        self._store(ck, res)
        return res[expr]

    def evaluate(self, obj: Obj, expression: str) -> list[Any]:
        """All outputs of an arbitrary expression on ``obj`` (bounded, cached per object version)."""
        out = self._adhoc(obj, expression)
        if out.error is not None:
            raise self._err(f"JQ execution error: {out.error}", None, expression)
        return list(out.values)

    def component(self, component: str | Component) -> Component:
        if isinstance(component, Component):
            return component
        c = self.definition.component(component)
        if c is None:
            raise self._err(f"component {component} not found", component)
        return c

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    # ------------------------------------------------------------ root object

    def instance_ids(self, obj: Obj, component: str | Component) -> list[str]:
        """One id per instance; ``[""]`` for a component without ``instanceIdPath``.

        Deviations (documented): numbers/booleans are rendered Go-style (upstream fails to
        decode them into a string); duplicate ids are an error (upstream collapses them).
        """
        c = self.component(component)
        if not c.instance_id_path:
            return [""]
        ids: list[str] = []
        for v in self._run(obj, ROOT, c.instance_id_path, c):
            if isinstance(v, dict | list):
                raise self._err(
                    f"instance id path returned a non-scalar value {gojq_json(v)}", c, c.instance_id_path
                )
            ids.append("" if v is None else go_sprint(v))
        if any(i == "" for i in ids):
            raise self._err(
                f"instance id path contained empty string values {go_sprint(ids)}", c, c.instance_id_path
            )
        if len(set(ids)) != len(ids):
            dups = sorted({i for i in ids if ids.count(i) > 1})
            raise self._err(
                f"instance id path contained duplicate values {go_sprint(dups)}", c, c.instance_id_path
            )
        return ids

    def _zip(self, ids: list[str], values: list[Any], c: Component, expr: str) -> dict[str, Any]:
        if len(ids) != len(values):
            raise self._err(
                f"instance ids count ({len(ids)}) does not match results count ({len(values)})", c, expr
            )
        return dict(zip(ids, values, strict=True))

    def scale(self, obj: Obj, component: str | Component) -> dict[str, Scale]:
        """Instance id → Scale; ``{}`` when the component has no scale definition."""
        c = self.component(component)
        if c.scale is None:
            return {}
        paths = c.scale.paths()
        if not paths:
            return {}
        ids = self.instance_ids(obj, c)
        columns = {name: self._run(obj, ROOT, p, c) for name, p in paths.items()}
        count = max(len(v) for v in columns.values())
        longest = next(p for name, p in paths.items() if len(columns[name]) == count)
        if count != len(ids):
            raise self._err(
                f"instance ids count ({len(ids)}) does not match results count ({count})", c, longest
            )
        out: dict[str, Scale] = {}
        for i, iid in enumerate(ids):
            vals: dict[str, int | None] = {}
            for name, col in columns.items():
                try:
                    vals[name] = decode_int32(col[i] if i < len(col) else None, name, i)
                except ValueError as e:
                    raise self._err(str(e), c, paths[name]) from None
            out[iid] = Scale(vals.get("replicas"), vals.get("minReplicas"), vals.get("maxReplicas"))
        return out

    def pod_templates(self, obj: Obj, component: str | Component) -> dict[str, Obj]:
        """Instance id → ``{"metadata": ..., "spec": ...}`` (a PodTemplateSpec).

        Fragmented definitions are assembled: labels/annotations into metadata; schedulerName,
        priorityClassName, resourceClaims, affinity, containers (``containersPath`` plus
        ``containerPath`` when not already listed by name) and pod-level ``resources`` into the
        spec; ``imagePath`` yields a container ``main`` only when no container is known.
        """
        c = self.component(component)
        sd = c.spec
        if sd is None or not c.has_pod_definition:
            return {}
        ids = self.instance_ids(obj, c)
        if sd.pod_template_spec_path:
            values = self._zip(
                ids, self._run(obj, SPEC, sd.pod_template_spec_path, c), c, sd.pod_template_spec_path
            )
            out: dict[str, Obj] = {}
            for iid, t in values.items():
                if t is not None and not isinstance(t, dict):
                    raise self._err("pod template spec is not an object", c, sd.pod_template_spec_path)
                t = t or {}
                out[iid] = {
                    "metadata": _filter_keys(t.get("metadata"), OBJECT_META_FIELDS),
                    "spec": _filter_keys(t.get("spec"), POD_SPEC_FIELDS),
                }
            return out
        if sd.pod_spec_path:
            specs = self._zip(ids, self._run(obj, SPEC, sd.pod_spec_path, c), c, sd.pod_spec_path)
            metas: dict[str, Any] = {}
            if sd.metadata_path:
                metas = self._zip(ids, self._run(obj, SPEC, sd.metadata_path, c), c, sd.metadata_path)
            return {
                iid: {
                    "metadata": _filter_keys(metas.get(iid), OBJECT_META_FIELDS),
                    "spec": _filter_keys(specs[iid], POD_SPEC_FIELDS),
                }
                for iid in ids
            }
        assert sd.fragmented is not None
        columns = {f: self._run(obj, SPEC, p, c) for f, p in sd.fragmented.items()}
        count = max((len(v) for v in columns.values()), default=0)
        if count != len(ids):
            raise self._err(
                f"instance ids count ({len(ids)}) does not match results count ({count})",
                c,
                next(
                    (sd.fragmented[f] for f in FRAGMENT_FIELDS if f in columns and len(columns[f]) == count),
                    None,
                ),
            )
        return {
            iid: self._assemble(c, {f: col[i] if i < len(col) else None for f, col in columns.items()})
            for i, iid in enumerate(ids)
        }

    def _assemble(self, c: Component, f: dict[str, Any]) -> Obj:
        def typed(name: str, kind: type | tuple[type, ...]) -> Any:
            v = f.get(name)
            if v is None:
                return None
            if not isinstance(v, kind):
                assert c.spec is not None and c.spec.fragmented is not None
                raise self._err(
                    f"fragmented {name} result has the wrong type", c, c.spec.fragmented.get(name)
                )
            return v

        meta: Obj = {}
        spec: Obj = {}
        if (v := typed("labelsPath", dict)) is not None:
            meta["labels"] = v
        if (v := typed("annotationsPath", dict)) is not None:
            meta["annotations"] = v
        if (v := typed("schedulerNamePath", str)) is not None:
            spec["schedulerName"] = v
        if (v := typed("priorityClassNamePath", str)) is not None:
            spec["priorityClassName"] = v
        if (v := typed("resourceClaimsPath", list)) is not None:
            spec["resourceClaims"] = v
        if (v := typed("resourcesPath", dict)) is not None:
            spec["resources"] = v
        affinity: Obj = {}
        if (v := typed("nodeAffinityPath", dict)) is not None:
            affinity["nodeAffinity"] = v
        if (v := typed("podAffinityPath", dict)) is not None:
            affinity["podAffinity"] = v
        if affinity:
            spec["affinity"] = affinity
        containers: list[Any] = list(typed("containersPath", list) or [])
        single = typed("containerPath", dict)
        if single is not None and not any(
            isinstance(x, dict) and x.get("name") == single.get("name") for x in containers
        ):
            containers.append(single)
        image = typed("imagePath", str)
        if image is not None and not containers:
            containers.append({"name": "main", "image": image})
        if containers:
            spec["containers"] = containers
        return {"metadata": meta, "spec": spec}

    def status(self, obj: Obj) -> StatusResult:
        """All matched statuses of the root object in upstream order, or ``["Undefined"]``."""
        sd = self.definition.root.status
        if sd is None:
            return StatusResult([UNDEFINED_STATUS], UNDEFINED_STATUS)
        root = self.definition.root
        phase: str | None = None
        if sd.phase_path:
            outs = self._run(obj, ROOT, sd.phase_path, root)
            if outs:
                first = outs[0]
                if first is not None and not isinstance(first, str):
                    raise self._err(f"phase must be a string, got {gojq_json(first)}", root, sd.phase_path)
                phase = first or ""
        conditions: dict[str, dict[str, str]] = {}
        cd = sd.conditions
        if cd is not None and cd.path:
            for out in self._run(obj, ROOT, cd.path, root):
                if out is None:
                    continue
                if not isinstance(out, list):
                    raise self._err("conditions path must yield arrays of objects", root, cd.path)
                for cond in out:
                    if cond is None:
                        continue
                    if not isinstance(cond, dict):
                        raise self._err("conditions path must yield arrays of objects", root, cd.path)

                    def s(field: str, cond: dict[str, Any] = cond) -> str:
                        v = cond.get(field)
                        return v if isinstance(v, str) else ""

                    conditions[s(cd.type_field)] = {
                        "status": s(cd.status_field),
                        "reason": s(cd.reason_field),
                        "message": s(cd.message_field),
                    }
        matched = [
            status
            for status in STATUS_ORDER
            if any(self._matches(obj, m, phase, conditions) for m in sd.mappings.get(status, ()))
        ]
        if not matched:
            return StatusResult([UNDEFINED_STATUS], UNDEFINED_STATUS)
        return StatusResult(matched, matched[0])

    def _matches(
        self, obj: Obj, m: StatusMatcher, phase: str | None, conditions: dict[str, dict[str, str]]
    ) -> bool:
        if m.by_phase and (phase is None or phase != m.by_phase):
            return False
        for want in m.by_conditions:
            have = conditions.get(want.type)
            if have is None:
                return False
            if want.status and have["status"] != want.status:
                return False
            if want.reason and have["reason"] != want.reason:
                return False
        if m.by_expression is not None:
            expr = m.by_expression.expression
            try:
                outs = self._run(obj, ROOT, expr, self.definition.root)
            except KartaEvalError as e:
                raise self._err(
                    f"failed to match status: failed to evaluate matcher: failed to evaluate ByExpression: {e.detail}",
                    self.definition.root,
                    expr,
                ) from None
            if not outs:  # a null result is compared as "null", like upstream (expectedResult: "null")
                return False
            if gojq_tostring(outs[0]) != m.by_expression.expected_result:
                return False
        return True

    # ------------------------------------------------------------ pods

    def matches_component_type(self, pod: Obj, component: str | Component) -> bool:
        """componentTypeSelector: keyPath (existence, or typed string equality with ``value``)
        AND every ``matchLabels`` entry. No selector → False.

        ``value: ""`` counts as absent (existence check), as Go's omitempty string would.
        """
        c = self.component(component)
        sel = c.type_selector
        if sel is None or (not sel.key_path and not sel.match_labels):
            return False
        if sel.key_path:
            outs = self._run(pod, POD, sel.key_path, c)
            if sel.value:
                if not any(isinstance(o, str) and o == sel.value for o in outs):
                    return False
            elif not any(o is not None for o in outs):
                return False
        if sel.match_labels:
            meta = pod.get("metadata") if isinstance(pod, dict) else None
            labels = meta.get("labels") if isinstance(meta, dict) else None
            if not isinstance(labels, dict):
                labels = {}
            if not all(labels.get(k) == v for k, v in sel.match_labels.items()):
                return False
        return True

    def single_value(self, pod: Obj, expr: str, component: Component | str | None = None) -> str:
        """Exactly one output that is neither null nor "", rendered with Go's %v."""
        outs = self._run(pod, POD, expr, component)
        if len(outs) != 1:
            raise self._err(f"expected single query result, got {len(outs)}", component, expr)
        v = outs[0]
        if v is None or v == "":
            raise self._err("query result is empty", component, expr)
        return go_sprint(v)

    def infer_component(self, pod: Obj) -> Component:
        """The pod's component: the only leaf (no selector check, §3.4/§7.7), else the first leaf
        in definition order whose componentTypeSelector matches."""
        leaves = self.definition.leaves()
        if len(leaves) == 1:
            return leaves[0]
        for leaf in leaves:
            if leaf.pod_selector is not None and self.matches_component_type(pod, leaf):
                return leaf
        raise self._err(f"no component found for pod {_pod_name(pod)}")

    def instance_of_pod(self, obj: Obj, pod: Obj, component: str | Component) -> str | None:
        """The pod's instance of ``component`` (upstream InferPodComponentInstance)."""
        c = self.component(component)
        ids = self.instance_ids(obj, c)
        if not ids or ids[0] == "" or c.pod_selector is None:
            return None
        sel = c.pod_selector
        if not sel.has_instance_selector:
            raise self._err("no instance selector provided but instance ids are not empty", c)
        found = self.single_value(pod, sel.instance_id_path, c) if sel.instance_id_path else ""
        if found not in ids:
            raise self._err(
                f"could not match instance id {go_quote(found)}. existing instance ids {go_sprint(ids)}",
                c,
                sel.instance_id_path,
            )
        return found

    def component_of_pod(self, obj: Obj, pod: Obj) -> tuple[str, str | None]:
        """(component name, instance id or None) for a pod of the workload ``obj``."""
        c = self.infer_component(pod)
        return c.name, self.instance_of_pod(obj, pod, c)

    def replica_key(self, pod: Obj, component: str | Component) -> str | None:
        """The pod's replica key from ``replicaSelector.keyPath``; None without a selector."""
        c = self.component(component)
        if c.pod_selector is None or not c.pod_selector.replica_key_path:
            return None
        return self.single_value(pod, c.pod_selector.replica_key_path, c)

    def group_keys(self, pod: Obj, paths: Iterable[str], component: str | None = None) -> list[str]:
        return [self.single_value(pod, p, component) for p in paths]

    def passes_filters(self, pod: Obj, filters: Iterable[str], component: str | None = None) -> bool:
        """Every filter yields exactly one value and it is ``true`` (a ``false`` fails the filter)."""
        for f in filters:
            outs = self._run(pod, POD, f, component)
            if len(outs) != 1:
                raise self._err(f"expected single query result, got {len(outs)}", component, f)
            if outs[0] is None or outs[0] == "":
                raise self._err("query result is empty", component, f)
            if outs[0] is not True:
                return False
        return True

    # ------------------------------------------------------------ subtree scale

    def subtree_scale(self, obj: Obj, component: str | Component, instance: str | None = None) -> int:
        """minAvailable of a component subtree (karta.md §3.6), upstream semantics.

        Mode A (any component has a scaleDefinition): own = Σ effective scale over instances
        (only ``instance``'s entry for the subtree root when given); with children, Σ children
        replaces a zero own, a zero Σ children keeps own, otherwise own x Σ children.
        Mode B (no scale anywhere): count pod-bearing components, instances included; a
        pod-bearing component counts itself only, others the sum of their children.
        """
        c = self.component(component)
        if instance == "":
            raise self._err("instance id is empty", c)
        if self.definition.has_scale_definition:
            total = self._scale_a(obj, c, instance, frozenset())
        else:
            total = self._scale_b(obj, c, instance, frozenset())
        if total > INT32_MAX:
            # upstream's int32 arithmetic would wrap around silently
            raise self._err(f"subtree scale {total} is beyond the int32 range", c)
        return total

    def _children(self, c: Component, seen: frozenset[str]) -> list[Component]:
        kids = self.definition.children_of(c.name)
        for k in kids:
            if k.name in seen or k.name == c.name:
                raise self._err(f"ownership cycle detected involving component {k.name}", k)
        return kids

    def _scale_a(self, obj: Obj, c: Component, instance: str | None, seen: frozenset[str]) -> int:
        own = 0
        if c.scale is not None:
            scales = self.scale(obj, c)
            if instance is not None:
                if instance not in scales:
                    raise self._err(f"instance id {instance} not found", c)
                own = scales[instance].effective
            else:
                own = sum(s.effective for s in scales.values())
        kids = self._children(c, seen | {c.name})
        if not kids:
            return own
        total = sum(self._scale_a(obj, k, None, seen | {c.name}) for k in kids)
        if total == 0:
            return own
        if own == 0:
            return total
        return own * total

    def _scale_b(self, obj: Obj, c: Component, instance: str | None, seen: frozenset[str]) -> int:
        if c.has_pod_definition:
            if not c.instance_id_path:
                return 1
            ids = self.instance_ids(obj, c)
            if instance is not None:
                if instance not in ids:
                    raise self._err(f"instance id {instance} not found", c)
                return 1
            return len(ids)
        return sum(self._scale_b(obj, k, None, seen | {c.name}) for k in self._children(c, seen | {c.name}))


def _chunks(items: list[tuple[Any, str]]) -> Iterable[list[tuple[Any, str]]]:
    """``(key, text)`` items in runs of at most ``EACH_MAX_INPUTS`` and ``EACH_MAX_BYTES`` of text (an item
    larger than that alone in its run)."""
    chunk: list[tuple[Any, str]] = []
    size = 0
    for item in items:
        if chunk and (len(chunk) >= EACH_MAX_INPUTS or size + len(item[1]) > EACH_MAX_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += len(item[1])
    if chunk:
        yield chunk


def _component_exprs(c: Component) -> set[str]:
    out: set[str] = set()
    if c.instance_id_path:
        out.add(c.instance_id_path)
    if c.scale:
        out.update(c.scale.paths().values())
    if c.spec:
        out.update(p for p in (c.spec.pod_template_spec_path, c.spec.pod_spec_path, c.spec.metadata_path) if p)
        out.update((c.spec.fragmented or {}).values())
    sel = c.pod_selector
    if sel:
        out.update(
            p
            for p in (
                sel.component_type.key_path if sel.component_type else None,
                sel.instance_id_path,
                sel.replica_key_path,
            )
            if p
        )
    st = c.status
    if st:
        out.update(p for p in (st.phase_path, st.conditions.path if st.conditions else None) if p)
        for matchers in st.mappings.values():
            out.update(m.by_expression.expression for m in matchers if m.by_expression)
    return out


def _union_fields(exprs: Iterable[str]) -> frozenset[str] | None:
    """Top-level fields a batch reads (None: the whole object is needed)."""
    out: set[str] = set()
    for e in exprs:
        f = root_fields(e)
        if f is None:
            return None
        out |= f
    return frozenset(out)


def _pod_name(pod: Obj) -> str:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        return "<unnamed>"
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{ns}/{name}" if ns else str(name)
