"""The default grouper: one PodGroup per top owner, minMember 1 (KAI ``defaultgrouper``).

Every other plugin starts from ``default_metadata`` and changes what its workload kind needs, so the
rules below hold for all of them unless a plugin says otherwise:

- name ``pg-<topOwnerName>-<topOwnerUID>``, owner reference = top owner, namespace = the pod's;
- labels: the top owner's, plus ``user`` from the pod when the owner has none;
- annotations: pod annotation ``user``, ``kai.scheduler/top-owner-metadata`` (YAML name/uid/group/
  version/kind, formatted as Go's yaml.v3 prints it), then the top owner's annotations (they win)
  except ``kubectl.kubernetes.io/last-applied-configuration`` (a copy of the whole workload, env included);
- queue: top-owner label ``<queue-label-key>`` → pod label → label ``project`` (top owner, else
  pod), suffixed ``-<nodepool>`` when the pod has the node-pool label → ``default-queue``;
- priority class, preemptibility, preemption delay, staleness grace period: see below;
- topology from the top owner's ``kai.scheduler/topology*`` annotations;
- minMember: the top owner's ``kai.scheduler/batch-min-member`` (KAI v0.18: the default grouper honours
  it for every kind it handles, e.g. StatefulSet, ReplicaSet, Tekton, unknown kinds; values below 1
  are an error naming the object), else 1. Plugins with their own gang rule overwrite it.

Durations are Go ``time.ParseDuration`` strings; we store the form the API server prints for a
``metav1.Duration`` ("5m" → "5m0s", "90s" → "1m30s", "1h" → "1h0m0s"), so values round-trip.
Preemption delay ignores negative values; staleness grace period accepts them (negative disables
stale eviction). Invalid values are skipped (as KAI does) and the skip is named in ``provenance``.

Deliberate choices (reference §8):

- **Priority class order (§8 item 7).** KAI tries, per owner, "owner label, else pod label, else
  pod spec", so a pod label or ``spec.priorityClassName`` beats a label on a *higher* owner whenever
  the direct owner has none. We try every owner's ``priorityClassName`` label (direct owner first),
  then the pod label, then the pod spec; each must name an existing PriorityClass. Results differ
  from KAI only when an owner above the direct one carries the label. Then the defaults ConfigMap
  entry of each owner's kind (first existing PriorityClass), then the plugin's fallback. The
  fallback is **not** required to exist (as KAI: the scheduler reports a missing class); its
  provenance says so when it does not.
- Empty label values (``kai.scheduler/queue: ""``, ``project: ""``, node-pool ``""``,
  ``priorityClassName: ""``) count as absent, where KAI would produce an empty queue or ``proj-``.
  An empty ``kai.scheduler/preemptibility`` label still means "derive from priority" and stops the
  search, as in KAI.
- Plugins call this with the whole owner chain (KAI's plugins mostly pass only the top owner); this
  only matters when an intermediate owner carries priority/preemptibility labels or delay
  annotations, which then count too.
"""

from __future__ import annotations

import functools
import logging
import re

from grouper.core.config import GroupingConfig
from grouper.core.context import GroupingContext
from grouper.core.nodepool import apply_nodepool_label
from grouper.model.errors import LookupForbidden
from grouper.model.objects import GVK, Obj, describe, dig, name, namespace, uid, with_pod_typemeta
from grouper.model.podgroup import POD_GROUP_ANNOTATION, SUBGROUP_LABEL, OwnerRef, PodGroupMetadata
from grouper.plugins.common import (
    DEFAULT_QUEUE,
    MIN_MEMBER_ANNOTATION,
    PREEMPTIBILITY_LABEL,
    PREEMPTIBILITY_VALUES,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_LABEL,
    PROJECT_LABEL,
    STALENESS_GRACE_PERIOD_ANNOTATION,
    TOP_OWNER_METADATA_ANNOTATION,
    TRAIN_PRIORITY,
    USER_KEY,
    annotations_of,
    labels_of,
    min_member_annotation,
    normalize_go_duration,
    podgroup_name,
    topology_from_annotations,
)
from grouper.plugins.defaults_configmap import (
    DefaultsConfigMapError,
    TypeDefaults,
    default_priority_class_for_kind,
    defaults_for_kind,
    group_kind_key,
    parse_defaults_configmap,
)

log = logging.getLogger(__name__)

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


