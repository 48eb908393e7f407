"""Supervised long-running tasks, after controller-runtime's manager and its runnables.

Every long-running coroutine of the service (each informer, leader election, the reconcile workers, the
API server probe, the HTTP server) runs under a :class:`Supervisor`. A task that raises an unexpected
exception is logged with its name and the traceback, counted (``podgrouper_task_restarts_total{task}``)
and restarted after a back-off (1 s doubling to 60 s). A task that keeps crashing — ``max_failures``
within ``window`` seconds — cannot recover by itself: the supervisor records why in :attr:`fatal`,
liveness fails with that message and the service exits non-zero, so Kubernetes restarts the pod
instead of leaving a replica that looks healthy and does nothing.

A task that returns normally is done (it is not restarted): the informer that gave up on a 403, the
worker that saw the queue shut down. Cancelling is how the owner stops a task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from grouper.observability.metrics import Metrics

log = logging.getLogger(__name__)

Factory = Callable[[], Awaitable[None]]


@dataclass
class TaskState:
    name: str
    restarts: int = 0
    last_error: str | None = None
    running: bool = False
    failures: deque[float] = field(default_factory=deque)


class Supervisor:
    def __init__(
        self,
        metrics: Metrics | None = None,
        *,
        max_failures: int = 5,
        window: float = 300.0,
        backoff: tuple[float, float] = (1.0, 60.0),
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self.metrics = metrics
        self.max_failures, self.window = max_failures, window
        self.backoff = backoff
        self.on_fatal = on_fatal
        self.fatal: str | None = None
        self.tasks: dict[str, TaskState] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    def spawn(self, name: str, factory: Factory) -> asyncio.Task[None]:
        """Run ``factory()`` under supervision as task ``name`` (a running task of that name is kept)."""
        current = self._running.get(name)
        if current is not None and not current.done():
            return current
        state = self.tasks.setdefault(name, TaskState(name))
        task = asyncio.get_running_loop().create_task(self._supervise(state, factory), name=name)
        self._running[name] = task
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[None]) -> None:
        name = task.get_name()
        if self._running.get(name) is task:
            del self._running[name]

    def task(self, name: str) -> asyncio.Task[None] | None:
        return self._running.get(name)

    def is_running(self, name: str) -> bool:
        t = self._running.get(name)
        return t is not None and not t.done()

    async def stop(self, *names: str) -> None:
        """Cancel the named tasks (all when none are named) and wait for them."""
        tasks = [t for n, t in self._running.items() if not names or n in names]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _supervise(self, state: TaskState, factory: Factory) -> None:
        delay = self.backoff[0]
        while True:
            state.running = True
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                now = time.monotonic()
                state.restarts += 1
                state.last_error = f"{type(exc).__name__}: {exc}"
                state.failures.append(now)
                while state.failures and now - state.failures[0] > self.window:
                    state.failures.popleft()
                if self.metrics is not None:
                    self.metrics.task_restarts.labels(task=_task_label(state.name)).inc()
                if len(state.failures) >= self.max_failures:
                    self._give_up(state)
                    return
                log.exception(
                    "task %s crashed; restarting in %.0fs", state.name, delay,
                    extra={"task": state.name, "restarts": state.restarts},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff[1])
            finally:
                state.running = False

    def _give_up(self, state: TaskState) -> None:
        msg = (
            f"task {state.name} crashed {len(state.failures)} times within {self.window:.0f}s, "
            f"last: {state.last_error}"
        )
        log.error("%s; giving up (the process must be restarted)", msg, extra={"task": state.name})
        if self.fatal is None:
            self.fatal = msg
            if self.on_fatal is not None:
                self.on_fatal(msg)


def _task_label(name: str) -> str:
    """Bounded metric label: ``informer:pods@ns`` → ``informer:pods``, ``reconcile-worker-3`` → ``reconcile-worker``."""
    name = name.split("@", 1)[0]
    head, _, tail = name.rpartition("-")
    return head if tail.isdigit() else name


__all__ = ["Supervisor", "TaskState"]
