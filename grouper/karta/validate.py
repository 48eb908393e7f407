"""Validation of a Karta definition: upstream's rules and messages (karta.md §2.1, §2.2) plus the
holes upstream leaves open (§7.11).

Phases as upstream: (1) unique component names — on failure validation stops; (2) structure,
then ownership cycles only if the structure is sound; (3) gang instructions; (4) jq. Every issue
names the definition, a JSON-ish field path and, for jq, the expression.

Added (errors): ``podGroup`` name/sub-group component names/duplicates, incomplete topology,
``metadataPath`` without ``podSpecPath``, the CRD's CEL and required-field rules (they do not
apply to definitions loaded from files), invalid JSON in suspend action values, and the stricter
jq policy of ``jqsyntax``. Added (warnings): identical ``componentTypeSelector`` on sibling leaves
(the first in definition order would win), ``podGroup`` shadowing ``podGroups``, a status
definition on a non-root component. Duplicate instance ids are caught at evaluation time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from grouper.karta import jqsyntax
from grouper.karta.jqrun import CompileChecker, JqError, compile_errors
from grouper.karta.jqsyntax import MAX_EXPRESSION_LENGTH
from grouper.karta.model import STATUS_KEYS, Component, KartaDefinition, TopologySpec
from grouper.karta.values import go_quote
from grouper.model.errors import shown
from grouper.model.podgroup import MAX_GANG_PODS

GROUPLESS_ROOT_KINDS = frozenset({"Pod"})
GANG_PATH = "spec.optimizationInstructions.gangScheduling"
DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS_LABEL_MAX = 63
# what may follow "pg-<uid>-" in a DNS-1123 subdomain (dots allowed, each part alphanumeric at both ends)
PG_NAME_RE = re.compile(r"[-a-z0-9]*[a-z0-9](\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


@dataclass(frozen=True)
class Issue:
    definition: str
    field: str
    message: str
    expression: str | None = None

    def __str__(self) -> str:
        text = f"Karta {self.definition}: {self.field}: {self.message}"
        if self.expression is not None:
            text += f" (expression '{self.expression}')"
        return text


@dataclass
class ValidationReport:
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        """All errors, one per line ("" when valid)."""
        return "\n".join(str(i) for i in self.errors)


def jq_fields(defn: KartaDefinition) -> Iterator[tuple[str, str]]:
    """(field path, expression) of every jq expression upstream validates (``jq:"validate"``)."""
    for c in defn.components():
        p = c.path
        if c.instance_id_path:
            yield f"{p}.instanceIdPath", c.instance_id_path
        if c.spec:
            sp = f"{p}.specDefinition"
            for name, value in (
                ("podTemplateSpecPath", c.spec.pod_template_spec_path),
                ("podSpecPath", c.spec.pod_spec_path),
                ("metadataPath", c.spec.metadata_path),
            ):
                if value:
                    yield f"{sp}.{name}", value
            for name, value in (c.spec.fragmented or {}).items():
                yield f"{sp}.fragmentedPodSpecDefinition.{name}", value
        if c.scale:
            for name, value in c.scale.paths().items():
                yield f"{p}.scaleDefinition.{name}Path", value
        sel = c.pod_selector
        if sel:
            if sel.component_type and sel.component_type.key_path:
                yield f"{p}.podSelector.componentTypeSelector.keyPath", sel.component_type.key_path
            if sel.instance_id_path:
                yield f"{p}.podSelector.componentInstanceSelector.idPath", sel.instance_id_path
            if sel.replica_key_path:
                yield f"{p}.podSelector.replicaSelector.keyPath", sel.replica_key_path
        if c.status:
            stp = f"{p}.statusDefinition"
            if c.status.phase_path:
                yield f"{stp}.phaseDefinition.path", c.status.phase_path
            if c.status.conditions and c.status.conditions.path:
                yield f"{stp}.conditionsDefinition.path", c.status.conditions.path
            for status, matchers in c.status.mappings.items():
                for i, m in enumerate(matchers):
                    if m.by_expression and m.by_expression.expression:
                        yield (
                            f"{stp}.statusMappings.{STATUS_KEYS[status]}[{i}].byExpression.expression",
                            m.by_expression.expression,
                        )
        if c.suspend:
            for key, actions in (
                ("suspendActions", c.suspend.suspend_actions),
                ("resumeActions", c.suspend.resume_actions),
            ):
                for i, a in enumerate(actions):
                    if a.path:
                        yield f"{p}.suspendDefinition.{key}[{i}].path", a.path
    if defn.gang:
        for gi, g in enumerate(defn.gang.pod_groups):
            for mi, member in enumerate(g.members):
                mp = f"{GANG_PATH}.podGroups[{gi}].members[{mi}]"
                for ki, k in enumerate(member.group_by_key_paths):
                    if k:
                        yield f"{mp}.groupByKeyPaths[{ki}]", k
                for fi, f in enumerate(member.filters):
                    if f:
                        yield f"{mp}.filters[{fi}]", f


def check_expression(expr: str, checker: CompileChecker | None = None) -> list[str]:
    """Problems with one jq expression: libjq's compile error (compiled by ``checker``, by
    default in this definition-less sandbox lane), else the read-only/bounded policy."""
    return check_expressions([expr], checker)[expr]


def check_expressions(exprs: list[str], checker: CompileChecker | None = None) -> dict[str, list[str]]:
    """``check_expression`` for many expressions with one compile round trip."""
    distinct = list(dict.fromkeys(exprs))
    compiled = _compile_all(distinct, checker)
    out: dict[str, list[str]] = {}
    for e in distinct:
        err = compiled[e]
        if err is not None and err.startswith(_SANDBOX_FAILED):
            # libjq blew its limits while compiling: say so, with what the policy sees in it
            out[e] = [f"JQ expression failed validation: {err}", *(r for r in _policy(e) if r not in err)]
        elif err is not None:
            out[e] = [f"failed to parse JQ expression: {err}"]
        else:
            out[e] = list(_policy(e))
    return out


_SANDBOX_FAILED = "compiling it in the sandbox failed"


def _compile_all(exprs: list[str], checker: CompileChecker | None) -> dict[str, str | None]:
    """Compile errors, in the sandbox. A batch that times out or kills its worker is retried one
    expression at a time so the error lands on the expression that caused it."""
    if checker is None:
        from grouper.karta.sandbox import shared_pool

        checker = shared_pool().lane("validate")
    # the length limit first: never hand libjq (or our parser) a megabyte of program text
    long = {
        e: f"{_SANDBOX_FAILED}: not attempted, the expression is longer than {MAX_EXPRESSION_LENGTH} characters"
        for e in exprs
        if len(e) > MAX_EXPRESSION_LENGTH
    }
    rest = [e for e in exprs if e not in long]
    try:
        return {**long, **compile_errors(rest, checker)}
    except JqError:
        pass
    out: dict[str, str | None] = dict(long)
    for e in rest:
        try:
            out[e] = compile_errors([e], checker)[e]
        except JqError as err:
            out[e] = f"{_SANDBOX_FAILED}: {err}"
    return out


_POLICY: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()
_POLICY_LOCK = threading.Lock()


def _policy(expr: str) -> tuple[str, ...]:
    """The read-only/bounded/gojq policy for one expression. Cached (cluster Kartas are
    re-validated on every update, mostly with the same expressions) by a digest of the text,
    so the cache stays small however long the expressions are."""
    key = hashlib.blake2b(expr.encode(), digest_size=16).digest()
    with _POLICY_LOCK:
        hit = _POLICY.get(key)
        if hit is not None:
            _POLICY.move_to_end(key)
            return hit
    reasons = _policy_uncached(expr)
    with _POLICY_LOCK:
        _POLICY[key] = reasons
        while len(_POLICY) > 8192:
            _POLICY.popitem(last=False)
    return reasons


def _policy_uncached(expr: str) -> tuple[str, ...]:
    try:
        reasons = jqsyntax.check(expr)
    except jqsyntax.JqSyntaxError as e:
        return (f"JQ expression failed validation: cannot analyse it ({e})",)
    return tuple(f"JQ expression failed validation: {r}" for r in reasons)


def _int_literal(expr: str) -> int | None:
    """The integer an expression always yields when it is a number literal (``"1000000"``, ``1e6``), else None."""
    try:
        value = json.loads(expr)
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value == value and abs(value) != float("inf") and float(value).is_integer() else None


class _Validator:
    def __init__(self, defn: KartaDefinition, checker: CompileChecker | None) -> None:
        self.d = defn
        self.checker = checker
        self.report = ValidationReport()

    def error(self, field: str, message: str, expression: str | None = None) -> None:
        self.report.errors.append(Issue(self.d.name, field, message, expression))

    def warn(self, field: str, message: str, expression: str | None = None) -> None:
        self.report.warnings.append(Issue(self.d.name, field, message, expression))

    def run(self) -> ValidationReport:
        d = self.d
        seen: set[str] = set()
        for c in d.components():
            if c.name and c.name in seen:
                self.error(f"{c.path}.name", f"component name {c.name} is not unique")
            seen.add(c.name)
        if self.report.errors:
            return self.report
        self.structure()
        if not self.report.errors:
            self.cycles()
        self.instructions()
        self.jq()
        return self.report

    # -- phase 2
    def structure(self) -> None:
        d = self.d
        root = d.root
        k = root.kind
        if k is None or not k.version or not k.kind or (not k.group and k.kind not in GROUPLESS_ROOT_KINDS):
            self.error(f"{root.path}.kind", "root component must have full kind (group, version, kind)")
        if root.owner_ref is not None:
            self.error(f"{root.path}.ownerRef", "root component cannot have owner ref")
        if root.status is None:
            self.error(f"{root.path}.statusDefinition", "root component must have status definition")
        names = {c.name for c in d.components()}
        for c in d.children:
            if not c.owner_ref:
                self.error(f"{c.path}.ownerRef", f"child component '{c.name}' has no owner ref")
            elif c.owner_ref not in names:
                self.error(
                    f"{c.path}.ownerRef",
                    f"child component '{c.name}' has owner ref to non-existing component '{c.owner_ref}'",
                )
            if c.status is not None:
                self.warn(
                    f"{c.path}.statusDefinition", "status definition is only evaluated on the root component"
                )
        for c in d.components():
            self.component(c)
        self.sibling_selectors()

    def component(self, c: Component) -> None:
        if not c.name:
            self.error(f"{c.path}.name", "component name is empty")
        label = c.name
        if c.spec and c.spec.pod_definition_count() > 1:
            self.error(f"{c.path}.specDefinition", f"component '{label}' has multiple pod spec definitions")
        if c.spec and c.spec.metadata_path and not c.spec.pod_spec_path:
            self.error(
                f"{c.path}.specDefinition.metadataPath",
                f"component '{label}' has metadataPath without podSpecPath (it is only used together with podSpecPath)",
            )
        sel = c.pod_selector
        has_instance_sel = bool(sel and sel.has_instance_selector)
        if c.instance_id_path and not has_instance_sel:
            self.error(
                f"{c.path}.instanceIdPath",
                f"component '{label}' has instance id path but no pod component instance selector",
            )
        if has_instance_sel and not c.instance_id_path:
            self.error(
                f"{c.path}.podSelector.componentInstanceSelector",
                f"component '{label}' has pod component instance selector but no instance id path",
            )
        if sel:
            sp = f"{c.path}.podSelector"
            if sel.has_instance_selector and not sel.instance_id_path:
                self.error(f"{sp}.componentInstanceSelector.idPath", "idPath is required")
            if sel.has_replica_selector and not sel.replica_key_path:
                self.error(f"{sp}.replicaSelector.keyPath", "keyPath is required")
            cts = sel.component_type
            if cts is not None:
                if not cts.key_path and not cts.match_labels:
                    self.error(
                        f"{sp}.componentTypeSelector", "at least one of keyPath or matchLabels must be set"
                    )
                if cts.value and not cts.key_path:
                    self.error(f"{sp}.componentTypeSelector.value", "value requires keyPath")
        if c.scale:
            for name, expr in c.scale.paths().items():
                literal = _int_literal(expr)
                if name != "maxReplicas" and literal is not None and literal > MAX_GANG_PODS:
                    self.warn(
                        f"{c.path}.scaleDefinition.{name}Path",
                        f"{name} is always {shown(literal)}, above {MAX_GANG_PODS:,} pods (Kubernetes' envelope is "
                        "150,000 pods per cluster): a gang that waits for them can never be scheduled",
                        expr,
                    )
        if c.status and c.status.conditions is not None and not c.status.conditions.path:
            self.error(f"{c.path}.statusDefinition.conditionsDefinition.path", "path is required")
        if c.suspend:
            for key, actions in (
                ("suspendActions", c.suspend.suspend_actions),
                ("resumeActions", c.suspend.resume_actions),
            ):
                if not actions:
                    self.error(f"{c.path}.suspendDefinition.{key}", "must have at least 1 item")
                for i, a in enumerate(actions):
                    try:
                        json.loads(a.value)
                    except ValueError as e:
                        self.error(
                            f"{c.path}.suspendDefinition.{key}[{i}].value", f"failed to decode value: {e}"
                        )

    def sibling_selectors(self) -> None:
        by_parent: dict[str, list[Component]] = {}
        for c in self.d.children:
            if c.has_pod_definition and c.type_selector is not None and c.owner_ref:
                by_parent.setdefault(c.owner_ref, []).append(c)
        for siblings in by_parent.values():
            for i, a in enumerate(siblings):
                for b in siblings[i + 1 :]:
                    assert a.type_selector is not None and b.type_selector is not None
                    if a.type_selector.signature() == b.type_selector.signature():
                        self.warn(
                            f"{b.path}.podSelector.componentTypeSelector",
                            f"components '{a.name}' and '{b.name}' have identical componentTypeSelectors; "
                            f"pods always resolve to '{a.name}' (first in definition order)",
                        )

    def cycles(self) -> None:
        reported: set[frozenset[str]] = set()
        for c in self.d.children:
            chain: list[str] = []
            cur: Component | None = c
            while cur is not None and cur.owner_ref:
                if cur.name in chain:
                    cycle = frozenset(chain[chain.index(cur.name) :])
                    if cycle not in reported:
                        reported.add(cycle)
                        self.error(
                            f"{c.path}.ownerRef", f"ownership cycle detected involving component {cur.name}"
                        )
                    break
                chain.append(cur.name)
                cur = self.d.component(cur.owner_ref)

    # -- phase 3
    def instructions(self) -> None:
        g = self.d.gang
        if g is None:
            return
        names = {c.name for c in self.d.components()}
        pg = g.pod_group
        if pg is not None:
            pp = f"{GANG_PATH}.podGroup"
            if not pg.name:
                self.error(f"{pp}.name", "podGroup name is empty")
            elif not PG_NAME_RE.match(pg.name):
                # the PodGroup is named pg-<uid>-<name> (shortened with a hash when over 253 characters,
                # so only the characters matter): every workload's PodGroup would be refused
                self.error(
                    f"{pp}.name",
                    f"podGroup name {shown(go_quote(pg.name))} makes PodGroup names pg-<uid>-{shown(pg.name)} that "
                    "are not lowercase RFC 1123 subdomains: use lowercase alphanumerics, '-' and '.', ending with an "
                    "alphanumeric",
                )
            if pg.topology is not None:
                self.topology(f"{pp}.topology", pg.topology)
            seen: set[str] = set()
            for i, sg in enumerate(pg.sub_groups):
                sp = f"{pp}.subGroups[{i}]"
                if not sg.component_name:
                    self.error(f"{sp}.componentName", "subgroup component name cannot be empty")
                elif sg.component_name not in names:
                    self.error(
                        f"{sp}.componentName",
                        f"sub-group component '{sg.component_name}' is not defined (should be a root or child component)",
                    )
                elif sg.component_name in seen:
                    self.error(
                        f"{sp}.componentName", f"sub-group component '{sg.component_name}' is listed twice"
                    )
                elif len(sg.component_name) > DNS_LABEL_MAX or not DNS_LABEL_RE.match(sg.component_name):
                    # the component's name becomes the sub-group's name, the kai.scheduler/subgroup-name label
                    self.error(
                        f"{sp}.componentName",
                        f"component name {shown(go_quote(sg.component_name))} becomes a sub-group name (the "
                        "kai.scheduler/subgroup-name label value) and must be an RFC 1123 DNS label: at most "
                        f"{DNS_LABEL_MAX} lowercase alphanumerics or '-', starting and ending with an alphanumeric",
                    )
                seen.add(sg.component_name)
                if sg.topology is not None:
                    self.topology(f"{sp}.topology", sg.topology)
            if g.pod_groups:
                self.warn(
                    f"{GANG_PATH}.podGroups",
                    "ignored: gangScheduling.podGroup takes precedence over podGroups",
                )
        group_names: set[str] = set()
        for gi, grp in enumerate(g.pod_groups):
            gp = f"{GANG_PATH}.podGroups[{gi}]"
            if not grp.name:
                self.error(f"{gp}.name", "pod-group name is empty")
            elif grp.name in group_names:
                self.error(f"{gp}.name", f"pod-group name {grp.name} is not unique")
            group_names.add(grp.name)
            members: set[str] = set()
            for mi, m in enumerate(grp.members):
                mp = f"{gp}.members[{mi}].componentName"
                if m.component_name not in names or not m.component_name:
                    self.error(
                        mp,
                        f"pod-group member component '{m.component_name}' is not defined (should be a root or child component)",
                    )
                elif m.component_name in members:
                    self.error(mp, f"pod-group member component '{m.component_name}' is listed twice")
                members.add(m.component_name)

    def topology(self, path: str, t: TopologySpec) -> None:
        if not t.topology_name:
            self.error(f"{path}.topologyName", "topology constraint must include topology name")
        if not t.preferred_level and not t.required_level:
            self.error(path, "topology constraint must include preferred or required topology level")

    # -- phase 4
    def jq(self) -> None:
        fields = list(jq_fields(self.d))
        problems = check_expressions([e for _, e in fields], self.checker)
        for path, expr in fields:
            for message in problems[expr]:
                self.error(path, message, expr)


def precompile(defns: Iterable[KartaDefinition], checker: CompileChecker) -> None:
    """Compile the jq of a whole catalog in one sandbox round trip, so the compile results cache answers each
    definition's own validation: one request (and one worker start) instead of one per definition, each in
    its own lane and often starting a worker (``grouper run`` validates its 24 built-ins at every start).
    Best effort and without effect on any report: a batch the sandbox cannot finish caches nothing, and each
    definition's validation then compiles its expressions in its own lane as without it."""
    exprs: list[str] = []
    for d in defns:
        with contextlib.suppress(Exception):  # a definition jq_fields cannot walk is validate's to report
            exprs.extend(e for _, e in jq_fields(d) if len(e) <= MAX_EXPRESSION_LENGTH)
    if exprs:
        with contextlib.suppress(JqError):
            compile_errors(exprs, checker)


