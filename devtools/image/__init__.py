"""Building and running the grouper's OCI image with podman (Debian packages; no Docker daemon, no registry).

``python -m devtools.image`` (what ``make image`` runs) installs podman / runc / mmdebstrap when missing,
optionally makes a base image from Debian packages, and builds the image. Development tooling: not part of
the installed ``grouper`` package.
"""

from .build import (
    DEFAULT_TAG,
    LOCAL_BASE,
    ImageError,
    build_image,
    ensure_local_base,
    ensure_podman,
    image_size,
    podman,
    podman_unavailable,
    run_flags,
)

__all__ = [
    "DEFAULT_TAG",
    "LOCAL_BASE",
    "ImageError",
    "build_image",
    "ensure_local_base",
    "ensure_podman",
    "image_size",
    "podman",
    "podman_unavailable",
    "run_flags",
]
