"""uvicorn's HTTP/1.1 protocol (h11) with a deadline for each request to arrive whole.

uvicorn bounds the idle time between requests (timeout_keep_alive) but not the time a request
takes to arrive: its keep-alive timer is armed only after a response and stopped by every byte
received, so a client that sends half a request (headers or body) holds its connection for
good (300 such connections were all held for 60 s). An ASGI app cannot help with headers: it
is called once they are whole. Here a timer starts when a connection opens and when the next
request on it begins to arrive, and stops once the request has arrived whole; if it fires
first, the client gets a 408 in the OpenAI error shape (unless a response has started) and
the connection is closed. A generation that outlasts it is unaffected: its request arrived.
"""

from __future__ import annotations

import asyncio
import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from edgespec.server.api import ApiError

log = logging.getLogger(__name__)

# the client's states once its request has arrived whole (or nothing more will come)
ARRIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR, h11.SWITCHED_PROTOCOL)


def request_deadline_protocol(seconds: float) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn.Config(http=...): requests get `seconds` to arrive."""
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"request_timeout_s": seconds})


class DeadlineH11Protocol(H11Protocol):
    request_timeout_s: float = 30.0
    deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.start_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_deadline()
        super().connection_lost(exc)

    def follow(self) -> None:
        """Stop the timer once the request has arrived (or between requests, where uvicorn's
        keep-alive timeout holds); start it when the next one begins to arrive."""
        their = self.conn.their_state
        if their in ARRIVED or (their is h11.IDLE and not self.conn.trailing_data[0]):
            self.stop_deadline()
        elif self.deadline is None:
            self.start_deadline()

    def start_deadline(self) -> None:
        self.stop_deadline()
        self.deadline = self.loop.call_later(self.request_timeout_s, self.expire)

    def stop_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def expire(self) -> None:
        self.deadline = None
        if self.transport.is_closing() or self.conn.their_state in ARRIVED:
            return
        log.info("closing a connection whose request took over %g s", self.request_timeout_s)
        cycle = self.cycle if self.cycle is not None and not self.cycle.response_complete else None
        if cycle is None or not cycle.response_started:
            self.send_timeout()
        if cycle is not None:  # the app waits for the body: to it the client is gone
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def send_timeout(self) -> None:
        e = ApiError(
            408,
            f"the request did not arrive whole within {self.request_timeout_s:g} s; send it "
            "at once (the server's --request-timeout sets this bound)",
            code="request_timeout",
        )
        body = json.dumps(e.body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        events = [
            h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ]
        try:
            data = [self.conn.send(event) for event in events]
        except h11.LocalProtocolError:  # a response was already sent: nothing more to say
            return
        self.transport.write(b"".join(d or b"" for d in data))
