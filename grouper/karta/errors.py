"""Errors raised by the Karta engine.

``KartaLoadError`` is about a definition document (bad YAML, wrong field type); it is not a
grouping failure and so does not derive from ``GroupingError``. ``KartaEvalError`` is raised
while applying a definition to a workload or pod and is a ``KartaError`` (hence a
``GroupingError``), so a failed evaluation affects that pod only.
"""

from __future__ import annotations

from grouper.model.errors import KartaError


class KartaLoadError(ValueError):
    """A definition document could not be turned into a ``KartaDefinition``.

    ``file`` and ``index`` locate the document (``None`` for in-memory objects); ``field`` is the
    JSON-ish path of the offending field (``spec.structureDefinition.rootComponent.name``).
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        index: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.index = index
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        parts: list[str] = []
        if self.file is not None:
            parts.append(self.file)
        if self.index is not None:
            parts.append(f"document {self.index}")
        if self.field:
            parts.append(f"field {self.field}")
        parts.append(self.message)
        return ": ".join(parts)

    def located(self, file: str | None, index: int | None) -> KartaLoadError:
        """The same error, now naming the file and document it came from."""
        return KartaLoadError(self.message, file=file, index=index, field=self.field)


class KartaEvalError(KartaError):
    """Evaluating a definition against an object failed.

    The message names the definition, the component (when known) and the jq expression (when
    one was involved), so it can be shown to the workload owner as is.
    """

    def __init__(
        self,
        message: str,
        *,
        definition: str,
        component: str | None = None,
        expression: str | None = None,
        obj: str | None = None,
    ) -> None:
        self.definition = definition
        self.component = component
        self.expression = expression
        self.detail = message
        where = f"Karta {definition}"
        if component:
            where += f", component {component}"
        text = f"{where}: {message}"
        if expression is not None:
            text += f" (expression '{expression}')"
        super().__init__(text, obj=obj)