class _Maps:
    """Each object's labels and annotations as :func:`labels_of` / :func:`annotations_of` give them, read once
    per decision: the rules below read the owners' and the pod's maps eighteen times for a pod with two owners
    (a copy and a check each), so each is read at its first use, in the same order, and the same error comes
    first."""

    __slots__ = ("_annotations", "_labels")

    def __init__(self) -> None:
        # id() keys: every object asked about is held by the decision for as long as this lives
        self._labels: dict[int, dict[str, str]] = {}
        self._annotations: dict[int, dict[str, str]] = {}

    def labels(self, obj: Obj) -> dict[str, str]:
        got = self._labels.get(id(obj))
        if got is None:
            got = self._labels[id(obj)] = labels_of(obj)
        return got

    def annotations(self, obj: Obj) -> dict[str, str]:
        got = self._annotations.get(id(obj))
        if got is None:
            got = self._annotations[id(obj)] = annotations_of(obj)
        return got


def default_metadata(
    ctx: GroupingContext,
    *,
    top_owner: Obj | None = None,
    owners: list[Obj] | None = None,
    priority_fallback: str = TRAIN_PRIORITY,
) -> PodGroupMetadata:
    """The default PodGroup for ``ctx.pod``.

    ``top_owner``/``owners`` default to ``ctx.top_owner``/``ctx.owners``; plugins pass another object
    (a Revision, a PodGang, a Job) as top owner. An empty owner list means "the top owner alone".
    """
    pod = with_pod_typemeta(ctx.pod)
    top = ctx.top_owner if top_owner is None else top_owner
    if top is ctx.pod:  # a bare pod is its own top owner; pods from typed lists lack apiVersion/kind
        top = pod
    chain = list(ctx.owners if owners is None else owners) or [top]
    maps = _Maps()
    top_labels, top_annotations = maps.labels(top), maps.annotations(top)
    if top is pod or (str(top.get("kind")) == "Pod" and uid(top) == uid(pod) and name(top) == name(pod)):
        # The pod is its own top owner (bare, or below a skipped top owner such as an Argo Workflow):
        # leave out the two keys the grouper itself writes on the pod,
        # so the PodGroup is the same before and after the pod is marked (no rewrite after a restart).
        top_labels = {k: v for k, v in top_labels.items() if k != SUBGROUP_LABEL}
        top_annotations = {k: v for k, v in top_annotations.items() if k != POD_GROUP_ANNOTATION}
    pod_labels, pod_annotations = maps.labels(pod), maps.annotations(pod)
    provenance: dict[str, str] = {}

    labels = dict(top_labels)
    if USER_KEY not in labels and USER_KEY in pod_labels:
        labels[USER_KEY] = pod_labels[USER_KEY]

    annotations: dict[str, str] = {}
    if USER_KEY in pod_annotations:
        annotations[USER_KEY] = pod_annotations[USER_KEY]
    annotations[TOP_OWNER_METADATA_ANNOTATION] = top_owner_metadata_yaml(top)
    # kubectl's last-applied-configuration is a copy of the whole workload (env values included): it is
    # noise on a PodGroup and a leak, so unlike KAI we do not copy it.
    annotations.update({k: v for k, v in top_annotations.items() if k != LAST_APPLIED_ANNOTATION})

    queue, provenance["queue"] = resolve_queue(top, pod, ctx.config, maps)
    defaults, defaults_source = load_defaults(ctx)
    priority, provenance["priorityClassName"] = resolve_priority_class(
        ctx, chain, pod, priority_fallback, defaults, defaults_source, maps
    )
    preemptibility, provenance["preemptibility"] = resolve_preemptibility(
        chain, pod, defaults, defaults_source, maps
    )
    delay, provenance["preemptionDelay"] = first_duration(
        chain, pod, PREEMPTION_DELAY_ANNOTATION, maps, allow_negative=False
    )
    staleness, provenance["stalenessGracePeriod"] = first_duration(
        chain, pod, STALENESS_GRACE_PERIOD_ANNOTATION, maps, allow_negative=True
    )
    topology = topology_from_annotations(top_annotations)
    provenance["topology"] = (
        f"annotations kai.scheduler/topology* on {describe(top)}" if not topology.is_empty() else "none"
    )
    min_member = min_member_annotation(top)
    provenance["minMember"] = (
        "default grouper: 1" if min_member is None else f"annotation {MIN_MEMBER_ANNOTATION} on {describe(top)}"
    )
    provenance["name"] = f"pg-<name>-<uid> of {describe(top)}"

    return PodGroupMetadata(
        name=podgroup_name(top),
        namespace=namespace(pod) or namespace(top),
        owner=OwnerRef.of(top),
        labels=labels,
        annotations=annotations,
        queue=queue,
        priority_class_name=priority,
        preemptibility=preemptibility,
        preemption_delay=delay,
        staleness_grace_period=staleness,
        min_member=1 if min_member is None else min_member,
        topology=topology,
        provenance=provenance,
    )


