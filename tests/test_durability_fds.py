"""Out of file descriptors, the daemon logs the failing accept() a few times, not thousands."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.daemon import ROOT, DaemonProcess


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (80, 80))


def test_accept_errors_are_logged_at_a_bounded_rate(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home", config='[server]\nunix_socket = "off"\n')
    log = tmp_path / "daemon.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", "--port", "0"],
            cwd=str(ROOT),
            env=d.env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            preexec_fn=_low_fd_limit,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        port = int(line.split(":")[-1].split("/")[0])
        held: list[socket.socket] = []
        try:
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:  # half-open connections, far past the limit
                try:
                    held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
                except OSError:
                    time.sleep(0.01)
            for s in held:
                s.close()
        finally:
            proc.terminate()
            proc.wait(20)
    text = log.read_text()
    assert text.count("Traceback") <= 4, f"{text.count('Traceback')} tracebacks in 6 s"
    assert "event_loop_error" in text and "Too many open files" in text
