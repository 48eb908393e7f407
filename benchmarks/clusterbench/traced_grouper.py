"""``grouper`` under tracemalloc, for the soak benchmark's ``--tracemalloc``: every ``$TRACED_EVERY`` seconds
the allocations still alive, grouped by the line that made them, are compared with the first snapshot taken
after ``$TRACED_WARMUP`` seconds, and the largest growths are written to ``$TRACED_OUT`` (replaced each time).

    python benchmarks/clusterbench/traced_grouper.py run --server ...   # the arguments of ``grouper``
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc


def _watch(out: str, warmup: float, every: float) -> None:
    time.sleep(warmup)
    base = tracemalloc.take_snapshot()
    started = time.monotonic()
    while True:
        time.sleep(every)
        snap = tracemalloc.take_snapshot()
        top = snap.compare_to(base, "lineno")[:40]
        lines = [f"after {time.monotonic() - started:.0f} s past the warm-up; traced now "
                 f"{tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB"]
        lines += [str(stat) for stat in top]
        with open(out + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(out + ".tmp", out)


def main() -> int:
    tracemalloc.start(int(os.environ.get("TRACED_FRAMES", "1")))
    threading.Thread(target=_watch, daemon=True, name="tracemalloc-watch",
                     args=(os.environ["TRACED_OUT"], float(os.environ.get("TRACED_WARMUP", "300")),
                           float(os.environ.get("TRACED_EVERY", "60")))).start()
    from grouper.cli.main import main as grouper_main

    return grouper_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
