"""Karta engine: load, validate and evaluate Karta definitions (pure Python, no cluster access).

A Karta (``run.ai/v1alpha1 Karta``, older ``optimization.nvidia.com/v1alpha1 ResourceInterface``)
describes a workload kind with jq expressions: its components, where pod templates live, replica
counts, status, how to recognise its pods, and gang-scheduling instructions. References:
``karta.md`` (format and upstream semantics) and ``kai-podgrouper.md`` §2.4 (the KAI consumer).

Modules (one job each)::

    model.py     typed, immutable dataclasses of a definition
    loader.py    YAML/JSON/cluster objects -> KartaDefinition (CRD defaults applied)
    jqsyntax.py  jq tokenizer/parser for the read-only & bounded check
    validate.py  upstream validation rules + the holes upstream leaves open
    values.py    Go/gojq-compatible rendering of results (%v, tostring, int32 decoding)
    jqrun.py     compiled-program cache, object serialization cache, fused evaluation, bounds
    sandbox.py   killable worker processes: per-definition lanes, quarantine (+ _jqworker.py)
    gojq.py      what upstream's gojq can call (validation rejects the rest)
    evaluate.py  Evaluator: instances, specs, scale, status, pod matching, subtree scale
    gang.py      gang instructions -> PodGroupMetadata
    registry.py  definitions by GVK (built-in catalog + cluster Kartas)

Public API::

    load_file(path, *, origin=None) -> list[KartaDefinition]        # raises KartaLoadError
    load_dir(path, *, origin_prefix="builtin") -> (defs, [KartaLoadError])
    from_object(obj, origin) -> KartaDefinition                      # raises KartaLoadError
    validate(defn, checker=None) -> ValidationReport(.errors, .warnings, .ok)  # jq compiled in the sandbox
    Evaluator(defn, *, max_outputs=1000, timeout_s=10.0, isolate=False, runner=None)
        .instance_ids(obj, component) -> list[str]
        .pod_templates(obj, component) -> dict[str, dict]
        .scale(obj, component) -> dict[str, Scale]
        .status(obj) -> StatusResult(matched, primary)
        .component_of_pod(obj, pod) -> (component, instance | None)
        .subtree_scale(obj, component, instance=None) -> int
        .replica_key(pod, component) -> str | None
        .matches_component_type / infer_component / instance_of_pod / group_keys /
        .passes_filters / evaluate(obj, expr)
    apply_gang(defn, evaluator, top_owner, pod, base) -> PodGroupMetadata | None
    DefinitionRegistry(builtin_dir, *, isolate_cluster=True, isolate_builtin=True, timeout_s=10, pool=None)
        .upsert_cluster_object(obj) / await .upsert_cluster_object_async(obj)
        .remove_cluster_object(name) / .resolve(gvk) -> Resolution
        .all() -> list[LoadedDefinition] (with .quarantine) / .quarantined() -> {name: reason}
        .evaluator(defn) -> Evaluator
    Errors: KartaLoadError(ValueError); KartaEvalError(grouper.model.errors.KartaError).

Design notes
------------
jq engine. Upstream runs gojq; we run libjq 1.7.1 through the PyPI ``jq`` bindings (C speed,
lazy result iterator). Differences are neutralised where they matter:

* Key order: gojq iterates object keys sorted, libjq in insertion order. Objects are serialized
  with sorted keys before jq sees them, so ``.spec.services[]`` and ``to_entries[] | .key`` come
  out in gojq order (Dynamo: DecodeWorker, Frontend, PrefillWorker). Objects *built inside* an
  expression keep libjq's insertion order (``{b:1,a:2} | keys_unsorted``) — not seen in practice.
* Numbers: gojq sees Go float64s; libjq 1.7 keeps number literals verbatim (``1.0|tostring`` is
  ``"1.0"``). Integral floats are turned into ints before serialization. Ids/keys are rendered with
  Go's ``%v`` (``1``, ``1.5``, ``1e+06``, ``1e+21``, ``true``), byExpression results with gojq's
  ``tostring`` (``1000000``, ``1e+21``), both implemented in ``values.py`` and checked against Go.
* Error texts are libjq's, wrapped in upstream's structure ("JQ execution error: …").

Performance. Compiling costs ~2 ms and handing an 18 KB object to jq ~1-2 ms per run, so:
programs are compiled once (module LRU keyed by text, ``jqrun.PROGRAMS``); each object is
serialized once per (uid, resourceVersion) (``jqrun.OBJECT_TEXTS``); all expressions a definition
evaluates on one kind of object are fused into one jq run with per-expression outputs/errors;
outcomes are cached per object version in the Evaluator (bounded LRU); jq is handed only the
top-level fields a batch can read (``jqsyntax.root_fields``, a conservative static analysis whose
soundness is property-tested): a pod's ``metadata`` instead of the whole pod, a workload's
``spec``/``status`` without its ``metadata``. One pod decision costs one jq run on the pod's
metadata plus one on the workload, shared by all its pods. Objects with the same uid and
resourceVersion are assumed identical (mutate in place → change or drop resourceVersion).

Bounds. Per expression at most ``max_outputs - 1`` outputs (upstream: the 1000th output already
fails "query results exceed the allowed number 1000"); generators are cut by ``limit``/the lazy
iterator. libjq cannot be interrupted in-process and folds constants while *compiling*
(``("x" * 1e9) | length`` allocates a gigabyte at compile time), so no definition's jq is compiled
or run in the caller's process by the registry or by ``validate``: both happen in killable worker
processes (``sandbox.SandboxPool``: ``python -I``, empty environment, RLIMIT_AS cap, response-size
cap, per-query deadline ``timeout_s``, worker killed and replaced on timeout or crash). Each
definition has its own lane (one worker, one query in flight) over a bounded pool, so a hostile
definition queues behind itself; a lane that times out 3 times in a row is quarantined until the
definition changes. ``Evaluator(defn)`` without a runner still runs in-process (tests, benchmarks,
trusted callers). A fused query that times out is re-run expression by expression until the one that
ran out of time is found; the others are blamed on it. Input limits (``loader.check_limits``):
256 KiB, 256 components, 32 ownerRef levels, JSON nesting 64, expressions of 10,000 characters,
YAML aliases adding at most 100,000 values (``model.shape.measure``: a shared node is walked once).

Validation (``validate.py``, ``jqsyntax.py``). Upstream rules and messages (karta.md §2.1, §2.2),
with libjq compile errors for parse failures and our own parser for the read-only check (so
strings, ``==``, ``<=``, object keys are not mistaken for assignment or calls). Beyond upstream:
``env``/``$ENV``/``input(s)``/``input_filename``/``$__loc__``/``halt``/``debug``/``stderr``/module
directives, ``while``/``until``, ``combinations``/``leaf_paths``/``recurse_down``, recursive
``def`` (direct or mutual — jq has no forward references, so any recursion is a self-reference
inside the def's own body), programs a static cost model finds exponential
(``jqsyntax.blowup_reasons``), string repetition by a big literal, and every builtin or format
upstream's gojq lacks (``gojq.py``, from gojq v0.12.19) are rejected; ``limit``, ``getpath``, ``splits``, ``test`` stay allowed
(regex backtracking and string blow-ups are left to the sandbox). Also checked (§7.11): unknown
/empty/duplicate ``podGroup.subGroups[].componentName``, incomplete topology, ``metadataPath``
without ``podSpecPath``, CRD CEL/required rules, suspend values that are not JSON; warnings for
identical sibling ``componentTypeSelector``s and ``podGroup`` shadowing ``podGroups``.

Deviations from upstream (deliberate):

* Duplicate instance ids are an evaluation error (upstream silently collapses them).
* Numeric/boolean instance ids are rendered with ``%v`` (upstream fails to decode them).
* ``matchLabels`` is evaluated (AND with keyPath/value); upstream's querier ignores it.
* ``componentTypeSelector.value`` is compared in Python on the keyPath outputs (typed string
  equality), i.e. as ``(keyPath) == "value"`` — upstream splices without parentheses, which
  changes meaning for keyPaths containing ``,`` or ``//``. ``value: ""`` counts as absent.
* Alpha ``podGroups`` minMember is computed once per group key (``gang.py`` docstring): PyTorchJob
  master and worker pods both get 4 instead of 1 and 3.
* Iterating ``null`` stays a runtime error, as upstream (``.spec.x[]`` on a missing field fails
  the whole extraction); catalog authors must write ``[]?`` or ``(.x // [])[]``.
* Mode A scale keeps upstream's own x children multiplication (LWS: 32 for a 4-pod group);
  Mode B counts a pod-bearing component once (its children are not added), as upstream.
* Subtree scale / minMember beyond int32 is an error (upstream's int32 arithmetic would wrap).
* Status: ``primary`` is the first matched status in upstream order (Resuming > Suspending >
  Suspended > Running > Failed > Completed > Initializing > Degraded); upstream has no primary.
* Registry: a usable cluster Karta for a GVK overrides the built-ins for that GVK (even one
  without gang instructions — the way to switch a built-in off).
"""

from grouper.karta.errors import KartaEvalError, KartaLoadError
from grouper.karta.evaluate import Evaluator, Scale, StatusResult
from grouper.karta.gang import apply_gang
from grouper.karta.loader import from_object, load_dir, load_file
from grouper.karta.model import Component, GangScheduling, KartaDefinition
from grouper.karta.registry import DefinitionRegistry, LoadedDefinition, Resolution
from grouper.karta.sandbox import SandboxedRunner
from grouper.karta.validate import Issue, ValidationReport, validate

__all__ = [
    "Component",
    "DefinitionRegistry",
    "Evaluator",
    "GangScheduling",
    "Issue",
    "KartaDefinition",
    "KartaEvalError",
    "KartaLoadError",
    "LoadedDefinition",
    "Resolution",
    "SandboxedRunner",
    "Scale",
    "StatusResult",
    "ValidationReport",
    "apply_gang",
    "from_object",
    "load_dir",
    "load_file",
    "validate",
]
