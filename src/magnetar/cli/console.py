"""``magnetar console --admin-url URL``: the console's pages (``/console/``) served beside a
cluster, by a small aiohttp app whose ``/console/api`` calls go to that admin URL (any broker
of the cluster), with the caller's token. The same module serves them in every broker
(``magnetar.admin.console``); this process only needs to reach the admin URL."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

from aiohttp import web

from magnetar.admin import console

log = logging.getLogger(__name__)


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "console", parents=parents,
        help="serve the web console against a cluster's admin URL",
        description="Serve the console (http://BIND:PORT/console/) for the cluster whose admin "
                    "service is at --admin-url: its pages call that URL through this process "
                    "(with the token the page asks for), so a browser needs to reach only this "
                    "port. Every broker also serves the console itself at /console/.",
        epilog="Example: magnetar console --admin-url http://s1:8080 --port 8090, then open "
               "http://127.0.0.1:8090/console/ (--bind 0.0.0.0 to serve other machines)")
    parser.add_argument("--admin-url", required=True, metavar="URL",
                        help="a broker's admin service (webServiceUrl), e.g. http://broker:8080")
    parser.add_argument("--port", type=int, default=8090,
                        help="port to serve the console on (default 8090; 0 picks a free one)")
    parser.add_argument("--bind", default="127.0.0.1", metavar="ADDRESS",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--ready-file", metavar="PATH",
                        help="once serving, write {\"consoleUrl\", \"pid\"} as JSON to PATH")


def build_app(admin_url: str) -> web.Application:
    """The console app for ``admin_url`` (its API calls forwarded there)."""
    if not admin_url.startswith(("http://", "https://")):
        raise ValueError(f"--admin-url must be an http:// or https:// URL, not {admin_url!r}")
    app = web.Application()
    console.install(app, admin_url.rstrip("/"))

    async def root(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/console/")

    app.router.add_get("/", root)
    return app


async def serve(admin_url: str, bind: str, port: int, ready_file: str | None) -> None:
    runner = web.AppRunner(build_app(admin_url), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, bind, port)
    await site.start()
    actual = int(runner.addresses[-1][1])
    url = f"http://{bind if ':' not in bind else f'[{bind}]'}:{actual}/console/"
    log.warning("console for %s on %s", admin_url, url)
    if ready_file:  # written whole, then renamed: a reader never sees half of it
        tmp = Path(ready_file + ".tmp")
        tmp.write_text(json.dumps({"consoleUrl": url, "pid": os.getpid()}))
        tmp.replace(ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(serve(args.admin_url, args.bind, args.port, args.ready_file))
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    except OSError as exc:
        log.error("cannot serve the console on %s:%s: %s", args.bind, args.port, exc)
        return 1
    return 0
