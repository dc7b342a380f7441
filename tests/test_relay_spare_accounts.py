"""`relay add` takes an account nats-server already has (bridge/relay/spareaccounts.py): the
configuration it renders stays the same byte for byte, so a running nats-server is not
reloaded (which would close every connection its auth callout let in). The end-to-end check
with a running relay is tests/test_relay_accounts.py
::test_adding_a_workstation_reloads_nothing_and_disconnects_no_one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.relay import spareaccounts
from bridge.relay.natsserver import Cluster, RelayDir, RelayServeError, RelayState

MiB = 1024 * 1024


def _relay(tmp_path: Path, **kw: Any) -> tuple[RelayDir, RelayState]:
    rdir = RelayDir(tmp_path / "relay")
    state = RelayState(**kw)
    rdir.save(state)
    rdir.add(state, "first")
    return rdir, state


def _accounts(rdir: RelayDir) -> dict[str, Any]:
    return json.loads(rdir.conf_file.read_text())["accounts"]  # type: ignore[no-any-return]


def test_every_share_the_store_has_room_for_is_declared_and_taken_without_a_change(
    tmp_path: Path,
) -> None:
    rdir, state = _relay(tmp_path, queue_max_bytes=4 * 64 * MiB, queue_share_bytes=64 * MiB)
    conf = rdir.conf_file.read_bytes()
    for name in ("second", "third", "fourth"):
        rdir.add(state, name)
        assert not rdir.conf_changed, name
        assert rdir.conf_file.read_bytes() == conf
    accounts = _accounts(rdir)
    taken = [w.nats_account for w in state.workstations.values()]
    # four accounts of their own, each with one share: no more JetStream than the store holds
    assert len(set(taken)) == 4 and state.spare_accounts == []
    assert all(accounts[a]["jetstream"]["max_file"] == 64 * MiB for a in taken)
    assert all(a.startswith(spareaccounts.PREFIX) for a in taken)
    # the account each workstation's users are placed in survives a restart (relay.json)
    again = rdir.load()
    assert again is not None
    assert [w.nats_account for w in again.workstations.values()] == taken


def test_a_relay_without_queues_declares_a_batch_and_reloads_once_per_batch(
    tmp_path: Path,
) -> None:
    rdir, state = _relay(tmp_path, queue_max_bytes=0)
    changed = []
    for n in range(2 * spareaccounts.PLAIN_BATCH):
        rdir.add(state, f"ws{n}")
        changed.append(rdir.conf_changed)
    # the first batch was declared with the first workstation; its last one taken, the next
    # workstation's add declares another batch (one reload), and so on
    assert changed.count(True) == 2, changed
    assert all("jetstream" not in a for a in _accounts(rdir).values())


def test_a_clusters_new_workstation_has_an_account_named_after_it(tmp_path: Path) -> None:
    """Two nodes adding a workstation at once would hand out the same spare: a cluster names
    each account after its workstation (and its nodes reload for it)."""
    rdir, state = _relay(tmp_path, cluster=Cluster(name="c", routes=["nats://127.0.0.1:6222"]))
    rdir.add(state, "second")
    assert rdir.conf_changed
    assert state.workstations["second"].nats_account == "second"
    assert "second" in _accounts(rdir)


def test_a_relay_json_from_before_keeps_its_accounts_and_declares_the_rest(
    tmp_path: Path,
) -> None:
    """Workstations added by an earlier version keep the account named after them (their
    queues are kept there); the spares are declared at the next save."""
    rdir = RelayDir(tmp_path / "relay")
    state = RelayState(queue_max_bytes=3 * 64 * MiB, queue_share_bytes=64 * MiB)
    raw = state.to_json()
    raw["workstations"] = {"old": {"daemon_password": "d" * 32, "client_password": "c" * 32}}
    del raw["spare_accounts"]
    old = RelayState.from_json(raw)
    rdir.save(old)
    assert old.workstations["old"].nats_account == "old"
    assert len(old.spare_accounts) == 2
    rdir.add(old, "new")
    assert not rdir.conf_changed
    assert set(_accounts(rdir)) >= {"old", old.workstations["new"].nats_account}


def test_a_relay_json_naming_another_account_is_refused_with_its_path(tmp_path: Path) -> None:
    """A hand-edited relay.json cannot put a workstation into the relay's own account (where
    the callout runs) or declare one by any other name: the start stops and names the file."""
    rdir, state = _relay(tmp_path)
    good = state.to_json()
    for change in (
        {"workstations": {"first": {**good["workstations"]["first"], "account": "RELAY"}}},
        {"spare_accounts": ["SYS"]},
        {"spare_accounts": "ws_0123456789ab"},
    ):
        rdir.state_file.write_text(json.dumps({**good, **change}))
        with pytest.raises(RelayServeError, match=r"relay\.json"):
            rdir.load()
