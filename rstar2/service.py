"""What rstar2's three HTTP services share (``serve-model``, the sandbox, the viewer), so that
each answers abuse and shutdown the same way.

* **One error shape.** Every error body is ``{"error": {"message", "type", "code"}}`` (the
  OpenAI shape, which serve-model's clients already parse): ``message`` is one line for a
  person, ``type`` a stable word for a program, ``code`` the HTTP status. A route raises
  ``ServiceError(message, status)``; malformed input, unknown routes and unexpected failures
  are answered in the same shape (``guard``), and a refused value is never echoed back (a
  ``NaN`` cannot even be written as JSON).
* **Bounded requests.** A body larger than the service's limit is answered 413 before the
  app sees any of it, and is never held in memory: what arrives past the limit is read and
  dropped (so that the client, still sending, can read the answer) up to ``DISCARD_FACTOR``
  times the limit, or at least ``MIN_DISCARD_BYTES``; a larger body is answered at once and
  its connection closed.
* **A client that stalls is let go.** A connection must deliver a request's headers within
  ``read_timeout_s`` of opening (or of its previous answer), else it is closed; the body must
  then arrive whole within ``read_timeout_s`` more, else it is answered 408 and closed. A
  client that sends nothing, half a header, half a body or a body one byte a second therefore
  holds a connection for a bounded time, not until the process runs out of file handles.
* **A client that leaves stops its work.** Once its body is read, each request's handler runs
  as a task beside a listener for the client's disconnect; a disconnect cancels the handler,
  and the cancellation reaches what it awaits (a queued generation, a queued sandbox call).
* **Shutdown within a bound** (``run_service``). SIGTERM or Ctrl-C stops accepting
  connections, lets the requests in flight finish for ``drain_timeout_s``, then cancels those
  still running and answers each of them 503, and the process exits: every client gets an
  answer, none waits on a server that is going away.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from rstar2.errors import Rstar2Error

ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 408: "request_timeout",
    409: "conflict_error",
    413: "request_too_large", 422: "invalid_request_error", 429: "rate_limit_error",
    500: "server_error", 503: "service_unavailable",
}
ABORT_GRACE_S = 5.0  # after the drain: time for aborted handlers to answer before uvicorn gives up
DISCARD_FACTOR, MIN_DISCARD_BYTES = 4, 16 << 20  # an oversized body read and dropped up to this
READ_TIMEOUT_S = 30.0  # default time a client gets to send a request's headers, then its body

Message = dict
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ServiceError(Rstar2Error):
    """A request refused with ``status`` and a one-line ``message`` (answered in the shared
    error shape; ``headers`` such as ``Retry-After`` go with it)."""

    def __init__(self, message: str, status: int = 400, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def error_body(status: int, message: str) -> dict:
    """The one error shape of the three services."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "error"), "code": status}}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message), status_code=status, headers=headers)


def validation_message(exc: RequestValidationError) -> str:
    """Pydantic's complaints as ``field: problem; ...``, without the refused values."""
    return "; ".join(f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in exc.errors())


class InFlight:
    """The handlers running now, and the drain that ends them at shutdown."""

    def __init__(self) -> None:
        self.handlers: set[asyncio.Task] = set()
        self.aborted: set[asyncio.Task] = set()
        self.draining = False

    def begin_drain(self, timeout_s: float) -> None:
        """Refuse new requests; cancel the handlers still running after ``timeout_s``."""
        self.draining = True
        asyncio.get_running_loop().call_later(timeout_s, self.abort_all)

    def abort_all(self) -> None:
        for handler in list(self.handlers):
            self.aborted.add(handler)
            handler.cancel()


