"""The PodGroups and grouping errors one caller may see: shared by ``GET /podgroups`` and the web view's
grouping-errors page (``/ui/fragments/errors``), so both narrow to the same namespaces the same way."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace
from typing import Any

from grouper.api.models import ERRORS_LIMIT, WorkloadError
from grouper.api.views import ListFilters, Views
from grouper.model.objects import Obj

Match = tuple[dict[str, Any], Obj, list[dict[str, Any]]]


def visible_podgroups(views: Views, filters: ListFilters,
                      readable: Set[str] | None) -> tuple[list[Match], list[WorkloadError]]:
    """The PodGroups matching ``filters`` in the namespaces ``readable`` (None: all) and the workloads there
    that failed to group (each namespace with its own errors, at most ``ERRORS_LIMIT`` in all)."""
    matches = views.matching_podgroups(filters)
    if readable is None:
        return matches, views.workload_errors(filters, (rec for rec, _, _ in matches))
    matches = [m for m in matches if str(m[0].get("namespace") or "") in readable]
    errors: list[WorkloadError] = []
    for ns in sorted(readable):
        in_ns = (rec for rec, _, _ in matches if rec.get("namespace") == ns)
        errors.extend(views.workload_errors(replace(filters, namespace=ns), in_ns))
    return matches, errors[:ERRORS_LIMIT]


__all__ = ["Match", "visible_podgroups"]