def validate(defn: KartaDefinition | None, checker: CompileChecker | None = None) -> ValidationReport:
    """All problems of a definition (errors make it unusable; warnings are advice).

    jq is compiled by ``checker`` (the registry passes the definition's own sandbox lane);
    by default in a shared sandbox lane — never in this process.
    """
    if defn is None:
        report = ValidationReport()
        report.errors.append(Issue("<nil>", "", "karta is nil"))
        return report
    if checker is None:
        from grouper.karta.sandbox import shared_pool

        checker = shared_pool().lane(lane_key(defn))
    return _Validator(defn, checker).run()


_LANE_KEYS: weakref.WeakKeyDictionary[KartaDefinition, str] = weakref.WeakKeyDictionary()
_LANE_KEYS_LOCK = threading.Lock()


def lane_key(defn: KartaDefinition) -> str:
    """Sandbox lane of a definition: its name and a digest of its content, so any change to
    the definition gets a fresh lane (and lifts a quarantine). Remembered while the definition
    lives (weakly: a cache must not keep deleted Kartas in memory)."""
    with _LANE_KEYS_LOCK:
        key = _LANE_KEYS.get(defn)
    if key is not None:
        return key
    try:
        text = repr(defn)
    except RecursionError:  # cannot happen within the loader's nesting limit; stay safe
        text = str(id(defn))
    key = f"{defn.origin}|{defn.name}|{hashlib.blake2b(text.encode(), digest_size=12).hexdigest()}"
    with _LANE_KEYS_LOCK:
        _LANE_KEYS[defn] = key
    return key
