"""Notification channels: one Apprise URL each (``[[notify.targets]]`` in config.toml).

Apprise knows the services (ntfy, Telegram, Pushover, Slack, Discord, Gotify, e-mail, JSON
webhooks, ...). Channel URLs hold secrets (bot tokens, passwords, topic names), so a channel is
only ever shown by Apprise's privacy form of its URL, the parts that form hides are remembered as
secrets (``bridge.util.redact``) before anything is logged, and what Apprise itself logs is routed
through the daemon's redacting log instead of Python's default stderr handler.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from bridge.config import NOTIFY_KINDS, NotifyTarget
from bridge.logs import get_logger
from bridge.util.redact import redact, remember_secret

log = get_logger("bridge.attention")

_SPLIT = re.compile(r"[/:@?&=#,+]+")
_local = threading.local()


class ChannelError(ValueError):
    """A channel URL Apprise cannot use; the message never contains the URL."""


@dataclass
class Answer:
    ok: bool
    text: str
    #: Web Push: the subscription is gone (404/410) and was removed.
    gone: bool = False
    #: Worth trying again (a push service refusing the request itself is not).
    retry: bool = True


class _AppriseLog(logging.Handler):
    """Apprise's log records: redacted into the daemon's log, and kept for the sender's answer."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(_local, "parsing", False):
            return  # Apprise quotes a URL it cannot parse whole, secrets included
        try:
            text = redact(record.getMessage())
        except Exception:  # a record that cannot be formatted is not worth a crash
            return
        lines = getattr(_local, "lines", None)
        if lines is not None:
            lines.append(text)
        if record.levelno >= logging.WARNING:
            log.warning("channel_said", text=text)


_installed = False


def route_apprise_logs() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    logger = logging.getLogger("apprise")
    logger.handlers[:] = [_AppriseLog()]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _looks_random(value: str) -> bool:
    return len(value) >= 8 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _remember_url_secrets(url: str, shown: str) -> None:
    """Whatever part of ``url`` Apprise's privacy form hides is a secret; so is a path segment
    or query value that looks random (an ntfy topic, a webhook's token), which Apprise shows."""
    visible = set(_SPLIT.split(shown))
    for part in _SPLIT.split(url):
        for value in {part, urllib.parse.unquote(part)}:
            if len(value) >= 6 and value not in visible and "***" not in value:
                remember_secret(value)
    parsed = urllib.parse.urlsplit(url)
    remember_secret(parsed.password)
    query = [v for _k, v in urllib.parse.parse_qsl(parsed.query)]
    for value in [*parsed.path.split("/"), *query]:
        value = urllib.parse.unquote(value)
        if _looks_random(value):
            remember_secret(value)


class Channel:
    def __init__(self, target: NotifyTarget, index: int) -> None:
        import apprise

        route_apprise_logs()
        self.kinds = frozenset(target.kinds or NOTIFY_KINDS)
        self._url = target.url
        _local.parsing = True
        try:
            plugin: Any = apprise.Apprise.instantiate(target.url, suppress_exceptions=True)
        finally:
            _local.parsing = False
        if plugin is None:
            scheme = target.url.split("://", 1)[0]
            raise ChannelError(
                f"notify.targets[{index}]: Apprise cannot use this URL (scheme `{scheme}://`); "
                "see https://github.com/caronc/apprise/wiki for the URL of each service"
            )
        self._plugin = plugin
        shown = str(plugin.url(privacy=True))
        _remember_url_secrets(target.url, shown)
        # Apprise's privacy form, without its query of defaults, and with what looks random
        # masked too.
        self.safe_url = redact(shown.split("?", 1)[0])
        self.name = target.name or self.safe_url
        self.service = str(getattr(plugin, "service_name", "") or target.url.split("://")[0])
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.safe_url,
            "service": self.service,
            "kinds": sorted(self.kinds),
        }

    def send(self, title: str, body: str) -> Answer:
        """Deliver once (blocking: call it on a thread); the answer is Apprise's own words."""
        with self._lock:
            _local.lines = []
            try:
                ok = bool(self._plugin.notify(title=title, body=body))
            except Exception as exc:
                ok = False
                _local.lines.append(f"{type(exc).__name__}: {exc}")
            lines, _local.lines = _local.lines, None
        text = redact(lines[-1]) if lines else ("delivered" if ok else "not delivered")
        return Answer(ok, text)

    def address(self) -> tuple[str, int] | None:
        """Where the service listens: the URL's host, or, for services at a fixed address
        (Telegram, Pushover, Discord, Slack: their URL's "host" is a token), that address."""
        plugin = self._plugin
        host = getattr(plugin, "host", None)
        if isinstance(host, str) and _is_hostname(host) and host in self.safe_url:
            secure = bool(getattr(plugin, "secure", False))
            port = getattr(plugin, "port", None)
            return host, int(port or (443 if secure else 80))
        for attr in ("webhook_url", "notify_url", "cloud_notify_url", "api_url"):
            value = getattr(plugin, attr, None)
            if isinstance(value, str) and "://" in value:
                parts = urllib.parse.urlsplit(value.replace("{}", ""))
                if parts.hostname:
                    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        return None

    def reach(self, timeout: float = 5.0) -> str | None:
        """Open a TCP connection to the service (nothing is sent); None when it works."""
        address = self.address()
        if address is None:
            return None  # a local or host-less service (a file, a command): nothing to reach
        host, port = address
        try:
            with socket.create_connection((host, port), timeout):
                return None
        except OSError as exc:
            return redact(f"cannot reach {host}:{port}: {exc.strerror or exc}")


def _is_hostname(host: str) -> bool:
    return host == "localhost" or "." in host or ":" in host


def build_channels(targets: list[NotifyTarget]) -> tuple[list[Channel], list[str]]:
    """The channels that parse, and one message per target that does not."""
    channels: list[Channel] = []
    problems: list[str] = []
    for i, target in enumerate(targets):
        try:
            channels.append(Channel(target, i))
        except ChannelError as exc:
            problems.append(str(exc))
    return channels, problems
