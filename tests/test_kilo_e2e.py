"""Kilo CLI end to end: the same tests as OpenCode's (test_opencode_e2e.py) against the real
``kilo serve`` (Kilo is an OpenCode fork with the same server), with Kilo's own names for the
binary, the server password and the config directories.
"""

from __future__ import annotations

import pytest

from tests.test_opencode_e2e import (  # noqa: F401 - collected here with cli = "kilo"
    binary,
    fake,
    harness,
    project,
    test_permission_requests_go_to_the_client,
    test_stream_tool_plan_and_edit_then_a_new_server_resumes_the_session,
    test_unknown_session_resets_then_interrupt_then_the_server_dies_mid_turn,
)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cli() -> str:
    return "kilo"
