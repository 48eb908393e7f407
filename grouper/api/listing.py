"""The PodGroups and grouping errors one caller may see: shared by ``GET /podgroups`` and the web view's
grouping-errors page (``/ui/fragments/errors``), so both narrow to the same namespaces the same way."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace

from grouper.api.models import ERRORS_LIMIT, WorkloadError
from grouper.api.views import ListFilters, Views
from grouper.records.typed import PodGroupRecord


def visible_podgroups(views: Views, filters: ListFilters,
                      readable: Set[str] | None) -> tuple[list[PodGroupRecord], list[WorkloadError]]:
    """The records of the PodGroups matching ``filters`` in the namespaces ``readable`` (None: all), by
    namespace and name, and the workloads there that failed to group (each namespace with its own errors,
    at most ``ERRORS_LIMIT`` in all). Nothing is rendered: a page of the records goes to ``Views.summary``."""
    matches = views.matching_podgroups(filters)
    if readable is None:
        return matches, views.workload_errors(filters, matches)
    matches = [m for m in matches if m.namespace in readable]
    errors: list[WorkloadError] = []
    for ns in sorted(readable):
        in_ns = (m for m in matches if m.namespace == ns)
        errors.extend(views.workload_errors(replace(filters, namespace=ns), in_ns))
    return matches, errors[:ERRORS_LIMIT]


__all__ = ["visible_podgroups"]
