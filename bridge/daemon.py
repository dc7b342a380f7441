"""Assembles the daemon: config, store, adapters, hub and server, and runs it until a signal.

Start-up order matters: the store is open and the hub has recovered before the server
accepts connections, and only then is readiness announced (stdout line, systemd READY=1).
Drop-in adapters load after that, in the background: each file is import-checked in a
subprocess first, which takes seconds for many files, and readiness must not wait for them
(docs/benchmarks.md, T6). Only the look at which files are on their way (a directory read)
comes before listening, so the first ``agents.list`` already shows them as loading. Until that
first pass ends, the registry makes requests and recovered sessions that name an agent it may
still bring wait for it.
Shutdown runs the other way: interrupt turns, stop adapters, flush the store, close clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge import __version__, paths
from bridge.cli import doctor
from bridge.config import Config, ConfigError
from bridge.hub import Hub
from bridge.loading.registry import Registry, load_builtin_classes
from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.server.netaddr import is_loopback
from bridge.server.server import BridgeServer
from bridge.store.memory import MemoryStore
from bridge.store.statelock import AlreadyRunning, StateLock, lock_paths, tighten_state_dir
from bridge.store.store import SqliteStore, Store
from bridge.util import logthrottle, notify
from bridge.util.exits import fail
from bridge.util.redact import remember_agent_env, remember_env_secrets

if TYPE_CHECKING:
    from bridge.loading.loader import AdapterLoader
    from bridge.relay.queued import Queued

log = get_logger("bridge.daemon")

RETENTION_EVERY_S = 3600.0
#: How long a stopping daemon retries writes that fail before giving them up.
STORE_CLOSE_GRACE_S = 10.0
#: How long a thread waiting for the GIL lets the thread holding it run on (Python's default
#: is 5 ms). The store's writer thread takes the GIL a few times per commit; while the event
#: loop is busy and rarely blocks, each time waited the full interval, and a fast turn ran
#: into the store's back-pressure (docs/benchmarks.md, T7).
GIL_SWITCH_INTERVAL_S = 0.001


@dataclass
class ServeOptions:
    host: str | None = None
    port: int | None = None
    unix: str | None = None
    insecure: bool = False


def runtime_info_path() -> Path:
    return paths.state_dir() / "daemon.json"


def check_bind(config: Config) -> None:
    conf = config.server
    if not is_loopback(conf.host) and not conf.tls_cert:
        if not conf.insecure:
            raise ConfigError(
                f"refusing to listen on {conf.host} without TLS: set server.tls_cert and "
                "server.tls_key, or pass --insecure if you really mean it"
            )
        log.warning(
            "insecure_bind",
            host=conf.host,
            message="listening beyond loopback without TLS: tokens and traffic are readable "
            "on the network",
        )


def make_store(config: Config) -> Store:
    if config.store.backend == "memory":
        return MemoryStore()
    return SqliteStore(config.db_path)


class Daemon:
    def __init__(self, config: Config, options: ServeOptions | None = None) -> None:
        opts = options or ServeOptions()
        if opts.host is not None:
            config.server.host = opts.host
        if opts.port is not None:
            config.server.port = opts.port
        if opts.unix is not None:
            config.server.unix_socket = opts.unix
        if opts.insecure:
            config.server.insecure = True
        self.config = config
        self.store = make_store(config)
        self.store.health.fail_after_s = config.store.fail_after_s
        self.store.health.on_expired(self._store_failing_too_long)
        self.registry = Registry(config)
        self.hub = Hub(config, self.registry, self.store)
        self.server = BridgeServer(config, self.hub, self.registry, paths.token_file())
        from bridge.attention import service as attention

        self.attention = attention.attach(self.hub, self.server)
        self.server.daemon_checks = doctor.daemon_checks
        self._stop = asyncio.Event()
        #: the link to the relay (bridge/relay/link.py) when [relay] is set
        self.relay: Any = None
        self._extras: list[Any] = []
        #: the daemon's own tasks (adapter loading, the watchdog, retention, interrupts): they
        #: end before the parts they use are shut down
        self.tasks = TaskOwner("daemon")

    def request_stop(self) -> None:
        self._stop.set()

    def _store_failing_too_long(self) -> None:
        """Writes have failed for ``store.fail_after_s``: stop the turns that are running
        (their closing blocks are written when the store recovers)."""
        running = [s.id for s in self.hub.sessions.values() if s.turn is not None]
        if running:
            log.error("store_failing_interrupting", sessions=len(running))
        for session_id in running:
            self.tasks.spawn(self._interrupt_quietly(session_id), name="interrupt")

    async def _interrupt_quietly(self, session_id: str) -> None:
        try:
            await self.hub.interrupt(session_id)
        except Exception as exc:
            log.warning("store_failing_interrupt_failed", session=session_id, error=repr(exc))

    def _register_adapters(self) -> None:
        for cls in load_builtin_classes():
            self.registry.register(cls, "builtin", notify=False)
        from bridge.loading import acp_config

        for cls in acp_config.adapters_from_config(self.config):
            self.registry.register(cls, "config", notify=False)

    def _start_web(self) -> None:
        from bridge.server import web

        handler = web.http_handler(self.server)
        if handler is not None:
            self.server.http_handlers.append(handler)

    def _scan_external_adapters(self) -> AdapterLoader | None:
        """List drop-in files and entry points as loading before the server listens: a client
        that asks at once must see them (the load itself runs after readiness)."""
        from bridge.loading import loader

        try:
            adapters = loader.AdapterLoader(self.registry, self.config)
            self._extras.append(adapters)
            adapters.scan()
        except Exception:
            log.exception("adapters_load_failed", dir=str(self.config.adapters_dir))
            return None
        return adapters

    async def _load_external_adapters(self, adapters: AdapterLoader | None) -> None:
        try:
            if adapters is not None:
                await adapters.start()
        except Exception:
            log.exception("adapters_load_failed", dir=str(self.config.adapters_dir))
        finally:
            self.registry.end_loading()
            self._warn_unknown_agents()

    def _warn_unknown_agents(self) -> None:
        from bridge.config import unknown_agent_ids, unknown_agent_message

        known = {e.agent_id for e in self.registry.entries()}
        for name, suggestion in unknown_agent_ids(self.config, known):
            log.warning(
                "config_unknown_agent",
                agent=name,
                did_you_mean=suggestion,
                message=unknown_agent_message(name, suggestion),
            )

    def _write_runtime_info(self) -> None:
        assert self.server.tcp_address is not None
        host, port = self.server.tcp_address
        info = {
            "pid": os.getpid(),
            "version": __version__,
            "url": self.server.url,
            "host": host,
            "port": port,
            "tls": bool(self.config.server.tls_cert),
            "unix": str(self.server.unix_path) if self.server.unix_path else None,
        }
        path = runtime_info_path()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info), encoding="utf-8")
        tmp.replace(path)

    def _status_text(self) -> str:
        states: dict[str, int] = {}
        for s in self.hub.sessions.values():
            if s.rec.state != "ended":  # ended ones are on disk, a few of them in memory
                states[s.rec.state] = states.get(s.rec.state, 0) + 1
        parts = [f"{n} {state}" for state, n in sorted(states.items())] or ["no sessions"]
        return f"{len(self.server.connections)} clients; sessions: " + ", ".join(parts)

    def _relay_status(self) -> str:
        return str(self.relay.status) if self.relay is not None else "off"

    def _start_relay(self, settings: Any) -> None:
        """Dial out to the relay: each virtual connection is served like a WebSocket client,
        trusted (a paired client is known by its key). Off without [relay]."""
        if settings is None:
            return
        from bridge.relay.clients import ClientRegistry
        from bridge.relay.link import RelayLink

        async def serve(vc: Any) -> None:
            await self.server.serve(vc, trusted=True)

        link = RelayLink(
            settings,
            ClientRegistry(),
            serve,
            max_frame=self.config.limits.max_frame_bytes,
            deliver=self._take_queued,
            previews=self.server.previews,
        )
        self.relay = link
        link.start()
        # unauthenticated relay input dropped since the start (docs/operations.md)
        self.server.healthz_fields["relay_dropped"] = lambda: dict(link.dropped)
        # why the link is down, when the user can fix it (docs/operations.md, "Doctor")
        self.server.healthz_fields["relay_reason"] = lambda: link.reason
        queue = link.queue
        self.server.healthz_fields["relay_queue"] = lambda: queue.status if queue else "off"
        if queue is not None:  # messages that failed every attempt (docs/operations.md)
            self.server.healthz_fields["relay_queue_set_aside"] = queue.set_aside_report

    async def _take_queued(self, message: Queued) -> None:
        """A message a phone left on the relay's work queue (bridge/relay/workqueue.py): sent
        as its ``session.send`` would be; returns once it is stored."""
        from bridge.hub import HubError
        from bridge.relay.workqueue import FINAL_CODES, Undeliverable

        send = message.send
        try:
            await self.hub.send(send.session, send.text, send.attachments, send.client_msg_id)
        except HubError as exc:
            if exc.code in FINAL_CODES:
                raise Undeliverable(exc.code, str(exc)) from exc
            raise

    async def run(self) -> None:
        check_bind(self.config)
        from bridge.relay.account import resolve

        # a bad [relay] (a missing or readable credentials file) stops the start, named
        relay_settings = resolve(self.config.relay) if self.config.relay.enabled else None
        self.server.healthz_fields["relay"] = self._relay_status
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        logthrottle.install(loop)
        self.store.open(loop)
        self._register_adapters()
        self._start_web()
        self.registry.begin_loading()
        adapters = self._scan_external_adapters()
        await self.hub.start()
        # before the first client: a session past its retention is never listed again
        self._retain()
        conf = self.config.server
        await self.server.start(conf.host, conf.port, self.config.unix_socket_path)
        self._write_runtime_info()
        self._start_relay(relay_settings)
        print(f"listening on {self.server.url}", flush=True)
        log.info(
            "listening",
            url=self.server.url,
            unix=str(self.server.unix_path or ""),
            version=__version__,
        )
        from bridge.attention import service as attention

        await attention.start(self.attention, self.server)
        notifier = notify.Notifier.from_env()
        notifier.ready(self._status_text())
        self.tasks.spawn(self._load_external_adapters(adapters), name="loading")
        self.tasks.spawn(notifier.run_watchdog(self._status_text), name="watchdog")
        self.tasks.spawn(self._retention(), name="retention")
        try:
            await self._stop.wait()
        finally:
            notifier.stopping()
            log.info("shutting_down")
            # cancelled and waited for: loading's probe subprocesses are killed on the way out
            await self.tasks.close()
            await self.shutdown()

    def _retain(self) -> None:
        conf = self.config.store
        ended_s = conf.ended_max_age_days * 86400
        if ended_s > 0:
            # Removed whole: the store deletes its rows (``prune``), the hub forgets it.
            self.hub.forget_ended(time.time() - ended_s)
        self.store.prune(conf.max_events_per_session, conf.max_age_days * 86400, ended_s)

    async def _retention(self) -> None:
        while True:
            await asyncio.sleep(RETENTION_EVERY_S)
            self._retain()

    async def shutdown(self) -> None:
        # A store that cannot write must not hold the shutdown forever.
        self.store.closing(STORE_CLOSE_GRACE_S)
        self.registry.cancel_detection()
        for extra in self._extras:
            with contextlib.suppress(Exception):
                await extra.close()
        if self.relay is not None:
            with contextlib.suppress(Exception):
                await self.relay.close()
        await self.hub.shutdown()
        await self.attention.close()
        await self.server.close()
        await self.store.close()
        with contextlib.suppress(OSError):
            runtime_info_path().unlink()
        log.info("stopped")


def serve(config: Config, options: ServeOptions) -> int:
    remember_env_secrets()
    # Secrets given to agents in the config are masked from the start, not only once a
    # child process has been spawned with them (an adapter may fail before that).
    for agent in config.agents.values():
        remember_agent_env(agent.env)
    for acp in config.acp.values():
        remember_agent_env(acp.env)
    # Before anything is opened, bound or written: a second daemon touches nothing.
    db_path = config.db_path if config.store.backend == "sqlite" else None
    lock = StateLock(lock_paths(paths.state_dir(), db_path))
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        return fail(exc)
    except OSError as exc:
        return fail(f"cannot lock the state directory: {exc}")
    try:
        if tighten_state_dir(paths.state_dir()):
            log.warning("state_dir_tightened", dir=str(paths.state_dir()), mode="0700")
        return _serve_locked(config, options)
    finally:
        lock.release()


def _serve_locked(config: Config, options: ServeOptions) -> int:
    daemon = Daemon(config, options)
    try:
        asyncio.run(daemon.run())
    except ConfigError as exc:
        return fail(exc, 2)
    except OSError as exc:
        return fail(f"cannot listen: {exc}")
    except KeyboardInterrupt:
        return 0
    return 0
