"""Locate the pinned agent CLIs (tests/clis) and build isolated configs pointing at fake servers.

Binaries come from ``tests/clis/node_modules`` (``tests/clis/install.sh``) and Hermes from
``tests/clis/.hermes-venv``; set ``AGENT_BRIDGE_TEST_CLIS`` to use another such folder.
Every ``*_bin()`` returns an absolute path or None when the CLI is not installed.

Every ``*_env(tmp, base_url, ...)`` writes the CLI's config files under ``tmp`` (a fresh ``HOME``
and XDG dirs) and returns a complete environment (not merged with ``os.environ``) for
``subprocess``. Pass the matching fake server's ``base_url`` (``FakeAnthropic`` for Claude,
``FakeResponses`` for Codex, ``FakeGemini`` for Gemini, ``FakeChat`` for the others); a bare
``http://127.0.0.1:PORT`` also works. The default model name is :data:`MODEL`.

Example::

    with FakeAnthropic() as srv:
        srv.script(Reply(text="hi there"))
        env = claude_env(tmp_path, srv.base_url, cwd=work)
        subprocess.run([claude_bin(), "-p", "hello"], env=env, cwd=work, ...)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.adapters.claude import PRINT_FLAGS

HERE = Path(__file__).resolve().parent
CLIS_DIR = Path(os.environ.get("AGENT_BRIDGE_TEST_CLIS") or HERE / "clis").resolve()
NODE_MODULES = CLIS_DIR / "node_modules"
HERMES_VENV = CLIS_DIR / ".hermes-venv"
#: Kimi Code (PyPI kimi-cli, Python >= 3.12): installed only where such a Python was found
KIMI_VENV = CLIS_DIR / ".kimi-venv"
#: what tests/clis/install.sh wrote when it found no Python >= 3.12 for Kimi Code
KIMI_SKIPPED = CLIS_DIR / ".kimi-skipped"

#: model id every config below declares
MODEL = "fake-model"
#: Gemini needs a real-looking model name (``-m``), or its router makes extra calls
GEMINI_MODEL = "gemini-2.5-flash"
#: the model the Codex tests configure (a name Codex knows, so it sends no extra lookups)
CODEX_MODEL = "gpt-5.5"
#: dummy API key (Claude approves custom keys by their last 20 characters)
API_KEY = "sk-fake-agent-bridge-test-key-0123456789"

CLI_NAMES = (
    "claude",
    "codex",
    "gemini",
    "opencode",
    "kilo",
    "pi",
    "qwen",
    "droid",
    "hermes",
    "kimi",
    "copilot",
)

VERSIONS = {
    "claude": "2.1.332",
    "codex": "0.171.0",
    "gemini": "0.61.0",
    "opencode": "1.18.33",
    "kilo": "7.7.7",
    "pi": "0.73.1",
    "qwen": "0.24.4",
    "droid": "0.225.2",
    "hermes": "0.19.0",
    "kimi": "1.51.0",
    "copilot": "1.0.102",
}


# -- binaries ---------------------------------------------------------------------------------


def _exe(path: Path) -> str | None:
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def node_bin() -> str | None:
    """Absolute path of ``node`` (needed on PATH by the JS CLIs)."""
    found = shutil.which("node")
    return str(Path(found).resolve()) if found else None


def claude_bin() -> str | None:
    """Claude Code's native binary (the npm wrapper's postinstall may not have run)."""
    return _exe(NODE_MODULES / "@anthropic-ai/claude-code-linux-x64/claude")


def codex_bin() -> str | None:
    """Codex's native (musl) binary."""
    return _exe(NODE_MODULES / "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex")


def gemini_bin() -> str | None:
    """Gemini CLI's JS entry (``#!/usr/bin/env node``)."""
    return _exe(NODE_MODULES / "@google/gemini-cli/bundle/gemini.js")


def opencode_bin() -> str | None:
    """OpenCode's native binary."""
    return _exe(NODE_MODULES / "opencode-linux-x64/bin/opencode")


def kilo_bin() -> str | None:
    """Kilo CLI's native binary."""
    return _exe(NODE_MODULES / "@kilocode/cli-linux-x64/bin/kilo")


