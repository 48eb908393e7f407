"""PodGroup name safety: Kubernetes object names are DNS-1123 subdomains of at most 253 characters.

KAI never shortens names (a too-long name fails at create time, §8 item 11). We shorten a name over
the limit deterministically: keep a prefix and append ``-`` + the first 10 hex digits of the SHA-256
of the full name, so the same workload always maps to the same, unique, valid name.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 253
HASH_LENGTH = 10
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def shorten_name(name: str, limit: int = MAX_NAME_LENGTH) -> str:
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:HASH_LENGTH]
    prefix = name[: limit - HASH_LENGTH - 1].rstrip("-.")
    return f"{prefix}-{digest}"


def is_subdomain(name: str) -> bool:
    return len(name) <= MAX_NAME_LENGTH and bool(_SUBDOMAIN.match(name))
