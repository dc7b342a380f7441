"""`relay serve` on three machines (docs/remote-access.md, "A relay on three machines"): three
real `relay serve` processes, each on its own loopback address (127.0.0.1, .2, .3) with the same
ports, as three machines would be, joined into one NATS cluster. A real daemon and a phone
(nats-py, as the web client would) pair and talk through them while nodes are killed with
SIGKILL: the daemon and the phone go on through the others, a message queued while the daemon
was away is delivered once, a login made on one node works on every node and a revocation
closes it on every node, and `relay add` on one node reaches the others."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as Nats

from bridge.relay import natsserver, queued
from bridge.relay.sealing import unb64
from tests.daemon import DaemonProcess
from tests.daemonkit import history, make_certificate, run_bridge, user_texts
from tests.relaykit import (
    RelayClient,
    ServedRelay,
    decode_link,
    events_until,
    nats_as,
    relayed_daemon,
    wait_relay,
)

pytestmark = pytest.mark.slow

HOST_ID = "box"
STREAM = queued.queue_stream(HOST_ID)
#: how long a cluster may take to elect its leaders and share its logins (a wait, not a target)
READY_S = 90.0


def _free_everywhere(hosts: list[str]) -> int:
    """A port free on every node's address."""
    while True:
        port = natsserver.free_port()
        try:
            for host in hosts[1:]:
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port


class Node(ServedRelay):
    """One machine of the cluster: `relay serve` on 127.0.0.<n>, the cluster's ports."""

    def __init__(self, directory: Path, n: int, ports: dict[str, int], *options: str) -> None:
        super().__init__(directory / f"n{n}", "box", *options)
        self.n = n
        self.host = f"127.0.0.{n}"
        self.port, self.ws_port, self.web_port = ports["port"], ports["ws"], ports["web"]

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self) -> Node:
        self._start()  # the cluster's ports are fixed: every node has the same
        return self

    def synced(self) -> int:
        """How many times it has read the cluster's login bucket (once per start)."""
        return self.printed().count("relay_cluster_synced")

    def kill9(self) -> None:
        """The machine dies: its nats-server and `relay serve` both get SIGKILL."""
        assert self.proc is not None
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((self.rdir / "nats-server.pid").read_text()), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def admin_password(self) -> str:
        return str(json.loads((self.rdir / "relay.json").read_text())["admin_password"])


class Cluster:
    def __init__(self, directory: Path, *more: str) -> None:
        hosts = [f"127.0.0.{n}" for n in (1, 2, 3)]
        ports = {k: _free_everywhere(hosts) for k in ("port", "ws", "web", "cluster")}
        routes = ",".join(f"nats://{h}:{ports['cluster']}" for h in hosts)
        self.nodes: list[Node] = []
        for n, host in enumerate(hosts, 1):
            options = [
                *("--host", host, "--public-host", host, "--server-name", f"n{n}"),
                *("--cluster-name", "test-cluster", "--cluster-port", str(ports["cluster"])),
                *("--routes", routes),
            ]
            if n > 1:  # the shared secrets and workstations: the first node's relay.json
                options += ["--join", str(directory / "n1" / "relay" / "relay.json")]
            options += more
            self.nodes.append(Node(directory, n, ports, *options))

    async def start(self) -> None:
        for node in self.nodes:
            node.start()
        await wait_for(lambda: all(n.synced() for n in self.nodes), "every node read the bucket")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if f"n{n.n}" == name)

    def alive(self) -> list[Node]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    async def stream_info(self) -> Any:
        """The workstation's stream as a live node says (the relay's own login there); None
        while none can say (a node just back, a leader being elected)."""
        for node in self.alive():
            try:
                nc = await nats.connect(
                    node.url,
                    user=f"{HOST_ID}-relay",
                    password=node.admin_password(),
                    inbox_prefix=f"agent-bridge-relay.{HOST_ID}._INBOX",
                    allow_reconnect=False,
                )
            except Exception:
                continue
            try:
                return await nc.jetstream(timeout=2).stream_info(STREAM)
            except Exception:
                continue
            finally:
                await nc.close()
        return None

    async def stream_leader(self) -> Node:
        """The node that holds the stream's leader, once all three copies are current."""

        async def current() -> Any:
            info = await self.stream_info()
            if info is None or info.cluster is None or not info.cluster.leader:
                return None
            replicas = info.cluster.replicas or []
            return info if len(replicas) == 2 and all(r.current for r in replicas) else None

        info = await wait_for(current, "the stream's three copies current")
        assert info.config.num_replicas == 3
        return self.node(str(info.cluster.leader))


