"""The run explorer (``/ui/``): placeholder until the pages land."""

from __future__ import annotations

from aiohttp import web

from ledger.log_reader import LogReader


def add_explorer(app: web.Application, reader: LogReader) -> None:
    async def index(request: web.Request) -> web.Response:
        return web.Response(text="explorer", content_type="text/html")

    app.router.add_get("/ui/", index)