class DefaultGrouper:
    """The default plugin; other kinds reuse it with another priority fallback and name."""

    name = "Default Grouper"
    # the pod labels it reads, and so every plugin (their metadata starts from the default's): the API shows these
    label_keys: frozenset[str] = frozenset({PROJECT_LABEL, PRIORITY_LABEL, PREEMPTIBILITY_LABEL, USER_KEY, SUBGROUP_LABEL})

    def __init__(self, priority_fallback: str = TRAIN_PRIORITY, name: str = "Default Grouper") -> None:
        self.priority_fallback = priority_fallback
        self.name = name

    def metadata(self, ctx: GroupingContext) -> PodGroupMetadata:
        return default_metadata(ctx, priority_fallback=self.priority_fallback)

    def __repr__(self) -> str:
        return f"DefaultGrouper(priority_fallback={self.priority_fallback!r}, name={self.name!r})"


# ---------------------------------------------------------------- queue


def resolve_queue(top: Obj, pod: Obj, config: GroupingConfig, maps: _Maps) -> tuple[str, str]:
    """The queue and where it came from."""
    key = config.queue_label_key
    top_labels, pod_labels = maps.labels(top), maps.labels(pod)
    if top_labels.get(key):
        return top_labels[key], f"label {key} on {describe(top)}"
    if pod_labels.get(key):
        return pod_labels[key], f"label {key} on {describe(pod)}"
    if top_labels.get(PROJECT_LABEL):
        project, source = top_labels[PROJECT_LABEL], f"label {PROJECT_LABEL} on {describe(top)}"
    elif pod_labels.get(PROJECT_LABEL):
        project, source = pod_labels[PROJECT_LABEL], f"label {PROJECT_LABEL} on {describe(pod)}"
    else:
        return DEFAULT_QUEUE, f"fallback: {DEFAULT_QUEUE}"
    nodepool = pod_labels.get(config.nodepool_label_key) if config.nodepool_label_key else None
    if nodepool:
        return f"{project}-{nodepool}", f"{source} + node-pool label {config.nodepool_label_key} on {describe(pod)}"
    return project, source


# ---------------------------------------------------------------- defaults ConfigMap


def load_defaults(ctx: GroupingContext) -> tuple[dict[str, TypeDefaults], str]:
    """The parsed defaults ConfigMap (empty when unset, missing or malformed) and a description.

    KAI re-reads it on every decision (so a changed ConfigMap applies at once); so do we.
    """
    try:
        cm = ctx.lookups.defaults_configmap()
    except LookupForbidden as err:
        log.warning("cannot read the defaults ConfigMap: %s", err)
        return {}, ""
    if cm is None:
        return {}, ""
    try:
        return parse_defaults_configmap(cm), f"{namespace(cm)}/{name(cm)}"
    except DefaultsConfigMapError as err:
        log.warning("ignoring the defaults ConfigMap: %s", err)
        return {}, ""


def priority_class_exists(ctx: GroupingContext, class_name: str) -> bool:
    """Whether PriorityClass ``class_name`` exists; "" and unreadable count as missing (as KAI)."""
    if not class_name:
        return False
    try:
        return ctx.lookups.priority_class_exists(class_name)
    except LookupForbidden:
        return False


def _with_skipped(source: str, skipped: list[str]) -> str:
    return f"{source} (skipped: {'; '.join(skipped)})" if skipped else source


# ---------------------------------------------------------------- priority class


def resolve_priority_class(
    ctx: GroupingContext,
    chain: list[Obj],
    pod: Obj,
    fallback: str,
    defaults: dict[str, TypeDefaults],
    defaults_source: str,
    maps: _Maps,
) -> tuple[str, str]:
    """The priority class name and where it came from (order: module docstring)."""
    candidates: list[tuple[str, str]] = []
    for owner in chain:
        value = maps.labels(owner).get(PRIORITY_LABEL)
        if value:
            candidates.append((value, f"label {PRIORITY_LABEL} on {describe(owner)}"))
    pod_label = maps.labels(pod).get(PRIORITY_LABEL)
    if pod_label:
        candidates.append((pod_label, f"label {PRIORITY_LABEL} on {describe(pod)}"))
    pod_spec = dig(pod, "spec", "priorityClassName")
    if isinstance(pod_spec, str) and pod_spec:
        candidates.append((pod_spec, f"PriorityClass from pod spec.priorityClassName of {describe(pod)}"))

    skipped: list[str] = []
    for value, source in candidates:
        if priority_class_exists(ctx, value):
            return value, _with_skipped(source, skipped)
        skipped.append(f"PriorityClass {value!r} from {source} does not exist")

    for owner in chain:
        gvk = GVK.of(owner)
        value = default_priority_class_for_kind(defaults, gvk)
        if not value:
            continue
        if priority_class_exists(ctx, value):
            entry = defaults_for_kind(defaults, gvk)
            key = entry.key if entry else group_kind_key(gvk.group, gvk.kind)
            return value, _with_skipped(
                f"defaults ConfigMap {defaults_source} entry {key} for {describe(owner)}", skipped
            )
        skipped.append(f"PriorityClass {value!r} from defaults ConfigMap for {describe(owner)} does not exist")

    source = f"fallback: {fallback}"
    if not priority_class_exists(ctx, fallback):
        source += " (no such PriorityClass in the cluster)"
    return fallback, _with_skipped(source, skipped)


