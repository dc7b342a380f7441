"""The import probe checks exactly the bytes the daemon imports.

A drop-in file is replaced by another version while its probe runs (the swap happens the moment
the probe starts, in the real loader with the real probe subprocess). The daemon must not
import bytes the probe never checked: here the unchecked version leaves a mark on disk when
imported (in a real attack it calls ``os._exit`` and takes the daemon down).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.loading import loader
from tests.loaderkit import LoaderHarness as Harness
from tests.loaderkit import adapter_source, write


async def test_a_file_swapped_during_its_probe_is_not_imported_unchecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path)
    mark = tmp_path / "imported-unchecked"
    evil = f"open({str(mark)!r}, 'w').close()\n" + adapter_source("swapped", "evil")
    benign = adapter_source("swapped", "benign")
    target = write(h.dir / "swapped.py", evil, 0o600)  # what the daemon reads first
    real_probe = loader.probe
    swaps = []

    async def probe_after_a_swap(*args: Any, **kwargs: Any) -> loader.ProbeResult:
        if not swaps:
            swaps.append(1)
            write(target, benign, 0o600)  # replaced while the probe starts
        return await real_probe(*args, **kwargs)

    monkeypatch.setattr(loader, "probe", probe_after_a_swap)
    await h.start()
    assert not mark.exists(), "the daemon imported bytes its probe never checked"
    # The version on disk now is the benign one; the next scan checks and loads it.
    await h.rescan()
    assert await h.reply("swapped") == "benign: hi"
    assert not mark.exists()