class RequestGuard:
    """ASGI middleware: the body limit and deadline, cancel-on-disconnect and drain of the
    module docstring."""

    def __init__(self, app, max_body_bytes: int | None, in_flight: InFlight, read_timeout_s: float):
        self.app, self.max_body_bytes, self.in_flight = app, max_body_bytes, in_flight
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.in_flight.draining:
            return await send_error(send, 503, "the server is shutting down")
        declared = declared_length(scope)
        if self.oversized(declared) and declared > self.discard_bytes():
            return await send_error(send, 413, self.oversized(declared))
        body, size = bytearray(), 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                return await send_error(send, 408, f"the request body did not arrive within "
                                        f"{self.read_timeout_s:g} s")
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if not self.oversized(size):
                body += chunk
            elif size > self.discard_bytes():
                return await send_error(send, 413, self.oversized(size))
            if not message.get("more_body", False):
                break
        if too_large := self.oversized(max(size, declared or 0)):
            return await send_error(send, 413, too_large)
        await self.handle(scope, Replay(bytes(body), receive), send)

    def oversized(self, size: int | None) -> str | None:
        if self.max_body_bytes is None or size is None or size <= self.max_body_bytes:
            return None
        return f"request body of {size} bytes is over this server's limit of {self.max_body_bytes} bytes"

    def discard_bytes(self) -> int:
        """How much of an oversized body is read and dropped before answering it."""
        return max(DISCARD_FACTOR * self.max_body_bytes, MIN_DISCARD_BYTES)

    async def handle(self, scope: dict, replay: Replay, send: Send) -> None:
        """Run the app on the read request until it answers, its client leaves (cancel it) or
        the drain ends (cancel it and answer 503 if it had not started answering)."""
        started = answered = False

        async def tracked(message: Message) -> None:
            nonlocal started, answered
            started = started or message["type"] == "http.response.start"
            answered = answered or (message["type"] == "http.response.body" and not message.get("more_body"))
            await send(message)

        handler = asyncio.ensure_future(self.app(scope, replay.receive, tracked))
        self.in_flight.handlers.add(handler)
        try:
            await asyncio.wait({handler, replay.disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if not handler.done() and not answered:  # the client went away: stop its work
                handler.cancel()
            await asyncio.wait({handler})
            if handler.cancelled():
                if handler in self.in_flight.aborted and not started:
                    await send_error(send, 503, "the server is shutting down; this request was "
                                     "aborted at the end of its drain period")
                return
            handler.result()  # re-raise what the app raised past its own handlers
        finally:
            if not handler.done():  # we were cancelled ourselves (uvicorn giving up)
                handler.cancel()
            replay.disconnect.cancel()
            self.in_flight.handlers.discard(handler)
            self.in_flight.aborted.discard(handler)


class Replay:
    """The receive channel the app sees: the body read by the guard, then (for whoever asks,
    e.g. a streaming response) the client's disconnect, which ``disconnect`` waits for."""

    def __init__(self, body: bytes, receive: Receive):
        self.body: bytes | None = body
        self.disconnect = asyncio.ensure_future(wait_for_disconnect(receive))

    async def receive(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        return await asyncio.shield(self.disconnect)


async def wait_for_disconnect(receive: Receive) -> Message:
    while (message := await receive())["type"] != "http.disconnect":
        pass
    return message


def declared_length(scope: dict) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def send_error(send: Send, status: int, message: str) -> None:
    body = json.dumps(error_body(status, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def guard(app: FastAPI, *, max_body_bytes: int | None, validation_status: int = 422,
          read_timeout_s: float = READ_TIMEOUT_S) -> FastAPI:
    """Give ``app`` the shared error shape, body limit, read deadlines, cancel-on-disconnect
    and drain (see the module docstring); malformed input is answered ``validation_status``
    (serve-model answers 400 as OpenAI does, the others 422 as FastAPI does)."""
    if not read_timeout_s > 0:
        raise ValueError(f"read_timeout_s must be a positive number of seconds, not {read_timeout_s!r}")
    in_flight = InFlight()
    app.state.in_flight = in_flight
    app.state.read_timeout_s = read_timeout_s
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes, in_flight=in_flight,
                       read_timeout_s=read_timeout_s)

    @app.exception_handler(ServiceError)
    async def refused(_: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc.status, str(exc), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_status, validation_message(exc))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), exc.headers)

    @app.exception_handler(Exception)
    async def failed(_: Request, exc: Exception) -> JSONResponse:
        first_line = next(iter(str(exc).splitlines()), "")
        return error_response(500, f"internal error: {type(exc).__name__}: {first_line}")

    return app


class DrainingServer(uvicorn.Server):
    """uvicorn, whose shutdown first starts the app's drain (``InFlight.begin_drain``)."""

    def __init__(self, config: uvicorn.Config, in_flight: InFlight, drain_timeout_s: float):
        super().__init__(config)
        self.in_flight, self.drain_timeout_s = in_flight, drain_timeout_s

    async def shutdown(self, sockets=None) -> None:
        self.in_flight.begin_drain(self.drain_timeout_s)
        await super().shutdown(sockets)


def header_deadline_protocol(read_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, closing a connection whose next request's headers have not
    arrived ``read_timeout_s`` after it opened or after its previous answer (uvicorn's own
    keep-alive timeout covers only a connection that sends nothing at all after an answer;
    one that sends half a header is otherwise kept for ever)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class HeaderDeadline(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.arm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.arm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
            super().connection_lost(exc)

        def arm_header_deadline(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
            self.header_timer = self.loop.call_later(read_timeout_s, self.headers_overdue, self.cycle)

        def headers_overdue(self, cycle_when_armed) -> None:
            # a request whose headers arrived since has started a new cycle; so has a
            # pipelined one, which runs while ``cycle_when_armed`` was still answering
            idle = cycle_when_armed is None or cycle_when_armed.response_complete
            if self.cycle is cycle_when_armed and idle and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline


def run_service(app: FastAPI, host: str, port: int, drain_timeout_s: float) -> None:
    """Serve a ``guard``-ed app until SIGTERM or Ctrl-C, then drain and exit (module docstring)."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            http=header_deadline_protocol(app.state.read_timeout_s),
                            timeout_graceful_shutdown=drain_timeout_s + ABORT_GRACE_S)
    try:
        DrainingServer(config, app.state.in_flight, drain_timeout_s).run()
    except KeyboardInterrupt:
        pass
