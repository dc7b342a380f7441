"""The terminal-handoff hooks of an adapter whose ``bridge.handoff`` module has the usual four
functions (``scan``, ``is_owned``, ``mirror``, ``resume_command``): Claude's and Codex's.

Put :class:`ModuleHandoff` before the adapter's base class and name the module in
``handoff_module``; the hooks of the contract (``docs/session-handoff.md``) then call it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar, Protocol

from bridge.blocks import Block
from bridge.wire.agent_types import ExternalSession, ResumeCommand


class HandoffModule(Protocol):
    """What a ``bridge.handoff.<agent>`` module offers (a module satisfies it as it is)."""

    def scan(self) -> list[ExternalSession]: ...

    def is_owned(self, cwd: str, sid: str | None) -> bool: ...

    def mirror(self, cwd: str, sid: str) -> AsyncIterator[Block] | None: ...

    def resume_command(self, sid: str, cwd: str | None, binary: str) -> ResumeCommand | None: ...


class ModuleHandoff:
    """The handoff hooks, each a call into ``handoff_module``."""

    handoff_module: ClassVar[HandoffModule]
    agent_id: ClassVar[str]
    cli_binary: ClassVar[str | None]

    @classmethod
    def scan_external_sessions(cls) -> list[ExternalSession]:
        return cls.handoff_module.scan()

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        return cls.handoff_module.is_owned(cwd, sid)

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        return cls.handoff_module.mirror(cwd, sid)

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return cls.handoff_module.resume_command(sid, cwd, cls.cli_binary or cls.agent_id)