# ---------------------------------------------------------------- preemptibility


def resolve_preemptibility(
    chain: list[Obj], pod: Obj, defaults: dict[str, TypeDefaults], defaults_source: str, maps: _Maps
) -> tuple[str, str]:
    """``preemptible`` / ``non-preemptible`` / "" and where it came from."""
    skipped: list[str] = []
    for obj in [*chain, pod]:
        value = maps.labels(obj).get(PREEMPTIBILITY_LABEL)
        if value is None:
            continue
        source = f"label {PREEMPTIBILITY_LABEL} on {describe(obj)}"
        if value == "":
            return "", _with_skipped(f"{source} is empty: derived by the scheduler from the priority", skipped)
        if value in PREEMPTIBILITY_VALUES:
            return value, _with_skipped(source, skipped)
        skipped.append(f"invalid {value!r} from {source}")
    for owner in chain:
        entry = defaults_for_kind(defaults, GVK.of(owner))
        if entry is None or not entry.preemptibility:
            continue
        value = entry.preemptibility.lower()
        source = f"defaults ConfigMap {defaults_source} entry {entry.key} for {describe(owner)}"
        if value in PREEMPTIBILITY_VALUES:
            return value, _with_skipped(source, skipped)
        skipped.append(f"invalid {entry.preemptibility!r} from {source}")
    return "", _with_skipped("none: derived by the scheduler from the priority", skipped)


# ---------------------------------------------------------------- durations


def first_duration(
    chain: list[Obj], pod: Obj, key: str, maps: _Maps, *, allow_negative: bool
) -> tuple[str | None, str]:
    """The first valid duration annotation ``key`` on the owners (direct first), then the pod."""
    skipped: list[str] = []
    for obj in [*chain, pod]:
        raw = maps.annotations(obj).get(key)
        if raw is None:
            continue
        source = f"annotation {key} on {describe(obj)}"
        try:
            return normalize_go_duration(raw, allow_negative=allow_negative), _with_skipped(source, skipped)
        except ValueError as err:
            skipped.append(f"invalid {raw!r} from {source}: {err}")
    return None, _with_skipped("none", skipped)


# ---------------------------------------------------------------- top-owner metadata annotation

_YAML_NON_STRING = re.compile(
    r"""(?x)
    ~|null|Null|NULL|true|True|TRUE|false|False|FALSE
    |y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF
    |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)
    |[-+]?[0-9_]+|[-+]?0b[01_]+|[-+]?0o?[0-7_]+|[-+]?0x[0-9a-fA-F_]+
    |[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?
    """
)
_YAML_PLAIN = re.compile(r"[A-Za-z0-9_./()+][A-Za-z0-9_./()+-]*")


def _yaml_scalar(value: str) -> str:
    """A string scalar the way Go's yaml.v3 prints it: plain when unambiguous, ``"..."`` when it
    would read back as another type (``"1"``, ``""``, ``"true"``), ``'...'`` otherwise."""
    if value == "" or _YAML_NON_STRING.fullmatch(value) or "\n" in value or not value.isprintable():
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if _YAML_PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("'", "''") + "'"


def top_owner_metadata_yaml(top: Obj) -> str:
    """``kai.scheduler/top-owner-metadata``: name, uid, group, version, kind of the top owner."""
    ref = OwnerRef.of(top)
    return _top_owner_yaml(ref.api_version, ref.kind, ref.name, ref.uid)


@functools.lru_cache(maxsize=1024)  # a workload's pods are decided together: the recent workloads' answers
def _top_owner_yaml(api_version: str, kind: str, name: str, uid: str) -> str:
    # every pod of a workload renders the same text (~8% of a native decision before it was kept)
    gvk = GVK.from_api_version(api_version, kind)
    fields = (("name", name), ("uid", uid), ("group", gvk.group), ("version", gvk.version), ("kind", gvk.kind))
    return "".join(f"{key}: {_yaml_scalar(value)}\n" for key, value in fields)


__all__ = [
    "DefaultGrouper",
    "apply_nodepool_label",
    "default_metadata",
    "load_defaults",
    "priority_class_exists",
    "resolve_preemptibility",
    "resolve_priority_class",
    "resolve_queue",
    "top_owner_metadata_yaml",
]
