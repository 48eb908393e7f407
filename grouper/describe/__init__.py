"""``grouper describe``: a workload's component tree, replicas, pods, resources and status, built from
its Karta definition (the ``kli describe`` view, karta.md §5.2).

``build_describe`` is pure (definition + evaluator + objects -> ``DescribeView``);
``render_table`` prints it; ``DescribeView.to_dict()`` is the JSON the CLI and the HTTP API emit.
Cluster reading lives in ``grouper.cli.live_workload`` (this package stays pure).
"""

from grouper.describe.build import build_describe, desired_of, pod_view
from grouper.describe.ownership import MAX_DEPTH, pods_of
from grouper.describe.quantity import format_cpu, format_memory, parse_quantity
from grouper.describe.render import age, render_table
from grouper.describe.resources import Resources, container_request, pod_request
from grouper.describe.view import ComponentNode, DescribeView, PodView, Replicas, ResourceRow

__all__ = [
    "MAX_DEPTH",
    "ComponentNode",
    "DescribeView",
    "PodView",
    "Replicas",
    "ResourceRow",
    "Resources",
    "age",
    "build_describe",
    "container_request",
    "desired_of",
    "format_cpu",
    "format_memory",
    "parse_quantity",
    "pod_request",
    "pod_view",
    "pods_of",
    "render_table",
]
