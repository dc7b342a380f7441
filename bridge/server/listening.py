"""Which TCP ports the processes working in a directory listen on (a dev server a session
started): the listening sockets of ``/proc/net/tcp`` and ``tcp6`` on the loopback or on every
address, matched by inode with the ``socket:[INODE]`` links of ``/proc/PID/fd`` of processes
whose ``/proc/PID/cwd`` is the directory or under it. Only the person's own processes can be
read, which is what is wanted. Linux only; elsewhere nothing is found (a port may be typed).

``listening_sockets`` is sans-I/O (a ``/proc/net/tcp`` text in, ``{inode: port}`` out).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: the socket state LISTEN in /proc/net/tcp
_LISTEN = "0A"
#: local addresses a dev server on this machine answers on for 127.0.0.1 or ::1
_LOOPBACK_OR_ANY = {
    "0100007F",  # 127.0.0.1
    "00000000",  # 0.0.0.0
    "00000000000000000000000001000000",  # ::1
    "00000000000000000000000000000000",  # ::
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
}


@dataclass(frozen=True)
class Listener:
    port: int
    pid: int
    command: str


def listening_sockets(text: str) -> dict[int, int]:
    """``{inode: port}`` of the listening sockets a ``/proc/net/tcp`` (or tcp6) text lists
    on the loopback or every address."""
    out: dict[int, int] = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        addr, _, port = fields[1].partition(":")
        if addr.upper() not in _LOOPBACK_OR_ANY:
            continue
        try:
            out[int(fields[9])] = int(port, 16)
        except ValueError:
            continue
    return out


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _under(cwd: str, top: str) -> bool:
    return cwd == top or cwd.startswith(top.rstrip(os.sep) + os.sep)


def listeners_under(directory: str, proc: str = "/proc") -> list[Listener]:
    """The ports processes working in ``directory`` (or under it) listen on, lowest first."""
    sockets = listening_sockets(_read(f"{proc}/net/tcp"))
    sockets.update(listening_sockets(_read(f"{proc}/net/tcp6")))
    if not sockets:
        return []
    top = os.path.realpath(directory)
    found: dict[int, Listener] = {}
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            cwd = os.readlink(f"{proc}/{pid}/cwd")
            if not _under(cwd, top):
                continue
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{proc}/{pid}/fd/{fd}")
            except OSError:
                continue
            if not link.startswith("socket:["):
                continue
            port = sockets.get(int(link[8:-1]) if link[8:-1].isdigit() else -1)
            if port is not None and port not in found:
                command = _read(f"{proc}/{pid}/cmdline").replace("\0", " ").strip()
                found[port] = Listener(port=port, pid=int(pid), command=command[:200])
    return sorted(found.values(), key=lambda x: x.port)
