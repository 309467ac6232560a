"""HTTP-level defences: request bodies read within a limit, and malformed HTTP answered in JSON.

A body is read chunk by chunk and refused as soon as it passes its route's limit (a declared
`Content-Length` over it is refused before any byte is read), so a caller cannot make the server
hold more than the limit for one request.

uvicorn answers a request its parser rejects (an unknown method such as `FOO`, a broken request line or
header) with a bare `text/plain` 400 before any route sees it. Everything the extender says is JSON
with an `Error` naming the problem, so these answers are too; the connection still closes, as HTTP
requires after a message that could not be framed.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from config.untrusted import whole_number


class BodyTooLargeError(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes")
        self.limit = limit


async def read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    declared = whole_number(length) if length is not None else None
    if declared is not None and declared > limit:
        raise BodyTooLargeError(limit)
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(limit)
        chunks.append(chunk)
    return b"".join(chunks)


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