def pi_bin() -> str | None:
    """Pi's JS entry (``#!/usr/bin/env node``)."""
    return _exe(NODE_MODULES / "@mariozechner/pi-coding-agent/dist/cli.js")


def qwen_bin() -> str | None:
    """Qwen Code's JS entry (``#!/usr/bin/env node``)."""
    return _exe(NODE_MODULES / "@qwen-code/qwen-code/cli-entry.js")


def droid_bin() -> str | None:
    """Factory Droid's native binary (``@factory/cli-linux-x64``)."""
    return _exe(NODE_MODULES / "@factory/cli-linux-x64/bin/droid")


def hermes_bin() -> str | None:
    """Hermes' console script in its own venv (``hermes chat``, ``hermes acp``)."""
    return _exe(HERMES_VENV / "bin/hermes")


def kimi_bin() -> str | None:
    """Kimi Code's console script in its own Python >= 3.12 venv (``kimi acp``)."""
    return _exe(KIMI_VENV / "bin/kimi")


def copilot_bin() -> str | None:
    """GitHub Copilot CLI's native binary (``@github/copilot-linux-x64``)."""
    return _exe(NODE_MODULES / "@github/copilot-linux-x64/copilot")


BINS: dict[str, Callable[[], str | None]] = {
    "claude": claude_bin,
    "codex": codex_bin,
    "gemini": gemini_bin,
    "opencode": opencode_bin,
    "kilo": kilo_bin,
    "pi": pi_bin,
    "qwen": qwen_bin,
    "droid": droid_bin,
    "hermes": hermes_bin,
    "kimi": kimi_bin,
    "copilot": copilot_bin,
}


def cli_bin(name: str) -> str | None:
    """The executable of CLI ``name`` (one of :data:`CLI_NAMES`), or None."""
    return BINS[name]()


def missing_reason(name: str) -> str:
    """A pytest skip reason for a CLI that is not installed."""
    if name == "kimi" and KIMI_SKIPPED.is_file():
        return f"kimi CLI not installed: {KIMI_SKIPPED.read_text().strip()}"
    return f"{name} CLI not installed: run tests/clis/install.sh (looked in {CLIS_DIR})"


# -- environments -----------------------------------------------------------------------------


def _path_env() -> str:
    dirs: list[str] = []
    node = node_bin()
    if node:
        dirs.append(str(Path(node).parent))
    dirs += ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    return os.pathsep.join(dict.fromkeys(dirs))


def base_env(tmp: Path | str) -> dict[str, str]:
    """A clean environment with ``HOME`` and every XDG dir under ``tmp`` (created)."""
    home = Path(tmp).resolve() / "home"
    xdg = {
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local/share",
        "XDG_STATE_HOME": home / ".local/state",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_RUNTIME_DIR": home / ".run",
    }
    for d in (home, *xdg.values()):
        d.mkdir(parents=True, exist_ok=True)
    xdg["XDG_RUNTIME_DIR"].chmod(0o700)
    env = {
        "HOME": str(home),
        "USER": os.environ.get("USER", "root"),
        "LOGNAME": os.environ.get("LOGNAME", os.environ.get("USER", "root")),
        "PATH": _path_env(),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "xterm-256color",
        "NO_COLOR": "1",
        "SHELL": "/bin/bash",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "NO_UPDATE_NOTIFIER": "1",
        "DO_NOT_TRACK": "1",
    }
    env.update({k: str(v) for k, v in xdg.items()})
    return env


