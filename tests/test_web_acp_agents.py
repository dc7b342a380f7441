"""A session of each ACP agent added for phones, in headless Chromium at 390x844 on a direct
connection: the real CLI (GitHub Copilot CLI's ``copilot --acp``, offline with the fake Chat
Completions server as its own provider; Kimi Code's ``kimi acp``, the same fake as its ``kimi``
provider) asks before a shell command, the phone allows it, the output and the answer arrive.
Screenshots go to docs/images (``AGENT_BRIDGE_DOC_IMAGES=1``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import realcli, realcli_session
from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import running
from tests.fakes import CallTool, FakeChat, Reply
from tests.harness import after_tool, daemon_env, user
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import PHONE, login, page_errors, send

IMAGES = ROOT / "docs" / "images"
TRANSCRIPT = "document.querySelector('.session .transcript').textContent"


@dataclass(frozen=True)
class Agent:
    name: str
    env: Callable[..., dict[str, str]]
    #: the shell call the fake model makes, given the marker the command echoes
    shell: Callable[[str], Reply]
    #: what the permission question shows of it
    asked: str


AGENTS = [
    Agent(
        "copilot",
        realcli.copilot_env,
        lambda echo: CallTool(
            "bash",
            {"command": f"ls && echo {echo}", "description": "List the project files"},
            when=user("WEB-1"),
        ),
        "List the project files",
    ),
    Agent(
        "kimi",
        realcli.kimi_env,
        lambda echo: CallTool("Shell", {"command": f"ls && echo {echo}"}, when=user("WEB-1")),
        "listed-by-kimi",
    ),
]

pytestmark = [*BROWSER_TESTS, pytest.mark.realcli, pytest.mark.timeout(240)]


@pytest.fixture(
    params=[
        pytest.param(
            a,
            id=a.name,
            marks=pytest.mark.skipif(
                realcli.cli_bin(a.name) is None, reason=realcli.missing_reason(a.name)
            ),
        )
        for a in AGENTS
    ]
)
def agent(request: pytest.FixtureRequest) -> Agent:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def fake() -> Iterator[FakeChat]:
    with FakeChat() as srv:
        yield srv


@pytest.fixture
def daemon(tmp_path: Path, agent: Agent, fake: FakeChat) -> Iterator[DaemonProcess]:
    binary = realcli_session.binary_or_skip(agent.name)
    env = agent.env(tmp_path / "cli", fake.base_url)
    config = realcli_session.daemon_config(agent.name, binary, env)
    yield from running(DaemonProcess(tmp_path / "home", config=config, env=daemon_env(env)))


def test_a_phone_allows_a_shell_command(
    browser: Browser, agent: Agent, daemon: DaemonProcess, fake: FakeChat, project: Path
) -> None:
    echo = f"listed-by-{agent.name}"
    fake.rescript(
        agent.shell(echo),
        Reply(
            text="The project has **README.md** and **notes.txt**.",
            thinking="The user wants the files listed.",
            when=after_tool("WEB-1"),
        ),
    )
    p = browser.page(*PHONE, mobile=True)
    try:
        login(p, daemon)
        option = f"#ns-agent option[value={agent.name}]:not([disabled])"
        p.wait(option, state="attached", timeout_ms=30_000)
        p.eval("window.agentBridge.app.showNewSession()")
        p.select("#ns-agent", agent.name)
        p.fill("#ns-cwd", str(project))
        p.click("#new-session button[type=submit]")
        p.wait(".session textarea", timeout_ms=60_000)  # the agent starts with the session
        send(p, "WEB-1 which files are in this project?")
        p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=60_000)
        assert agent.asked in p.text(".blk-permission")
        p.eval("document.querySelector('.blk-permission').scrollIntoView({block: 'center'})")
        p.screenshot(IMAGES / f"{agent.name}-phone-permission.png")
        p.click(".blk-permission .perm-opt.kind-allow_once")
        p.wait(".session .blk-end", timeout_ms=60_000)
        p.wait_for(f"{TRANSCRIPT}.includes('{echo}')", timeout_ms=60_000)
        p.wait_for(f"{TRANSCRIPT}.includes('The project has')", timeout_ms=60_000)
        assert echo in " ".join(fake.agent_requests[-1].view.tool_results)
        p.eval("document.querySelectorAll('.toast').forEach((t) => t.click())")
        p.screenshot(IMAGES / f"{agent.name}-phone-answered.png")
        assert page_errors(p) == [], page_errors(p)
    finally:
        p.close()
