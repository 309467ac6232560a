"""uvicorn's HTTP protocol, answering malformed HTTP in JSON.

uvicorn answers a request its parser rejects (an unknown method such as `FOO`, a broken request line or
header) with a bare `text/plain` 400 before any route sees it. Everything the extender says is JSON
with an `Error` naming the problem, so these answers are too; the connection still closes, as HTTP
requires after a message that could not be framed.
"""

from __future__ import annotations

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def _bad_request(msg: str) -> bytes:
    body = orjson.dumps({"Error": f"topogang: malformed HTTP request: {msg}"})
    head = (
        b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
    )
    return head + body


class JSONErrorsHttpTools(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        self.transport.write(_bad_request(msg))
        self.transport.close()