def home_of(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"])


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _origin(base_url: str) -> str:
    """``http://host:port`` from a base URL with or without a ``/v1``-style suffix."""
    url = base_url.rstrip("/")
    for suffix in ("/v1beta", "/v1"):
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def _v1(base_url: str) -> str:
    return _origin(base_url) + "/v1"


def _cwd(tmp: Path | str, cwd: Path | str | None) -> Path:
    path = Path(cwd) if cwd is not None else Path(tmp) / "work"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def claude_env(
    tmp: Path | str,
    base_url: str,
    *,
    cwd: Path | str | None = None,
    api_key: str = API_KEY,
) -> dict[str, str]:
    """Claude Code against ``FakeAnthropic``.

    Writes ``~/.claude.json`` (and ``$CLAUDE_CONFIG_DIR/.claude.json``) with onboarding done,
    ``cwd`` trusted and the key approved, so the interactive TUI also starts. Transcripts go to
    ``$CLAUDE_CONFIG_DIR/projects/<slug>/<session>.jsonl`` with ``CLAUDE_CONFIG_DIR=~/.claude``
    (the default layout); the live registry to ``~/.claude/sessions/<pid>.json``.
    """
    env = base_env(tmp)
    home = home_of(env)
    config_dir = home / ".claude"
    config_dir.mkdir(parents=True, exist_ok=True)
    trusted = str(_cwd(tmp, cwd))
    state = {
        "hasCompletedOnboarding": True,
        "numStartups": 1,
        "theme": "dark",
        "projects": {
            trusted: {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
        },
        "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
    }
    _write_json(home / ".claude.json", state)
    _write_json(config_dir / ".claude.json", state)
    env.update(
        {
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "ANTHROPIC_BASE_URL": _origin(base_url),
            "ANTHROPIC_API_KEY": api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
    )
    return env


def claude_trust(env: Mapping[str, str], cwd: Path | str) -> None:
    """Mark another ``cwd`` as trusted in the config written by :func:`claude_env`."""
    for path in (home_of(env) / ".claude.json", Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json"):
        state = json.loads(path.read_text())
        state["projects"][str(Path(cwd).resolve())] = {"hasTrustDialogAccepted": True}
        _write_json(path, state)


def codex_env(
    tmp: Path | str, base_url: str, *, model: str = MODEL, extra_toml: str = ""
) -> dict[str, str]:
    """Codex against ``FakeResponses``: ``$CODEX_HOME/config.toml`` with a ``fake`` provider.

    Rollouts land in ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``. Run ``codex exec``
    with ``--skip-git-repo-check`` outside a git repo and stdin ``/dev/null``.
    """
    env = base_env(tmp)
    codex_home = home_of(env) / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "fake"\n'
        "\n"
        "[model_providers.fake]\n"
        'name = "fake"\n'
        f'base_url = "{_v1(base_url)}"\n'
        'env_key = "FAKE_API_KEY"\n'
        'wire_api = "responses"\n'
        "supports_websockets = false\n"
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n" + (f"\n{extra_toml}\n" if extra_toml else "")
    )
    env.update({"CODEX_HOME": str(codex_home), "FAKE_API_KEY": API_KEY})
    return env


def gemini_env(tmp: Path | str, base_url: str) -> dict[str, str]:
    """Gemini CLI against ``FakeGemini``; always pass ``-m`` (:data:`GEMINI_MODEL`).

    Chats land in ``~/.gemini/tmp/<slug>/chats/session-*.jsonl``.
    """
    env = base_env(tmp)
    home = home_of(env)
    _write_json(
        home / ".gemini/settings.json",
        {"security": {"auth": {"selectedType": "gemini-api-key"}}},
    )
    env.update(
        {
            "GEMINI_CLI_HOME": str(home),
            "GOOGLE_GEMINI_BASE_URL": _origin(base_url),
            "GEMINI_API_KEY": API_KEY,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
    )
    return env


def qwen_env(tmp: Path | str, base_url: str, *, model: str = MODEL) -> dict[str, str]:
    """Qwen Code against ``FakeChat`` (``OPENAI_*`` env; background extras disabled)."""
    env = base_env(tmp)
    _write_json(
        home_of(env) / ".qwen/settings.json",
        {"memory": {"enableManagedAutoMemory": False}, "ui": {"enableFollowupSuggestions": False}},
    )
    env.update({"OPENAI_BASE_URL": _v1(base_url), "OPENAI_API_KEY": API_KEY, "OPENAI_MODEL": model})
    return env


def _opencode_config(base_url: str, model: str, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": _v1(base_url), "apiKey": API_KEY},
                "models": {model: {"name": "Fake Model"}},
            }
        },
        "model": f"fake/{model}",
        "small_model": f"fake/{model}",
        "autoupdate": False,
        "share": "disabled",
    }
    config.update(extra or {})
    return config


def opencode_env(
    tmp: Path | str,
    base_url: str,
    *,
    model: str = MODEL,
    config: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """OpenCode against ``FakeChat``: ``$XDG_CONFIG_HOME/opencode/opencode.json``.

    Model id for ``-m``: ``fake/<model>``. ``config`` entries are merged into the top level
    (e.g. ``{"permission": {"bash": "ask"}}``). Storage: ``$XDG_DATA_HOME/opencode/opencode.db``.
    """
    env = base_env(tmp)
    _write_json(
        Path(env["XDG_CONFIG_HOME"]) / "opencode/opencode.json",
        _opencode_config(base_url, model, config),
    )
    env.update(
        {
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        }
    )
    return env


def kilo_env(
    tmp: Path | str,
    base_url: str,
    *,
    model: str = MODEL,
    config: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Kilo CLI against ``FakeChat``: ``$XDG_CONFIG_HOME/kilo/kilo.json`` (OpenCode schema).

    Kilo auto-rejects most bash commands in ``run`` unless ``--auto`` or
    ``config={"permission": {"bash": "allow"}}``. Storage: ``$XDG_DATA_HOME/kilo/kilo.db``.
    """
    env = base_env(tmp)
    cfg = _opencode_config(base_url, model, config)
    cfg.pop("$schema")
    _write_json(Path(env["XDG_CONFIG_HOME"]) / "kilo/kilo.json", cfg)
    env.update(
        {
            "KILO_DISABLE_MODELS_FETCH": "1",
            "KILO_DISABLE_AUTOUPDATE": "1",
            "KILO_TELEMETRY_LEVEL": "off",
            "KILO_DISABLE_CODEBASE_INDEXING": "1",
            "KILO_DISABLE_DEFAULT_PLUGINS": "1",
            "KILO_DISABLE_LSP_DOWNLOAD": "1",
            "KILO_DISABLE_CLAUDE_CODE": "1",
            "KILO_DISABLE_SHARE": "1",
            "KILO_DISABLE_SESSION_INGEST": "1",
            "KILO_SESSION_RETRY_LIMIT": "1",
        }
    )
    return env


def pi_env(tmp: Path | str, base_url: str, *, model: str = MODEL) -> dict[str, str]:
    """Pi against ``FakeChat``: ``$PI_CODING_AGENT_DIR/models.json`` with a ``fake`` provider.

    Run with ``--provider fake --model <model>``. Sessions:
    ``~/.pi/agent/sessions/--<cwd with / → ->--/<timestamp>_<uuid>.jsonl``.
    """
    env = base_env(tmp)
    agent_dir = home_of(env) / ".pi/agent"
    _write_json(
        agent_dir / "models.json",
        {
            "providers": {
                "fake": {
                    "baseUrl": _v1(base_url),
                    "api": "openai-completions",
                    "apiKey": API_KEY,
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                    "models": [{"id": model, "contextWindow": 128000, "maxTokens": 8192}],
                }
            }
        },
    )
    env["PI_CODING_AGENT_DIR"] = str(agent_dir)
    return env


def hermes_env(tmp: Path | str, base_url: str, *, model: str = MODEL) -> dict[str, str]:
    """Hermes against ``FakeChat``: ``$HERMES_HOME/config.yaml`` (custom provider).

    Storage: ``$HERMES_HOME/state.db``.
    """
    env = base_env(tmp)
    hermes_home = home_of(env) / ".hermes"
    hermes_home.mkdir(parents=True, exist_ok=True)
    (hermes_home / "config.yaml").write_text(
        "model:\n"
        "  provider: custom\n"
        f'  base_url: "{_v1(base_url)}"\n'
        f"  default: {model}\n"
        f"  api_key: {API_KEY}\n"
        "security:\n"
        "  tirith_enabled: false\n"
    )
    env["HERMES_HOME"] = str(hermes_home)
    return env


def droid_env(tmp: Path | str, base_url: str, *, model: str = MODEL) -> dict[str, str]:
    """Droid against ``FakeChat``: ``~/.factory/settings.json`` ``customModels``.

    Run with ``-m custom:<model>``. Sessions: ``~/.factory/sessions/-<cwd with / → ->/*.jsonl``.
    """
    env = base_env(tmp)
    _write_json(
        home_of(env) / ".factory/settings.json",
        {
            "customModels": [
                {
                    "model": model,
                    "displayName": "Fake",
                    "baseUrl": _v1(base_url),
                    "apiKey": API_KEY,
                    "provider": "generic-chat-completion-api",
                    "maxOutputTokens": 8192,
                }
            ]
        },
    )
    env.update({"FACTORY_DISABLE_KEYRING": "1", "FACTORY_DROID_AUTO_UPDATE_ENABLED": "false"})
    return env


def kimi_env(tmp: Path | str, base_url: str, *, model: str = MODEL) -> dict[str, str]:
    """Kimi Code against ``FakeChat``: ``$KIMI_SHARE_DIR/config.toml`` with a provider of type
    ``kimi`` (Moonshot's OpenAI-compatible chat API) and a placeholder login.

    Its ACP server refuses sessions until ``kimi login`` stored a token, whatever the provider,
    so ``credentials/kimi-code.json`` holds one that never expires (nothing calls Moonshot with
    it: the provider has its own key). Sessions: ``$KIMI_SHARE_DIR/sessions/``.
    """
    env = base_env(tmp)
    share = home_of(env) / ".kimi"
    (share / "credentials").mkdir(parents=True, exist_ok=True)
    (share / "config.toml").write_text(
        'default_model = "fake"\n'
        "[providers.fake]\n"
        'type = "kimi"\n'
        f'base_url = "{_v1(base_url)}"\n'
        f'api_key = "{API_KEY}"\n'
        "[models.fake]\n"
        'provider = "fake"\n'
        f'model = "{model}"\n'
        "max_context_size = 128000\n"
        "[loop_control]\n"
        "max_retries_per_step = 1\n"
    )
    _write_json(
        share / "credentials/kimi-code.json",
        {
            "access_token": "placeholder-login",
            "refresh_token": "placeholder-refresh",
            "expires_at": 4102444800.0,
            "scope": "kimi-code",
            "token_type": "Bearer",
        },
    )
    env.update({"KIMI_SHARE_DIR": str(share), "KIMI_CLI_NO_AUTO_UPDATE": "1"})
    return env


def copilot_env(tmp: Path | str, base_url: str) -> dict[str, str]:
    """Copilot CLI against ``FakeChat``, offline: its own provider (``COPILOT_PROVIDER_*``) and
    ``COPILOT_OFFLINE`` (no GitHub login, telemetry, web tools or update checks).

    No model is set here: run it with ``--model`` (:data:`MODEL`), as the adapter does.
    Sessions: ``$COPILOT_HOME/session-state/<id>/events.jsonl`` (``~/.copilot``).
    """
    env = base_env(tmp)
    env.update(
        {
            "COPILOT_HOME": str(home_of(env) / ".copilot"),
            "COPILOT_OFFLINE": "true",
            "COPILOT_AUTO_UPDATE": "false",
            "COPILOT_PROVIDER_TYPE": "openai",
            "COPILOT_PROVIDER_BASE_URL": _v1(base_url),
            "COPILOT_PROVIDER_API_KEY": API_KEY,
        }
    )
    return env


ENVS: dict[str, Callable[..., dict[str, str]]] = {
    "claude": claude_env,
    "codex": codex_env,
    "gemini": gemini_env,
    "opencode": opencode_env,
    "kilo": kilo_env,
    "pi": pi_env,
    "qwen": qwen_env,
    "droid": droid_env,
    "hermes": hermes_env,
    "kimi": kimi_env,
    "copilot": copilot_env,
}


def claude_print_argv(binary: str) -> list[str]:
    """``binary -p`` as the Claude adapter runs it, on the model the fake server answers as."""
    return [binary, *PRINT_FLAGS, "--model", "claude-sonnet-4-5"]


# -- running ----------------------------------------------------------------------------------


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | str,
    input: str | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run a CLI to completion (stdin ``/dev/null`` unless ``input`` is given)."""
    return subprocess.run(
        list(argv),
        env=dict(env),
        cwd=str(cwd),
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def jsonl(text: str) -> list[Any]:
    """Parse the JSON lines of ``text``, skipping lines that are not JSON."""
    out: list[Any] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
