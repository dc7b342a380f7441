"""Scriptable fake model servers for driving real agent CLIs in tests.

Example::

    from tests.fakes import CallTool, FakeAnthropic, Reply

    with FakeAnthropic() as srv:
        srv.script(
            CallTool("Bash", {"command": "echo hi"}),
            Reply(text="done", when="tool_result"),
        )
        ...  # run Claude Code with ANTHROPIC_BASE_URL=srv.base_url
        assert srv.agent_requests[1].view.last_is_tool_result

See ``README.md`` in this folder.
"""

from .anthropic import FakeAnthropic
from .chat import FakeChat
from .core import FakeServer, ModelView, RecordedRequest, sse
from .gemini import FakeGemini
from .responses import FakeResponses
from .script import CallTool, HttpError, Reply, Step, ToolCall, Usage, When

__all__ = [
    "CallTool",
    "FakeAnthropic",
    "FakeChat",
    "FakeGemini",
    "FakeResponses",
    "FakeServer",
    "HttpError",
    "ModelView",
    "RecordedRequest",
    "Reply",
    "Step",
    "ToolCall",
    "Usage",
    "When",
    "sse",
]
