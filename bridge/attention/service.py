"""Wiring: the notifier joins the daemon (hub hook, requests, presence) and leaves with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge import paths
from bridge.attention.detect import (
    BODY_MAX,
    TITLE_MAX,
    Notice,
    SessionInfo,
    clean,
    with_workstation,
)
from bridge.attention.notifier import Attention, TestTooSoon
from bridge.attention.pushstore import PushSubscriptions
from bridge.attention.webpush import SubscriptionError
from bridge.logs import get_logger
from bridge.server.pairing import pairing_host
from bridge.wire.protocol import (
    ClientPresence,
    NotifyChannels,
    NotifyTest,
    WebpushKey,
    WebpushSubscribe,
    WebpushUnsubscribe,
)
from bridge.wire.results import (
    Empty,
    NotifyChannelsResult,
    NotifyTestResult,
    WebpushKeyResult,
    as_result,
)

if TYPE_CHECKING:
    from bridge.hub import Hub
    from bridge.server.connection import Connection
    from bridge.server.server import BridgeServer


log = get_logger("bridge.attention")


def web_base_url(server: BridgeServer) -> str:
    """Where the daemon's web client is, for links in notifications (never with the token)."""
    configured = server.config.notify.web_url
    if configured:
        return configured.split("#", 1)[0].rstrip("/")
    assert server.tcp_address is not None
    host, port = server.tcp_address
    shown = pairing_host(host)
    shown = f"[{shown}]" if ":" in shown else shown
    scheme = "https" if server.config.server.tls_cert else "http"
    return f"{scheme}://{shown}:{port}"


def attach(hub: Hub, server: BridgeServer) -> Attention:
    """Make the notifier, hook it to the hub's committed events and the server's requests."""

    def lookup(session: str) -> SessionInfo | None:
        s = hub.sessions.get(session)
        if s is None:
            return None
        name = s.adapter_cls.display_name if s.adapter_cls is not None else ""
        return SessionInfo(agent=s.rec.agent, cwd=s.rec.cwd, title=s.rec.title, agent_name=name)

    attention = Attention(
        server.config, PushSubscriptions(hub.store), lookup, "", paths.state_dir()
    )
    attention.remember_token(server.token)
    hub.fanout.on_committed = attention.on_committed
    server.on_disconnect.append(attention.drop)

    async def presence(conn: Connection, req: ClientPresence) -> Empty:
        attention.report(conn, req.visible, req.session)
        return Empty()

    async def key(_conn: Connection, _req: WebpushKey) -> WebpushKeyResult:
        return WebpushKeyResult(public_key=await attention.key())

    async def subscribe(_conn: Connection, req: WebpushSubscribe) -> Empty:
        from bridge.hub import HubError

        sub = req.subscription
        data: dict[str, Any] = {
            "endpoint": sub.endpoint,
            "expirationTime": sub.expirationTime,
            "keys": {"p256dh": sub.keys.p256dh, "auth": sub.keys.auth},
        }
        if req.vapid_key is not None:
            data["vapid_key"] = req.vapid_key
        if req.ws is not None:
            data["ws"] = req.ws
        try:
            await attention.subscribe(data)
        except SubscriptionError as exc:
            raise HubError("bad_request", str(exc)) from None
        return Empty()

    async def unsubscribe(_conn: Connection, req: WebpushUnsubscribe) -> Empty:
        await attention.unsubscribe(req.endpoint)
        return Empty()

    async def channels(_conn: Connection, _req: NotifyChannels) -> NotifyChannelsResult:
        await attention.wait_ready()
        return as_result(attention.describe(), NotifyChannelsResult)

    async def test(_conn: Connection, req: NotifyTest) -> NotifyTestResult:
        from bridge.hub import HubError

        await attention.wait_ready()
        try:
            answers = await attention.send_test(req.kind, req.endpoint)
        except TestTooSoon as exc:
            raise HubError("rate_limited", str(exc)) from None
        return as_result({"results": answers}, NotifyTestResult)

    def checks_finished(session: str, title: str, body: str) -> None:
        # said once per finished branch, whether or not a person is looking
        log.info("checks_finished", session=session, watched=attention.presence.watched(session))
        info = lookup(session)
        notice = Notice(
            kind="checks",
            title=clean(title, TITLE_MAX),
            body=clean(body, BODY_MAX),
            session=session,
            agent=info.agent if info else "",
            url=attention.url_of(session),
        )
        attention.raise_notice(with_workstation(notice, attention.workstation))

    server.checks_api.on_finished = checks_finished
    server.add_handler(ClientPresence, presence, Empty)
    server.add_handler(WebpushKey, key, WebpushKeyResult)
    server.add_handler(WebpushSubscribe, subscribe, Empty)
    server.add_handler(WebpushUnsubscribe, unsubscribe, Empty)
    server.add_handler(NotifyChannels, channels, NotifyChannelsResult)
    server.add_handler(NotifyTest, test, NotifyTestResult)
    return attention


async def start(attention: Attention, server: BridgeServer) -> None:
    """Once the server listens (its port is known): links, subscriptions."""
    if not attention.base_url:
        attention.base_url = web_base_url(server)
    await attention.start()
