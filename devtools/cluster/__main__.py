"""``python -m devtools.cluster``: start a local control plane and keep it up until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from .cluster import LocalCluster


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.cluster", description=__doc__)
    ap.add_argument("--no-controller-manager", action="store_true", help="run etcd + kube-apiserver only")
    ap.add_argument(
        "--crds",
        nargs="*",
        default=[],
        metavar="DIR",
        help="install the CRDs of these files/dirs (before the controller manager starts)",
    )
    ap.add_argument(
        "--operators",
        nargs="*",
        default=[],
        metavar="NAME",
        help="run these real workload operators too (jobset, kuberay, lws, kubeflow, trainer: with jobset), built from their Go modules on first use",
    )
    args = ap.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    crds = [Path(p) for p in args.crds]
    with LocalCluster(controller_manager=not args.no_controller_manager, crds=crds, operators=args.operators) as c:
        if crds:
            print(f"installed {len(c.crd_names)} CRDs", flush=True)
        print(f"local cluster up in {c.started_in:.1f}s: {c.server}", flush=True)
        print(f"kubeconfig: {c.kubeconfig_path}")
        print(f"export KUBECONFIG={c.kubeconfig_path}")
        print("Ctrl-C to stop", flush=True)
        stop.wait()
        print("stopping ...", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
