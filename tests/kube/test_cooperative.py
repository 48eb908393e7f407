"""The cooperative-yield helper: a loop ticking it lets other tasks run every ``every`` steps, never in
between."""

from __future__ import annotations

import asyncio

from grouper.kube.cooperative import Cooperative


async def _run(every: int, steps: int) -> list[int]:
    """The step counts at which a competing task got to run while a loop of ``steps`` ticked."""
    done = 0
    seen: list[int] = []
    stop = asyncio.Event()

    async def other() -> None:
        while not stop.is_set():
            seen.append(done)
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)  # let it record its first look
    seen.clear()
    coop = Cooperative(every)
    for _ in range(steps):
        done += 1
        await coop.tick()
    stop.set()
    await task
    return seen


def test_yields_every_n_steps_and_never_between() -> None:
    assert asyncio.run(_run(3, 10)) == [3, 6, 9]


def test_every_one_yields_each_step_and_zero_means_one() -> None:
    assert asyncio.run(_run(1, 3)) == [1, 2, 3]
    assert Cooperative(0).every == 1


def test_a_count_of_steps_at_once() -> None:
    async def main() -> list[bool]:
        coop = Cooperative(10)
        return [await coop.tick(steps) for steps in (4, 4, 4, 9)]  # 4, 8, 12 → yields (counter restarts), 9

    assert asyncio.run(main()) == [False, False, True, False]
