"""The cluster view: a live, read-only web page of the topology, quotas and gangs, at `/ui`.

    GET /ui                 the page (hand-written HTML/CSS/JS in `static/`, no build step)
    GET /ui/static/{file}   its assets (package data)
    GET /v1/ui/state        the page's one JSON document (`extender.http.ui.state`), polled with
                            ?token=T&layout=L: `{"unchanged": true}` when nothing changed since T,
                            the topology only when L is not the current layout token

Served by the extender itself in every mode (standalone and Kubernetes), next to `/v1/inspect`.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from extender.http import replies, views
from extender.http.snapshot import Snapshots
from extender.http.ui.state import StateView

if TYPE_CHECKING:
    from extender.http.verbs import Scheduler

log = logging.getLogger("topogang.extender")
GZIP_OVER = 4096  # bytes: a 1,000-node document is ~80 kB, ~13 kB gzipped
STATIC = Path(__file__).resolve().parent / "static"
# The page renders names tenants choose (gangs, pods) and the admin's (nodes, VCs), all escaped; the
# policy contains a slip in that escaping: no script but the page's own file, no frame around it.
# Inline style attributes stay allowed (the quota bars set their widths that way).
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class _Assets(StaticFiles):
    """The page's files, with its headers."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(PAGE_HEADERS)
        return response


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return replies.dumps(content)


def ui_routes(scheduler: Scheduler, snapshots: Snapshots | None = None) -> list[BaseRoute]:
    view = StateView()
    snaps = snapshots or Snapshots(scheduler)

    async def state(request: Request) -> Response:
        q = request.query_params
        token, layout = q.get("token"), q.get("layout")
        # built from the readers' copy in a worker thread (`extender.http.snapshot`); an exception
        # there is the app's to answer (`extender.http.app.Guard`)
        full = await snaps.read(
            "ui",
            lambda v: view.document(v.core, views.waiting_gangs(v.waiting), v.now, phases=v.phases),
        )
        if token == full["token"]:
            doc = {"v": full["v"], "token": full["token"], "unchanged": True, "now": full["now"]}
        elif layout == full["layoutToken"]:
            doc = {k: v for k, v in full.items() if k != "layout"}
        else:
            doc = full
        body = replies.dumps(doc)
        headers = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
        if len(body) > GZIP_OVER and "gzip" in request.headers.get("accept-encoding", ""):
            body = gzip.compress(body, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        return Response(body, media_type="application/json", headers=headers)

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache", **PAGE_HEADERS})

    async def slash(request: Request) -> Response:
        return RedirectResponse("/ui", status_code=307)

    return [
        Route("/ui", page, methods=["GET"]),
        Route("/ui/", slash, methods=["GET"]),
        Mount("/ui/static", app=_Assets(directory=STATIC), name="ui-static"),
        Route("/v1/ui/state", state, methods=["GET"]),
    ]
