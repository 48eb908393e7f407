"""Parts of ``benchmarks/cluster_bench.py``: the workloads it creates and what it expects of them
(``workloads``), its API client (``api``), and the helper processes that watch, probe and play the
minimal-writes baseline (``observers``)."""
