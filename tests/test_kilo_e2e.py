"""Kilo CLI end to end: the same tests as OpenCode's (test_opencode_e2e.py) against the real
``kilo serve`` (Kilo is an OpenCode fork with the same server), with Kilo's own names for the
binary, the server password and the config directories.
"""

from __future__ import annotations

import pytest

from tests import test_opencode_e2e as oc

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cli() -> str:
    return "kilo"


# OpenCode's fixtures and tests, collected here with cli = "kilo", in OpenCode's order (the
# shared-session tests build on each other).
binary, fake, harness, shared = oc.binary, oc.fake, oc.harness, oc.shared
test_streamed_answer_with_reasoning_and_usage = oc.test_streamed_answer_with_reasoning_and_usage
test_tool_call_runs_in_the_project = oc.test_tool_call_runs_in_the_project
test_todos_become_a_plan = oc.test_todos_become_a_plan
test_permission_requests_go_to_the_client = oc.test_permission_requests_go_to_the_client
test_edit_arrives_as_a_diff_matching_the_file = oc.test_edit_arrives_as_a_diff_matching_the_file
test_a_new_server_resumes_the_session_with_its_history = (
    oc.test_a_new_server_resumes_the_session_with_its_history
)
test_unknown_session_resets_then_interrupt_then_the_server_dies_mid_turn = (
    oc.test_unknown_session_resets_then_interrupt_then_the_server_dies_mid_turn
)
