"""The control-plane build empties its own Go build cache when the disk runs low (a full disk failed a cold CI
run half way through the operator builds), and only then."""

from __future__ import annotations

import shutil
from pathlib import Path

from devtools.cluster.build import make_room


def _cache(tmp_path: Path) -> Path:
    cache = tmp_path / "go-build"
    (cache / "00").mkdir(parents=True)
    (cache / "00" / "entry-d").write_bytes(b"x" * 1024)
    return cache


def test_a_cache_on_a_disk_with_room_is_kept(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert make_room(cache, quiet=True, min_free=1) is False
    assert (cache / "00" / "entry-d").is_file()


def test_a_cache_on_a_disk_short_of_room_is_emptied(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    short = shutil.disk_usage(tmp_path).free + (1 << 40)  # more than the disk has free
    assert make_room(cache, quiet=True, min_free=short) is True
    assert not cache.exists()
    assert make_room(cache, quiet=True, min_free=short) is False  # nothing left to empty: not an error
