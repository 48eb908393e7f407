"""Property tests of the workload-group render: generated members (flat and nested trees, several PodGroups
per member, random policies) rendered in every order.

Properties: the render is deterministic and independent of the order of the members (and of duplicates);
a complete group is rendered with root ``minSubGroup`` = members, every member pod in exactly one leaf
sub-group and placed there, and the PodGroup passes ``validate_pod_group``; an incomplete group renders
nothing and gates every member pod on the unwritten PodGroup's name. The upstream backend's objects (what
the controller writes with ``--backend=upstream``: a CompositePodGroup and a child PodGroup per member, or
the flattened gang) are deterministic and independent of the member order too, and every member pod is
placed in the PodGroup the admission webhook names for its workload (``member_pod_group``), which knows
only the group and the workload. The same through ``grouper plan``:
the order of the objects in the input files (members, pods and the WorkloadGroup object itself) does
not change the plan.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wg_builders import NS, VALUES, flat, group, member, tree

from grouper.core.config import GroupingConfig
from grouper.core.plan import plan
from grouper.core.upstream import UpstreamVersions
from grouper.core.validation import validate_pod_group
from grouper.core.workload_group import GroupRender, Member, render_kai, rendered_name
from grouper.core.workload_group_upstream import COMPOSITE_VERSION, member_pod_group, render_upstream
from grouper.karta import DefinitionRegistry
from grouper.runtime.composition import build_grouper

REPO = Path(__file__).resolve().parents[2]
KINDS = ["RayJob", "RayCluster", "Deployment", "PyTorchJob", "LeaderWorkerSet", "JobSet"]
DURATIONS = [None, "30s", "1m0s", "5m0s", "1h0m0s"]
GRACES = [None, "-1s", "30s", "10m0s"]


@st.composite
def planned(draw: st.DrawFn, prefix: str) -> Any:
    """One PodGroup of a member: flat, two-level or three-level, pods named after ``prefix``."""
    policy = {
        "priority_class_name": draw(st.sampled_from(sorted(VALUES))),
        "preemptibility": draw(st.sampled_from(["", "preemptible", "semi-preemptible", "non-preemptible"])),
        "preemption_delay": draw(st.sampled_from(DURATIONS)),
        "staleness_grace_period": draw(st.sampled_from(GRACES)),
    }
    shape = draw(st.sampled_from(["flat", "tree", "nested"]))
    if shape == "flat":
        n = draw(st.integers(1, 3))
        return flat(f"pg-{prefix}", [f"{prefix}-p{i}" for i in range(n)], **policy)
    leaves = {f"leaf{j}": [f"{prefix}-l{j}-p{i}" for i in range(draw(st.integers(1, 2)))]
              for j in range(draw(st.integers(1, 3)))}
    parents = {name: f"mid{j % 2}" for j, name in enumerate(leaves)} if shape == "nested" else None
    return tree(f"pg-{prefix}", leaves, parents=parents, **policy)


@st.composite
def members(draw: st.DrawFn) -> list[Member]:
    count = draw(st.integers(1, 4))
    out: list[Member] = []
    used: set[tuple[str, str]] = set()
    for i in range(count):
        kind = draw(st.sampled_from(KINDS))
        name = draw(st.sampled_from(["a", "b", "trainer", "x" * 40]))
        if (kind, name) in used:
            name = f"{name}{i}"
        used.add((kind, name))
        groups = [draw(planned(f"m{i}g{j}")) for j in range(draw(st.integers(1, 2)))]
        out.append(member(kind, name, *groups))
    return out


def snapshot(r: GroupRender) -> Any:
    return (
        r.state, r.pod_group.to_object() if r.pod_group else None, r.placement, r.errors, r.pending, r.notes,
        [m.to_dict() for m in r.members], r.status(),
    )


@given(members(), st.randoms(use_true_random=False), st.booleans())
@settings(max_examples=200, deadline=None)
def test_render_is_deterministic_and_independent_of_member_order(
    ms: list[Member], rnd: Any, duplicate: bool
) -> None:
    spec = group(len(ms), preemptibility="preemptible")  # explicit: mixed random policies stay renderable
    first = render_kai(NS, "rl", spec, ms, VALUES)
    shuffled = list(ms) + ([ms[0]] if duplicate else [])
    rnd.shuffle(shuffled)
    assert snapshot(render_kai(NS, "rl", spec, shuffled, VALUES)) == snapshot(first)
    assert snapshot(render_kai(NS, "rl", spec, ms, VALUES)) == snapshot(first)


@given(members())
@settings(max_examples=200, deadline=None)
def test_a_complete_group_places_every_member_pod_exactly_once_and_validates(ms: list[Member]) -> None:
    r = render_kai(NS, "rl", group(len(ms), priority_class_name="train", preemptibility="preemptible"), ms, VALUES)
    assert r.state == "Rendered", r.errors + r.pending
    md = r.pod_group
    assert md is not None
    assert md.min_sub_group == len(ms) and md.min_member is None
    assert validate_pod_group(md) == []
    pods = [p for m in ms for g in m.groups for p in g.pods]
    in_sub_groups = Counter(p for sg in md.sub_groups for p in sg.pods)
    assert in_sub_groups == Counter(pods), "every member pod in exactly one sub-group"
    parents = {sg.parent for sg in md.sub_groups}
    assert all(sg.name not in parents for sg in md.sub_groups if sg.pods), "pods only in leaves"
    assert r.placement == {p: (md.name, sg.name) for sg in md.sub_groups for p in sg.pods}
    assert len([sg for sg in md.sub_groups if sg.parent is None]) == len(ms)


@given(members(), st.integers(1, 3))
@settings(max_examples=100, deadline=None)
def test_an_incomplete_group_renders_nothing_and_gates_every_member_pod(ms: list[Member], missing: int) -> None:
    r = render_kai(NS, "rl", group(len(ms) + missing, preemptibility="preemptible"), ms, VALUES)
    assert r.state == "Pending" and r.pod_group is None
    pods = {p for m in ms for g in m.groups for p in g.pods}
    assert r.placement == {p: (rendered_name(NS, "rl"), None) for p in pods}


UPSTREAM = UpstreamVersions("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1beta1", COMPOSITE_VERSION)


@given(members(), st.randoms(use_true_random=False), st.booleans(), st.booleans())
@settings(max_examples=150, deadline=None)
def test_upstream_objects_are_deterministic_order_independent_and_agree_with_the_webhook(
    ms: list[Member], rnd: Any, composite: bool, duplicate: bool
) -> None:
    spec = group(len(ms), preemptibility="preemptible")
    version = COMPOSITE_VERSION if composite else None
    first = render_upstream(render_kai(NS, "rl", spec, ms, VALUES), UPSTREAM, version)
    shuffled = list(ms) + ([ms[0]] if duplicate else [])
    rnd.shuffle(shuffled)
    again = render_upstream(render_kai(NS, "rl", spec, shuffled, VALUES), UPSTREAM, version)
    assert (again.objects(), again.placement, again.notes) == (first.objects(), first.placement, first.notes)
    # the webhook names a new pod's PodGroup from the group and its workload alone: the same as the render
    for m in ms:
        want = member_pod_group(NS, "rl", m.ref, composite=composite and len(ms) <= 8)
        assert {first.placement[p] for g in m.groups for p in g.pods} == {want}
    assert {o["metadata"]["name"] for o in first.pod_groups} == set(first.placement.values())
    if first.composite is not None:
        assert first.composite["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": len(ms)}}
        assert all(pg["spec"]["parentCompositePodGroupName"] == first.composite["metadata"]["name"]
                   for pg in first.pod_groups)


# ---------------------------------------------------------------- through `grouper plan`

EXAMPLES = REPO / "examples" / "workload-groups"
GROUPER = build_grouper(GroupingConfig(), DefinitionRegistry(REPO / "definitions"))


def _objects(name: str) -> list[dict[str, Any]]:
    from grouper.cli.commands.plan import _defaulted

    return [_defaulted(d, "default") for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


OBJECTS = {name: _objects(name) for name in ("rl-post-training.yaml", "finetune-and-serve.yaml")}
BASELINE = {name: json.dumps(plan(objs, GROUPER).to_json(), sort_keys=True) for name, objs in OBJECTS.items()}


@given(st.sampled_from(sorted(OBJECTS)), st.randoms(use_true_random=False))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_plan_does_not_depend_on_the_order_of_the_objects(name: str, rnd: Any) -> None:
    objs = list(OBJECTS[name])
    rnd.shuffle(objs)  # the WorkloadGroup object may come first, last or between its members
    assert json.dumps(plan(objs, GROUPER).to_json(), sort_keys=True) == BASELINE[name]
