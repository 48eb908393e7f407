"""Which Karta definition applies to a workload kind (KAI's Karta hub, kai-podgrouper.md §2.4).

Holds the built-in catalog (a directory of YAML/JSON, loaded once) and the cluster's ``Karta``
objects (upserted/removed by the controller), each with its validation report.

Resolution for a GVK (exact group/version/kind; no wildcards):

* a candidate has that root kind, is not being deleted, is not empty, has gang instructions
  (``podGroup`` or a non-empty ``podGroups``) and validates; invalid ones are skipped and listed;
* cluster definitions win: if any usable cluster Karta (valid, not deleting, not empty) exists
  for the GVK, built-ins for it are ignored — even when that Karta has no gang instructions,
  which is how an administrator switches a built-in off;
* more than one candidate → error "found multiple Kartas with gang scheduling instructions for
  <gvk>: a, b" (the caller falls back to the default grouper, as KAI does);
* a cluster Karta with the same name as a built-in replaces it in listings.

Reads are lock-free on an immutable snapshot that writers replace atomically, so the controller
can update the registry while grouping threads resolve.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grouper.karta.errors import KartaLoadError
from grouper.karta.evaluate import Evaluator
from grouper.karta.jqrun import CompileChecker
from grouper.karta.loader import from_object, load_dir
from grouper.karta.model import KartaDefinition
from grouper.karta.sandbox import SandboxPool, shared_pool
from grouper.karta.validate import ValidationReport, lane_key, precompile, validate
from grouper.model.objects import GVK

BUILTIN, CLUSTER = "builtin", "cluster"
PRECOMPILE_LANE = "precompile:builtin"  # the sandbox lane compiling the whole built-in catalog at once


@dataclass(frozen=True)
class LoadedDefinition:
    definition: KartaDefinition
    origin: str
    report: ValidationReport
    quarantine: str | None = None  # set in ``DefinitionRegistry.all()`` when the sandbox quarantined it

    @property
    def source(self) -> str:
        """``builtin`` or ``cluster``."""
        return CLUSTER if self.origin.startswith(f"{CLUSTER}:") else BUILTIN

    @property
    def usable(self) -> bool:
        d = self.definition
        return self.report.ok and not d.deleting and not d.is_empty

    @property
    def has_gang(self) -> bool:
        return self.definition.gang is not None and self.definition.gang.has_instructions


@dataclass(frozen=True)
class Resolution:
    """``definition`` to use (None → default grouper); ``error`` when resolution itself failed;
    ``candidates`` every definition for the GVK that was considered; ``skipped`` why the others
    were not used (name → reason)."""

    definition: KartaDefinition | None
    error: str | None = None
    candidates: list[LoadedDefinition] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Snapshot:
    builtin: dict[str, LoadedDefinition]
    cluster: dict[str, LoadedDefinition]
    cluster_errors: dict[str, KartaLoadError]


def _loaded(defn: KartaDefinition, checker: CompileChecker | None) -> LoadedDefinition:
    return LoadedDefinition(defn, defn.origin, validate(defn, checker))


class DefinitionRegistry:
    def __init__(
        self,
        builtin_dir: str | Path | None = None,
        *,
        builtin: list[KartaDefinition] | None = None,
        isolate_cluster: bool = True,
        isolate_builtin: bool = True,
        timeout_s: float = 10.0,
        pool: SandboxPool | None = None,
    ) -> None:
        """``builtin_dir``: catalog directory (e.g. the repo's ``definitions/``); ``builtin``:
        extra in-memory definitions. ``isolate_cluster`` / ``isolate_builtin``: evaluators run jq
        in the definition's own sandbox lane (``pool``, default the process-wide one) instead of
        this process. Validation always compiles jq in the sandbox."""
        self.isolate_cluster = isolate_cluster
        self.isolate_builtin = isolate_builtin
        self.timeout_s = timeout_s
        self.pool = pool if pool is not None else shared_pool()
        self.load_errors: list[KartaLoadError] = []
        defs: list[KartaDefinition] = list(builtin or [])
        if builtin_dir is not None:
            loaded, errors = load_dir(builtin_dir)
            defs = loaded + defs
            self.load_errors = errors
        builtins: dict[str, LoadedDefinition] = {}
        precompile(defs, self.pool.lane(PRECOMPILE_LANE))
        for d in defs:
            if d.name in builtins:
                self.load_errors.append(
                    KartaLoadError(
                        f"duplicate built-in definition name {d.name} (also in {builtins[d.name].origin})",
                        file=d.origin,
                    )
                )
                continue
            builtins[d.name] = _loaded(d, self.pool.lane(lane_key(d)))
        self._snap = _Snapshot(builtins, {}, {})
        self._kinds: tuple[_Snapshot, frozenset[tuple[str, str]]] | None = None
        self._write = threading.Lock()
        self._evaluators: dict[int, tuple[KartaDefinition, Evaluator]] = {}
        self._eval_lock = threading.Lock()

    # ---------------------------------------------------------------- writes

    def upsert_cluster_object(self, obj: dict[str, Any]) -> LoadedDefinition | None:
        """Add or replace a cluster Karta. Returns it, or None when the object cannot be parsed
        (the error is kept in ``cluster_errors()`` and any previous version is dropped).

        Blocking (parsing and validation, jq compiled in the definition's sandbox lane): from an
        event loop use ``upsert_cluster_object_async``."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        raw_name = meta.get("name") if isinstance(meta, dict) else None
        name = raw_name if isinstance(raw_name, str) else ""
        try:
            defn = from_object(obj, f"{CLUSTER}:Karta/{name}")
        except KartaLoadError as e:
            with self._write:
                s = self._snap
                cluster = dict(s.cluster)
                cluster.pop(name, None)
                self._snap = _Snapshot(s.builtin, cluster, {**s.cluster_errors, name: e})
            return None
        loaded = _loaded(defn, self.pool.lane(lane_key(defn)))
        with self._write:
            s = self._snap
            errors = dict(s.cluster_errors)
            errors.pop(name, None)
            self._snap = _Snapshot(s.builtin, {**s.cluster, defn.name: loaded}, errors)
        return loaded

    async def upsert_cluster_object_async(self, obj: dict[str, Any]) -> LoadedDefinition | None:
        """``upsert_cluster_object`` in a worker thread, so the event loop keeps running while
        a large Karta is parsed and validated (the jq itself is compiled in the sandbox)."""
        return await asyncio.to_thread(self.upsert_cluster_object, obj)

    def remove_cluster_object(self, name: str) -> None:
        with self._write:
            s = self._snap
            cluster = dict(s.cluster)
            cluster.pop(name, None)
            errors = dict(s.cluster_errors)
            errors.pop(name, None)
            self._snap = _Snapshot(s.builtin, cluster, errors)

    # ---------------------------------------------------------------- reads

    def kinds(self) -> frozenset[tuple[str, str]]:
        """The (group, kind) pairs any loaded definition describes, built-in or cluster (memoized per
        snapshot: asked per reconcile)."""
        s = self._snap
        cached = self._kinds
        if cached is not None and cached[0] is s:
            return cached[1]
        kinds = frozenset(
            (ld.definition.gvk.group, ld.definition.gvk.kind) for ld in (*s.builtin.values(), *s.cluster.values())
        )
        self._kinds = (s, kinds)
        return kinds

    def all(self) -> list[LoadedDefinition]:
        """Cluster definitions, then built-ins not shadowed by a cluster one of the same name;
        ``quarantine`` says why the sandbox stopped evaluating one (None when it runs)."""
        s = self._snap
        out = sorted(s.cluster.values(), key=lambda x: x.definition.name)
        out += sorted(
            (b for n, b in s.builtin.items() if n not in s.cluster), key=lambda x: x.definition.name
        )
        return [self._with_quarantine(x) for x in out]

    def _with_quarantine(self, x: LoadedDefinition) -> LoadedDefinition:
        q = self.quarantine(x.definition)
        return x if q == x.quarantine else replace(x, quarantine=q)

    def quarantine(self, defn: KartaDefinition) -> str | None:
        """Why the sandbox quarantined this definition (repeated timeouts), or None. Lifted
        when the definition changes (a new version gets a fresh sandbox lane)."""
        return self.pool.quarantine_of(lane_key(defn))

    def quarantined(self) -> dict[str, str]:
        """Definition name → quarantine reason, for every quarantined definition in effect."""
        out: dict[str, str] = {}
        for x in self.all():
            if x.quarantine is not None:
                out[x.definition.name] = x.quarantine
        return out

    def state_counts(self) -> dict[tuple[str, str], int]:
        """(origin, state) -> how many definitions: origin ``builtin`` or ``cluster``, state ``valid``,
        ``invalid`` or ``quarantined``; cluster Kartas that failed to load count as invalid."""
        counts = {(origin, state): 0 for origin in ("builtin", "cluster") for state in ("valid", "invalid", "quarantined")}
        for ld in self.all():
            counts[(ld.source, "quarantined" if ld.quarantine else "valid" if ld.report.ok else "invalid")] += 1
        counts[("cluster", "invalid")] += len(self._snap.cluster_errors)
        return counts

    def cluster_errors(self) -> dict[str, KartaLoadError]:
        return dict(self._snap.cluster_errors)

    def get(self, name: str) -> LoadedDefinition | None:
        s = self._snap
        x = s.cluster.get(name) or s.builtin.get(name)
        return None if x is None else self._with_quarantine(x)

    def resolve(self, gvk: GVK) -> Resolution:
        s = self._snap
        cluster = [x for x in s.cluster.values() if x.definition.gvk == gvk]
        builtin = [
            x for x in s.builtin.values() if x.definition.gvk == gvk and x.definition.name not in s.cluster
        ]
        skipped: dict[str, str] = {}

        def eligible(items: list[LoadedDefinition]) -> list[LoadedDefinition]:
            ok: list[LoadedDefinition] = []
            for x in sorted(items, key=lambda x: x.definition.name):
                d = x.definition
                if d.deleting:
                    skipped[d.name] = "being deleted"
                elif d.is_empty:
                    skipped[d.name] = "empty definition"
                elif not x.report.ok:
                    skipped[d.name] = "invalid: " + "; ".join(
                        f"{i.field}: {i.message}" for i in x.report.errors
                    )
                elif not x.has_gang:
                    skipped[d.name] = "no gang scheduling instructions"
                else:
                    ok.append(x)
            return ok

        chosen = eligible(cluster)
        claimed = any(x.usable for x in cluster)
        if claimed:
            for b in builtin:
                skipped[b.definition.name] = "overridden by a cluster Karta for the same kind"
        else:
            chosen = eligible(builtin)
        candidates = cluster + builtin
        if len(chosen) > 1:
            names = ", ".join(x.definition.name for x in chosen)
            return Resolution(
                None,
                f"found multiple Kartas with gang scheduling instructions for {gvk}: {names}",
                candidates,
                skipped,
            )
        if not chosen:
            return Resolution(None, None, candidates, skipped)
        return Resolution(chosen[0].definition, None, candidates, skipped)

    def evaluator(self, defn: KartaDefinition) -> Evaluator:
        """A cached evaluator for a definition (sandboxed for cluster definitions when
        ``isolate_cluster``)."""
        with self._eval_lock:
            hit = self._evaluators.get(id(defn))
            if hit is not None and hit[0] is defn:
                return hit[1]
            cluster = defn.origin.startswith(f"{CLUSTER}:")
            isolate = self.isolate_cluster if cluster else self.isolate_builtin
            runner = self.pool.lane(lane_key(defn)) if isolate else None
            ev = Evaluator(defn, runner=runner, timeout_s=self.timeout_s)
            live = {id(x.definition) for x in self.all()}
            self._evaluators = {k: v for k, v in self._evaluators.items() if k in live}
            self._evaluators[id(defn)] = (defn, ev)
            return ev