async def wait_for(
    check: Callable[[], Any], what: str, timeout: float = READY_S, every: float = 0.1
) -> Any:
    """Until ``check()`` (sync or async) says something true; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(every)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path / "relay")
    try:
        await c.start()
        yield c
    finally:
        c.stop()


async def _login(url: str, login: dict[str, str], inbox: str, host: str) -> str:
    """ "ok", "refused" (the server said the login is not allowed), or what else went wrong."""
    try:
        nc = await nats_as(url, login, host, inbox, allow_reconnect=False, error_cb=_quiet_cb())
    except Exception as exc:
        return "refused" if "authorization" in str(exc).lower() else repr(exc)
    await nc.close()
    return "ok"


async def _login_works(
    urls: list[str], login: dict[str, str], inbox: str, host: str = HOST_ID
) -> bool:
    return await _login(urls[0], login, inbox, host) == "ok"


def connected_urls(d: DaemonProcess) -> list[str]:
    """The nodes the daemon's relay link reached, in order (its log's relay_connected)."""
    found = []
    for line in d.log_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("event") == "relay_connected":
                found.append(str(entry["url"]))
    return found


def _quiet_cb() -> Any:
    async def quiet(_exc: Exception) -> None:
        return None

    return quiet


async def test_a_turn_and_a_queued_message_survive_nodes_killed_with_sigkill(
    cluster: Cluster, tmp_path: Path
) -> None:
    n1, n2 = cluster.nodes[:2]
    account = json.loads(n1.account_file(HOST_ID).read_text())
    assert account["urls"] == [n.url for n in cluster.nodes]
    account_file = tmp_path / "relay-account.json"  # the workstation's copy
    account_file.write_text(json.dumps(account))
    account_file.chmod(0o600)
    d = relayed_daemon(tmp_path / "home", f'[relay]\naccount = "{account_file}"\n')
    phone: Nats | None = None
    try:
        [first] = connected_urls(d)  # a node of the account's urls (nats-py picks one)
        assert first in account["urls"]
        link = json.loads(run_bridge("pair", "--relay", "--json", env=d.env, check=True).stdout)
        info = decode_link(link["link"])
        assert info["urls"] == [f"ws://{n.host}:{n.web_port}/nats" for n in cluster.nodes]

        # paired through node 2 with the pairing login (once the daemon's subscriptions,
        # made on another node, are known there)
        nc = await nats_as(n2.url, info, HOST_ID, "pair")
        client = RelayClient(nc, HOST_ID, unb64(info["pk"]))
        await wait_for(lambda: _answers(client), "the daemon answering through node 2")
        assert (await client.pair(info["secret"], name="cluster phone"))["ok"]
        await nc.close()
        assert client.login is not None
        own = client.login
        # its own login, made by whichever node took the daemon's request, works on every node
        for node in cluster.nodes:
            await wait_for(
                lambda node=node: _login_works([node.url], own, str(client.client_id)),
                f"the phone's own login on {node.host}",
            )
        phone = client.nc = await nats_as(
            [n.url for n in cluster.nodes],  # type: ignore[arg-type]
            own,
            HOST_ID,
            str(client.client_id),
            error_cb=_quiet_cb(),
            reconnect_time_wait=0.2,
        )
        client.scoped = True

        # a turn; the daemon's node dies while the agent waits for the phone's answer
        vc = await client.open()
        await vc.hello()
        created = await vc.request("session.create", agent="demo", cwd=str(tmp_path))
        session = created["session"]["session"]
        await vc.request("session.subscribe", session=session)
        await vc.request("session.send", session=session, text="through the cluster")
        frames = await events_until(vc, lambda b: b["type"] == "permission_request")
        req = [f["block"] for f in frames if f["block"]["type"] == "permission_request"][-1]
        gone = next(n for n in cluster.nodes if n.url == first)
        gone.kill9()
        await wait_for(lambda: len(connected_urls(d)) > 1, "the daemon reconnected")
        assert connected_urls(d)[-1] in {n.url for n in cluster.nodes} - {gone.url}
        # the phone reaches the daemon again once the cluster knows where it now listens
        await wait_for(lambda: _answers(client), "the daemon answering the phone again")
        await vc.request(
            "session.permission", session=session, request_id=req["id"], option_id="allow"
        )
        frames += await events_until(vc, lambda b: b["type"] == "session_end", session=session)
        shown = [f["seq"] for f in frames if f["t"] == "event"]
        assert shown == list(range(1, len(shown) + 1)), shown  # none lost, none twice
        assert (tmp_path / "demo.txt").exists()  # the answer went through

        # the node comes back and catches up; then a message waits in the queue for the daemon
        synced = gone.synced()
        gone.start()
        await wait_for(lambda: gone.synced() > synced, "the node back in the cluster")
        await wait_for(lambda: d.healthz().get("relay_queue") == "on", "the daemon's queue")
        leader = await cluster.stream_leader()
        d.stop()
        ack = await client.queue(
            {"session": session, "text": "echo queued once", "client_msg_id": "m-1"}
        )
        assert ack.get("stream") == STREAM and "error" not in ack, ack
        leader.kill9()  # the node that held the stream's leader
        # the workstation now has that node's account file: the dead node is its first url
        account_file.write_text(leader.account_file(HOST_ID).read_text())
        d.start()
        wait_relay(d, "connected")
        # the stream and the daemon's consumer elect new leaders on the two nodes left
        await wait_for(lambda: d.healthz().get("relay_queue") == "on", "the queue back")
        texts = await user_texts(d, session, 2)
        assert texts == ["through the cluster", "echo queued once"]
        said = "".join(
            f["block"]["text"] for f in await history(d, session) if f["block"]["type"] == "text"
        )
        assert said.count("You said: queued once") == 1

        # revoked on the workstation: its login no longer works on any node left, and its
        # connection is closed
        kicked = asyncio.Event()

        async def closed() -> None:
            kicked.set()

        held = await nats_as(
            cluster.alive()[-1].url,
            own,
            HOST_ID,
            str(client.client_id),
            allow_reconnect=False,
            closed_cb=closed,
            error_cb=_quiet_cb(),
        )
        run_bridge("clients", "revoke", str(client.client_id), env=d.env, check=True)
        await wait_for(kicked.is_set, "the phone's connection closed")
        assert held.is_closed
        for node in cluster.alive():
            await wait_for(
                lambda node=node: _refused(node.url, own, str(client.client_id)),
                f"the revoked login refused on {node.host}",
            )
    finally:
        if phone is not None:
            with contextlib.suppress(Exception):
                await phone.close()
        d.stop()


async def _answers(client: RelayClient) -> bool:
    try:
        return bool(await client.ask("status", {}, timeout=1.0))
    except Exception:
        return False


async def _refused(url: str, login: dict[str, str], inbox: str, host: str = HOST_ID) -> bool:
    return await _login(url, login, inbox, host) == "refused"


async def test_a_workstation_added_or_rotated_on_one_node_is_so_on_every_node(
    cluster: Cluster,
) -> None:
    n1, n2, n3 = cluster.nodes
    added = run_bridge("relay", "add", "second", "--dir", str(n2.rdir), env=n2.env, check=True)
    assert "the running relay has read the new configuration" in added.stdout
    account = json.loads((n2.rdir / "accounts" / "second.json").read_text())
    daemon = {"user": account["daemon"]["user"], "pass": account["daemon"]["password"]}
    for node in (n1, n3):
        await wait_for(lambda node=node: node.account_file("second").exists(), "its account")

        async def works(node: Node = node) -> bool:
            try:
                nc = await nats.connect(
                    node.url,
                    user=daemon["user"],
                    password=daemon["pass"],
                    allow_reconnect=False,
                    inbox_prefix="agent-bridge.second._INBOX",
                )
            except Exception:
                return False
            await nc.close()
            return True

        await wait_for(works, f"the new workstation's daemon login on {node.host}")
    assert json.loads(n3.account_file("second").read_text())["urls"][0] == n3.url

    # a new pairing login made on node 3: the old one is refused on every node, the new works
    old = {"user": account["client"]["user"], "pass": account["client"]["password"]}
    run_bridge("relay", "rotate", "second", "--dir", str(n3.rdir), env=n3.env, check=True)
    new = json.loads(n3.account_file("second").read_text())["client"]
    login = {"user": new["user"], "pass": new["password"]}
    for node in (n1, n2, n3):
        await wait_for(
            lambda node=node: _refused(node.url, old, "pair", host="second"),
            f"the old pairing login refused on {node.host}",
        )
        await wait_for(
            lambda node=node: _login_works([node.url], login, "pair", host="second"),
            f"the new pairing login on {node.host}",
        )


async def test_a_server_without_the_routes_password_cannot_join(
    cluster: Cluster, tmp_path: Path
) -> None:
    n1 = cluster.nodes[0]
    route = json.loads((n1.rdir / "nats.conf").read_text())["cluster"]["routes"][0]
    wrong = route.replace(route.split("//", 1)[1].split("@", 1)[0], "agent-bridge-relay-route:x")
    conf = tmp_path / "rogue.json"
    monitor = natsserver.free_port()
    conf.write_text(
        json.dumps(
            {
                "port": natsserver.free_port(),
                "server_name": "rogue",
                "http": f"127.0.0.1:{monitor}",
                "cluster": {
                    "name": "test-cluster",
                    "host": "127.0.0.1",
                    "port": natsserver.free_port(),
                    "routes": [wrong.replace(wrong.rsplit("@", 1)[1].split(":")[0], n1.host)],
                },
            }
        )
    )
    log = tmp_path / "rogue.log"
    with open(log, "wb") as out:
        rogue = subprocess.Popen(
            [str(natsserver.nats_server_binary()), "-c", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        await wait_for(lambda: "Authorization Violation" in log.read_text(), "the route refused")
        await wait_for(
            lambda: "Router connection closed: Authentication Failure" in n1.printed(),
            "the node refusing the route",
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/routez", timeout=10) as r:
            assert json.loads(r.read())["num_routes"] == 0
    finally:
        natsserver.stop(rogue)


def test_a_node_s_configuration_has_authenticated_routes_and_three_copies() -> None:
    from bridge.relay.natsserver import (
        Cluster,
        RelayState,
        Workstation,
        account_of,
        join,
        render,
    )

    routes = [f"nats://relay-{x}.example:6222" for x in "abc"]
    state = RelayState(host="relay-a.example", public_host="relay-a.example", queue_dir="/q")
    state.cluster = Cluster("relay", 6222, routes, "a")
    state.workstations["box"] = Workstation("box", "d", "c")
    conf = render(state)
    cluster = conf["cluster"]
    password = state.cluster.password
    assert cluster["authorization"] == {"user": "agent-bridge-relay-route", "password": password}
    # the other two nodes, each dialled with the routes' login; not itself
    assert cluster["routes"] == [
        f"nats://agent-bridge-relay-route:{password}@relay-{x}.example:6222" for x in "bc"
    ]
    assert conf["server_name"] == "a" and "tls" not in cluster
    # each copy of a stream counts against its account's storage
    assert conf["accounts"]["box"]["jetstream"]["max_file"] == 3 * state.queue_share_bytes
    assert conf["accounts"]["RELAY"]["jetstream"]["max_streams"] == 1
    account = account_of(state, state.workstations["box"])
    assert account["urls"] == [f"nats://relay-{x}.example:4222" for x in "abc"]
    assert account["client_urls"][0] == account["client_url"]

    state.tls_cert, state.tls_key = "/c.pem", "/k.pem"
    assert render(state)["cluster"]["tls"] == {"cert_file": "/c.pem", "key_file": "/k.pem"}

    # a node that joins takes the shared secrets and workstations, keeps its own name and store
    other = RelayState(host="relay-b.example", queue_dir="/other")
    other.cluster.server_name = "b"
    join(other, state)
    assert other.issuer_seed == state.issuer_seed and other.workstations == state.workstations
    assert other.cluster.password == password and other.cluster.server_name == "b"
    assert other.queue_dir == "/other" and other.host == "relay-b.example"
    assert render(other)["cluster"]["routes"][0].endswith("@relay-a.example:6222")
    # a single relay has none of it
    single = render(RelayState(queue_dir="/q"))
    assert "cluster" not in single and "jetstream" not in single["accounts"]["RELAY"]


async def test_with_a_certificate_the_routes_use_tls(tmp_path: Path) -> None:
    # one self-signed certificate naming every node, given to each as the routes' CA
    cert, key = make_certificate(tmp_path, ("IP:127.0.0.2", "IP:127.0.0.3"))
    tls = ("--tls-cert", str(cert), "--tls-key", str(key), "--cluster-ca", str(cert))
    c = Cluster(tmp_path / "relay", *tls)
    try:
        await c.start()  # they elected JetStream's leaders and share the logins: routes work
        n1 = c.nodes[0]
        conf = json.loads((n1.rdir / "nats.conf").read_text())["cluster"]
        assert conf["tls"] == {"cert_file": str(cert), "key_file": str(key), "ca_file": str(cert)}
        account = json.loads(n1.account_file(HOST_ID).read_text())
        assert [u.split("://")[0] for u in account["urls"]] == ["tls"] * 3
    finally:
        c.stop()


def test_the_daemon_takes_every_node_from_its_account_file_or_from_relay_url(
    tmp_path: Path,
) -> None:
    from bridge.config import ConfigError, RelayConfig
    from bridge.relay import account as relay_account

    nodes = [f"nats://relay-{x}.example:4222" for x in "abc"]
    sockets = [f"wss://relay-{x}.example:4281/nats" for x in "abc"]
    acct = tmp_path / "acct.json"
    body = {
        "url": nodes[0],
        "client_url": sockets[0],
        "host_id": "box",
        "daemon": {"user": "box-daemon", "password": "daemon-secret-password-1"},
        "client": {"user": "box-client", "password": "client-secret-password-2"},
    }
    acct.write_text(json.dumps({**body, "urls": nodes, "client_urls": sockets}))
    acct.chmod(0o600)
    s = relay_account.resolve(RelayConfig(account=str(acct)))
    assert s is not None and s.url == nodes[0]
    assert s.other_urls == tuple(nodes[1:]) and s.client_urls == tuple(sockets[1:])
    # [relay] url with commas overrides the account's, first node first
    s = relay_account.resolve(RelayConfig(account=str(acct), url=f"{nodes[2]}, {nodes[1]}"))
    assert s is not None and (s.url, s.other_urls) == (nodes[2], (nodes[1],))
    # an account file of a single relay (or of an earlier version) has none
    acct.write_text(json.dumps(body))
    s = relay_account.resolve(RelayConfig(account=str(acct)))
    assert s is not None and s.other_urls == () and s.client_urls == ()
    acct.write_text(json.dumps({**body, "urls": [nodes[0], "http://relay-b.example"]}))
    with pytest.raises(ConfigError, match="urls"):
        relay_account.resolve(RelayConfig(account=str(acct)))
