"""``grouper why KIND/NAME -n NS``: why a workload waits for gang admission, in words.

It reads the workload, its pods and their owners from the cluster through the kubeconfig, plans it the way
``grouper explain`` decides a pod (``Grouper.decide`` over live read-through lookups, merged by the
controller's own ``plan_workload``), finds its PodGroups (KAI ``scheduling.run.ai/v2alpha2`` and upstream
``scheduling.k8s.io``, whichever exist: those the plan names, those its pods name, those it owns) and
derives each gang's state with the controller's rules (``grouper.core.gang_state``): Grouping, Waiting,
Admitted, Degraded or Error; what the gang needs (minMember, each sub-group's minimum), what it has
(present, scheduled), since when, the time to admission, and what the scheduler said, verbatim (KAI's
scheduling conditions, upstream's PodGroup conditions, the pods' ``PodScheduled=False`` messages).
``-o json|yaml`` gives the same facts, each gang in the API's ``GangView`` shape.

The grouping flags (``--scheduler-name``, ``--queue-label-key``, ``--backend``, ...) must match the running
grouper's for the plan to match. Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from grouper.cli.common import add_grouping_flags, fail, with_cluster, workload_target

EXIT_OK = 0  # the workload has a PodGroup: its state is shown
EXIT_ERROR = 1  # cluster error
EXIT_USAGE = 2
EXIT_UNKNOWN_KIND = 3  # neither a Karta definition nor a native plugin covers KIND
EXIT_NOT_FOUND = 4  # the workload does not exist, or its kind is not installed
EXIT_NOT_GROUPED = 5  # no PodGroup yet (state Grouping, or Error when grouping failed): shown all the same


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "why",
        help="say, in words, why a workload's gang waits: its state, what it needs and has, the scheduler's reasons",
        description=__doc__ + (
            f"\nExit codes: {EXIT_OK} shown, {EXIT_ERROR} cluster error, {EXIT_USAGE} usage, {EXIT_UNKNOWN_KIND} no "
            f"Karta definition or plugin covers KIND, {EXIT_NOT_FOUND} workload not found or kind not installed, "
            f"{EXIT_NOT_GROUPED} no PodGroup yet (the report says why, when the plan can tell)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", nargs="+", metavar="KIND/NAME",
                   help="KIND/NAME or KIND NAME (KIND: kind, plural or short name, optionally .group)")
    p.add_argument("-n", "--namespace", help="the workload's namespace (default: the kubeconfig context's, else default)")
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    p.add_argument("--limit", type=int, default=5, metavar="N",
                   help="text: name at most N pods per scheduler message, and at most N pod messages (0 = all; "
                        "default %(default)s)")
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    add_grouping_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        target = workload_target(args.target, args.limit, "--limit")
    except ValueError as e:
        return fail(EXIT_USAGE, str(e))
    assert target is not None  # nargs="+"
    return with_cluster(args, lambda kube: _show(args, report_live(args, kube, *target)))


def _show(args: argparse.Namespace, found: Any) -> int:
    if isinstance(found, int):
        return found
    report, now = found
    if args.output == "text":
        from grouper.cli.gang_report import render_why

        print(render_why(report, now, limit=args.limit))
    else:
        body = report.to_dict(now)
        if args.output == "json":
            print(json.dumps(body, indent=2))
        else:
            import yaml

            sys.stdout.write(yaml.safe_dump(body, sort_keys=False))
    return EXIT_OK if report.written else EXIT_NOT_GROUPED


def _known_kinds(registry: Any) -> set[Any]:
    """The kinds ``why`` accepts: those of the Karta definitions (built-in and cluster) and of the native
    plugins (a kind such as XGBoostJob has no Karta definition and is grouped all the same)."""
    from grouper.model.objects import GVK
    from grouper.plugins.registry import WILDCARD, native_plugins

    known = {GVK(g, v, k) for g, v, k in native_plugins() if v != WILDCARD}
    if registry is not None:
        known |= {ld.definition.gvk for ld in registry.all() if ld.definition.gvk.kind}
    return known


def report_live(args: argparse.Namespace, kube: Any, kind: str, wanted: str) -> Any:
    """(WhyReport, now) for the workload, or an exit code (an error message printed). ApiError when the
    cluster cannot be read."""
    from grouper.api.models import GangView
    from grouper.cli import common
    from grouper.cli.commands.explain import _registry
    from grouper.cli.gang_report import WhyReport, decision_notes, gang_now, gang_view, planned_gang
    from grouper.cli.live_lookups import LiveLookups
    from grouper.cli.live_workload import (
        KindNotResolved,
        describe_inputs,
        list_pod_groups,
        live_workload_group,
        resolve_kind,
    )
    from grouper.core.satisfiable import plan_reasons
    from grouper.core.upstream import scheduling_group
    from grouper.core.workload_plan import plan_workload
    from grouper.describe.ownership import pods_of
    from grouper.kube.transport import ApiError
    from grouper.model import objects as o
    from grouper.model.podgroup import POD_GROUP_ANNOTATION
    from grouper.runtime.composition import build_grouper

    namespace = args.namespace or kube.namespace
    registry = _registry(kube, args)
    try:
        res = resolve_kind(kube, kind, _known_kinds(registry))
    except KindNotResolved as e:
        message = str(e).replace("no Karta definition covers", "no Karta definition or plugin covers")
        return fail(EXIT_NOT_FOUND if e.not_installed else EXIT_UNKNOWN_KIND, message)
    try:
        inputs = describe_inputs(kube, res, namespace, wanted)
    except ApiError as e:
        if not e.forbidden:
            raise
        return fail(EXIT_ERROR, f"not allowed to read {res.kind} {namespace}/{wanted}: {e}")
    if inputs is None:
        return fail(EXIT_NOT_FOUND, f"{res.kind} {namespace}/{wanted} not found")
    workload = inputs.workload
    pods = [workload] if res.kind == "Pod" and not res.group else pods_of(workload, inputs.pods, inputs.objects)

    config = common.grouping_config(args)
    grouper = build_grouper(config, registry)
    lookups = LiveLookups(kube, config)
    plan = plan_workload(pods, lambda pod: grouper.decide(pod, lookups), namespace=namespace)
    now = common.now()

    # a member of a WorkloadGroup that exists: its gang is the group's (its own PodGroups are not written)
    top = next((d.top_owner for _, d in plan.decided if d.top_owner is not None), None)
    owner: dict[str, Any] | None = workload
    if top is not None and top.uid != o.uid(workload):
        try:
            owner = lookups.get(top.api_version, top.kind, namespace, top.name)
        except Exception:  # not readable: its membership cannot be read
            owner = None
    wgroup, group_warnings = live_workload_group(kube, owner, namespace)

    # its PodGroups: those the plan names, those its pods joined, those it owns (a member: its group owns)
    planned = {g.metadata.name: g for g in plan.groups} if wgroup is None else {}
    named = {n for p in pods for n in (o.annotations(p).get(POD_GROUP_ANNOTATION), scheduling_group(p)) if n}
    pod_groups, warnings = list_pod_groups(kube, namespace)
    owner_uid = o.uid(wgroup) if wgroup is not None else o.uid(workload)
    mine = [pg for pg in pod_groups if (wgroup is None and (o.name(pg) in planned or o.name(pg) in named))
            or any(isinstance(r, dict) and r.get("uid") == owner_uid for r in o.owner_references(pg))]
    gangs = []
    for pg in sorted(mine, key=lambda x: (o.name(x), str(x.get("apiVersion")))):
        group = planned.get(o.name(pg))
        queue = (group.metadata.queue or "") if group is not None else ""  # upstream PodGroups carry none
        gangs.append(gang_now(pg, inputs.pods, now=now, queue=queue))
    written = {g.name for g in gangs}
    for name, group in sorted(planned.items()):
        if name not in written:
            places = {p: sg for p, (pg, sg) in plan.placement.items() if pg == name}
            gangs.append(planned_gang(group.metadata.to_object(), [p for p in pods if o.name(p) in places], places,
                                      now=now))

    notes = [*inputs.warnings, *warnings, *group_warnings]
    decided = [d for _, d in plan.decided]
    errors = [d for d in decided if d.outcome == "error"]
    view = None
    if wgroup is not None:
        from grouper.api.workload_group import group_view

        view = group_view(wgroup, [GangView.model_validate(gang_view(g.name, g.state, now)) for g in gangs])
        notes += [f"WorkloadGroup {view.name} {c.type}={c.status} ({c.reason}): {c.message}"
                  for c in view.conditions if c.status != "True"]
        own = sorted({g.metadata.name for g in plan.groups})
        if own:
            notes.append(f"alone it would be in {', '.join(own)}: not written while it is a member of WorkloadGroup "
                         f"{view.name}")
    if not pods:
        notes.append("it has no pods: its controller has not created them yet (or they are gone), and the grouper "
                     "groups pods")
    notes += decision_notes(decided, args.limit)
    for g in plan.groups if wgroup is None else ():
        notes += [*g.notes, *plan_reasons(g)]
    error = errors[0].message if errors and not any(g.api_version for g in gangs) else ""
    if view is not None and view.state == "Invalid":
        error = f"its WorkloadGroup {view.name} is invalid: {view.message}"
    report = WhyReport(
        api_version=res.api_version, kind=res.kind, namespace=namespace, name=wanted, gangs=gangs,
        plugin=plan.plugin if plan.plugin != "none" else None, planned=sorted(planned), pods=len(plan.pods),
        notes=notes, source=f"read now from the cluster at {kube.server}", error=error,
        workload_group=view.model_dump() if view is not None else None,
    )
    return report, now
