"""Give package-lock.json an entry for every optional platform package its CLIs declare.

A registry mirror that carries only linux-x64 builds makes `npm install` write a lock without
the other platforms' packages (@kilocode/cli-darwin-arm64, opencode-windows-x64, ...), and
`npm ci` then refuses the lock as out of sync (EUSAGE). Run this after changing the pins:

    python3 tests/clis/fill_lock.py tests/clis/package-lock.json

Each added entry has the version the parent asks for, `optional: true`, and the os/cpu/libc
read from its name, so npm skips it on other platforms and fetches it by version where it fits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

_OS = {"darwin": "darwin", "linux": "linux", "windows": "win32", "win32": "win32"}


def platform_entry(name: str, version: str) -> dict[str, object]:
    parts = name.rsplit("/", 1)[-1].split("-")
    entry: dict[str, object] = {"version": version, "optional": True}
    cpu = next((p for p in parts if p in ("arm64", "x64")), None)
    if cpu:
        entry["cpu"] = [cpu]
    if "musl" in parts:
        entry["libc"] = ["musl"]
    elif "gnu" in parts:
        entry["libc"] = ["glibc"]
    os_name = next((_OS[p] for p in parts if p in _OS), None)
    if os_name:
        entry["os"] = [os_name]
    return entry


def fill(lock: dict[str, object]) -> int:
    packages = lock["packages"]
    assert isinstance(packages, dict)
    added = 0
    for entry in list(packages.values()):
        for dep, version in (entry.get("optionalDependencies") or {}).items():
            key = f"node_modules/{dep}"
            if key not in packages:
                packages[key] = platform_entry(dep, version)
                added += 1
    lock["packages"] = dict(sorted(packages.items(), key=lambda kv: (kv[0] != "", kv[0])))
    return added


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "package-lock.json")
    lock = json.loads(path.read_text(encoding="utf-8"))
    added = fill(lock)
    path.write_text(json.dumps(lock, indent=2) + "\n", encoding="utf-8")
    print(f"{path}: added {added} optional platform entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
