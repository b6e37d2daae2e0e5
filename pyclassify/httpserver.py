"""A small HTTP/1.1 server with every resource bounded: the daemon's metrics and probes, and the
admission webhook.

One thread runs an asyncio event loop that holds every connection (an idle one costs a socket
and a few kilobytes, never a thread); requests are answered by a fixed pool of worker threads.
What a client can take is bounded whatever it sends, or does not send:

- connections: at most ``max_connections`` open at once; past it the connection idle the
  longest (waiting for a request, or for its TLS handshake) is closed to make room (so a crowd
  of idle connections cannot keep a probe out), and with none idle the new one is closed at
  once (``stats["evicted"]``, ``stats["refused"]``);
- time: a request's head and body must arrive within ``request_timeout`` seconds of its first
  byte (a client trickling one byte at a time is cut at the deadline), a TLS handshake within
  the same, an answer must be taken within it, and a connection idle between requests is closed
  after ``idle_timeout``;
- memory: a head of at most ``MAX_HEAD`` bytes, a body of at most ``max_body`` (refused with 413
  from its Content-Length, before any of it is read), and at most ``max_buffered`` bytes of
  bodies held at once across every connection (a body that would pass it gets 503 at once);
- threads: ``workers`` handler threads, whatever the number of connections.

TLS: ``tls`` returns the context for each new connection, so a certificate reloaded from disk
serves every connection made after it (``pyclassify.admission.webhook``).

Requests carry ``Content-Length`` or no body (a chunked body is refused with 411, as the API
server sends AdmissionReviews with a length); no pipelining (one request at a time per
connection, as HTTP/1.1 clients send them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

#: The largest request head (request line and headers).
MAX_HEAD = 16 * 1024
#: After a refusal that closes the connection, what the client goes on sending is read and
#: dropped (never kept) for this long, up to this much, so that it reads the answer instead of
#: a reset connection.
LINGER_SECONDS = 1.0
DRAIN_LIMIT = 64 * 1024 * 1024


@dataclass
class Request:
    method: str
    path: str  # without the query
    query: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    client: Any


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False


def text_error(status: int, message: str) -> Response:
    return Response(status, f"{message}\n".encode())


class BoundedServer:
    def __init__(
        self,
        address: tuple[str, int],
        handler: Callable[[Request], Response],
        *,
        tls: Callable[[], ssl.SSLContext] | None = None,
        workers: int = 4,
        max_connections: int = 256,
        request_timeout: float = 10.0,
        idle_timeout: float = 30.0,
        max_body: int = 64 * 1024,
        max_buffered: int | None = None,
        error: Callable[[int, str], Response] = text_error,
        name: str = "pyclassify-http",
        server_header: str = "pyclassify",
    ) -> None:
        """``handler(request) -> Response`` runs on a worker thread; ``error(status, message)``
        renders the server's own refusals (411, 413, 431, 503, 400)."""
        self.handler, self.tls, self.error = handler, tls, error
        self.max_connections, self.request_timeout, self.idle_timeout = max_connections, request_timeout, idle_timeout
        self.max_body = max_body
        self.max_buffered = max_buffered if max_buffered is not None else max(max_body, 16 * max_body)
        self.name, self.server_header = name, server_header
        self.stats = {
            "connections": 0,
            "open": 0,
            "refused": 0,
            "evicted": 0,
            "timeouts": 0,
            "too_large": 0,
            "busy": 0,
            "bad_requests": 0,
            "tls_errors": 0,
            "requests": 0,
        }
        self._buffered = 0
        self._workers = workers
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-worker")
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        #: Connections waiting for a request, the longest waiting first.
        self._idle: dict[asyncio.StreamWriter, None] = {}
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind(address)
            self._socket.listen(128)
        except BaseException:
            self._socket.close()
            self._loop.close()
            self._pool.shutdown(wait=False)
            raise
        self.server_address: tuple[str, int] = self._socket.getsockname()[:2]
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle ---

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._connection, sock=self._socket, limit=MAX_HEAD)
            )
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()
        # Every worker started now (the pool starts them one busy moment at a time): the
        # server's threads are as many from the start as ever after.
        started = threading.Barrier(self._workers + 1)
        for _ in range(self._workers):
            self._pool.submit(started.wait)
        started.wait()

    def stop(self) -> None:
        """Stops listening, cuts every connection and waits for the loop's thread."""
        if self._thread is not None and self._loop.is_running():

            async def close() -> None:
                if self._server is not None:
                    self._server.close()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self._loop.stop()

            asyncio.run_coroutine_threadsafe(close(), self._loop)
            self._thread.join(timeout=5)
        else:
            self._socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- one connection ---

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        if len(self._writers) >= self.max_connections:
            if not self._idle:
                self.stats["refused"] += 1
                writer.transport.abort()
                return
            oldest = next(iter(self._idle))
            del self._idle[oldest]
            self._writers.discard(oldest)
            oldest.transport.abort()
            self.stats["evicted"] += 1
        self._writers.add(writer)
        self.stats["open"] = len(self._writers)
        client = writer.get_extra_info("peername")
        try:
            if self.tls is not None:
                # waiting for a handshake is as idle as waiting for a request: closed first for room
                self._idle[writer] = None
                plain = writer.transport
                try:
                    await writer.start_tls(self.tls(), ssl_handshake_timeout=self.request_timeout)
                except (TimeoutError, ssl.SSLError, OSError, ConnectionError):
                    self.stats["tls_errors"] += 1
                    return
                finally:
                    self._idle.pop(writer, None)
                if writer.transport is None:
                    # closed mid-handshake (to make room): asyncio hands back no transport; the
                    # writer keeps the closed one, so that closing it again is harmless
                    writer._transport = plain
                    return
            while True:
                self._idle[writer] = None
                try:
                    first = await asyncio.wait_for(reader.read(1), self.idle_timeout)
                except TimeoutError:
                    return  # idle between requests
                finally:
                    self._idle.pop(writer, None)
                if not first:
                    return
                try:
                    close = await asyncio.wait_for(self._request(first, reader, writer, client), self.request_timeout)
                except TimeoutError:
                    self.stats["timeouts"] += 1
                    return
                if close:
                    return
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            self._idle.pop(writer, None)
            self.stats["open"] = len(self._writers)
            writer.close()

    async def _request(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: Any
    ) -> bool:
        """Reads, answers and says whether to close. Runs under the request deadline."""
        try:
            head = first + await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._refuse(writer, 431, "request head too large")
            return True
        except asyncio.IncompleteReadError:
            return True
        if len(head) > MAX_HEAD:
            await self._refuse(writer, 431, "request head too large")
            return True
        try:
            method, target, version, headers = _parse_head(head)
        except ValueError as e:
            self.stats["bad_requests"] += 1
            await self._refuse(writer, 400, str(e))
            return True
        path, _, query = target.partition("?")
        if headers.get("transfer-encoding"):
            await self._refuse(writer, 411, "a request body with Content-Length is required", reader, DRAIN_LIMIT)
            return True
        raw_length = headers.get("content-length", "0")
        if not raw_length.isdigit():
            self.stats["bad_requests"] += 1
            await self._refuse(
                writer,
                400 if raw_length else 411,
                "a request body with Content-Length is required",
                reader,
                DRAIN_LIMIT,
            )
            return True
        length = int(raw_length)
        if length > self.max_body:
            self.stats["too_large"] += 1
            await self._refuse(
                writer,
                413,
                f"request body of {length} bytes is over the limit of {self.max_body} bytes",
                reader,
                length,
            )
            return True
        if self._buffered + length > self.max_buffered:
            self.stats["busy"] += 1
            await self._refuse(writer, 503, "too many request bodies being received at once: try again", reader, length)
            return True
        self._buffered += length
        try:
            body = await reader.readexactly(length) if length else b""
        finally:
            self._buffered -= length
        self.stats["requests"] += 1
        request = Request(method, path, query, headers, body, client)
        try:
            response = await self._loop.run_in_executor(self._pool, self.handler, request)
        except Exception as e:  # noqa: BLE001 - a handler's bug answers 500, the server goes on
            response = self.error(500, f"internal error: {type(e).__name__}")
        close = response.close or version == "HTTP/1.0" or headers.get("connection", "").lower() == "close"
        await self._send(writer, response, close)
        return close

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        reader: asyncio.StreamReader | None = None,
        pending: int = 0,
    ) -> None:
        """Answers and closes; what the client still sends (up to ``pending`` bytes, the
        request's own deadline and LINGER_SECONDS between reads) is read and dropped."""
        await self._send(writer, self.error(status, message), True)
        left = min(pending, DRAIN_LIMIT)
        while reader is not None and left > 0:
            try:
                chunk = await asyncio.wait_for(reader.read(min(left, 1 << 16)), LINGER_SECONDS)
            except (TimeoutError, OSError, ConnectionError):
                return
            if not chunk:
                return
            left -= len(chunk)

    async def _send(self, writer: asyncio.StreamWriter, response: Response, close: bool) -> None:
        reason = HTTPStatus(response.status).phrase if response.status in HTTPStatus._value2member_map_ else ""
        lines = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Server: {self.server_header}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
        ]
        lines += [f"{k}: {v}" for k, v in response.headers]
        if close:
            lines.append("Connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body)
        await writer.drain()


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise ValueError("undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise ValueError("malformed request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError("malformed header line")
        key = name.lower()
        if key == "content-length" and key in headers and headers[key] != value.strip():
            raise ValueError("conflicting Content-Length headers")
        headers[key] = value.strip()
    return parts[0], parts[1], parts[2], headers
