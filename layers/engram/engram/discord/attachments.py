"""What a message carries besides its text: images described by a vision model, links fetched and their
readable text extracted. Link fetching is hardened against reaching inside the network (SSRF)."""

from __future__ import annotations

import base64
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import httpcore
import httpx
from httpcore import NetworkStream
from httpcore._backends.sync import SyncBackend

from .objects import Message

log = logging.getLogger(__name__)
URL = re.compile(r"https?://[^\s<>()\"']+", re.IGNORECASE)


class UnsafeURL(Exception):
    """The URL leads somewhere engram must not go."""


def _allowed(ip: str, allow: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    address = ipaddress.ip_address(ip)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if any(address in net for net in allow):
        return True
    return address.is_global and not (address.is_multicast or address.is_reserved)


class GuardedBackend(SyncBackend):
    """Resolves the host itself and connects only to a public address it checked: no private,
    loopback or link-local targets, and no window for DNS to change its answer in between."""

    def __init__(self, resolve: Callable[..., Any] = socket.getaddrinfo, allow: list[str] | None = None):
        self.resolve = resolve
        self.allow = [ipaddress.ip_network(n) for n in (allow or [])]

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> NetworkStream:
        try:
            infos = self.resolve(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = [info[4][0] for info in infos]
        safe = [a for a in addresses if _allowed(a, self.allow)]
        if not safe or len(safe) != len(addresses):
            raise UnsafeURL(
                f"{host} resolves to an address engram does not fetch from "
                f"({', '.join(sorted(set(addresses)))})"
            )
        return super().connect_tcp(safe[0], port, timeout, local_address, socket_options)


class SafeFetcher:
    """GET http(s) URLs with size, time and redirect limits; every hop goes through the guarded backend."""

    def __init__(
        self,
        max_bytes: int = 2_000_000,
        timeout_s: float = 5.0,
        max_redirects: int = 3,
        resolve: Callable[..., Any] = socket.getaddrinfo,
        allow: list[str] | None = None,
        total_s: float = 10.0,
    ):
        self.max_bytes, self.max_redirects, self.total_s, self.timeout_s = (
            max_bytes,
            max_redirects,
            total_s,
            timeout_s,
        )
        transport = httpx.HTTPTransport(retries=0)
        transport._pool._network_backend = GuardedBackend(resolve, allow)  # httpx has no public hook for it
        self._client = httpx.Client(
            transport=transport,
            timeout=timeout_s,
            follow_redirects=False,
            headers={"User-Agent": "engram/1.0 (+link preview)"},
        )

    def fetch(self, url: str) -> tuple[str, str, bytes]:
        """(final URL, content type, body up to max_bytes); raises UnsafeURL or httpx.HTTPError."""
        # One deadline for the whole fetch (every hop, every read): a server that drips a byte a second
        # never trips a per-read timeout, and must not hold a worker as long as it likes.
        deadline = time.monotonic() + self.total_s
        for _ in range(self.max_redirects + 1):
            if not re.match(r"^https?://", url, re.IGNORECASE):
                raise UnsafeURL(f"only http(s) links are fetched, not {url[:40]!r}")
            with self._client.stream(
                "GET", url, timeout=min(self.timeout_s, self._left(deadline))
            ) as response:
                if response.is_redirect and "location" in response.headers:
                    url = str(response.url.join(response.headers["location"]))
                    continue
                response.raise_for_status()
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    self._left(deadline)
                    if len(body) > self.max_bytes:
                        del body[self.max_bytes :]
                        break
                return str(response.url), response.headers.get("content-type", ""), bytes(body)
        raise UnsafeURL("too many redirects")

    def _left(self, deadline: float) -> float:
        """Seconds left of the fetch's deadline; past it, httpx.TimeoutException."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise httpx.ReadTimeout(f"the whole fetch took longer than {self.total_s:g} s")
        return left


def readable_text(html: bytes, limit: int = 4000) -> tuple[str | None, str]:
    """(title, main text) of a page, extracted with readability-lxml (trafilatura pulls in 50 MB more,
    which the Lambda layer cannot afford)."""
    import lxml.html
    from readability import Document

    page = html.decode("utf-8", errors="replace")
    document = Document(page)
    body = lxml.html.fromstring(document.summary(html_partial=True)).text_content()
    return (document.short_title() or None), re.sub(r"\s+", " ", body).strip()[:limit]


class Interpreter:
    """Turns a message's images and links into attachments (the vector still comes from the text)."""

    def __init__(
        self, fetcher: SafeFetcher, ollama: httpx.Client | None, vision_model: str | None, max_links: int = 3
    ):
        self.fetcher, self.ollama, self.vision_model, self.max_links = (
            fetcher,
            ollama,
            vision_model,
            max_links,
        )

    def attachments(self, message: Message) -> list[dict[str, Any]]:
        """Described images (vision on) and fetched links; failures are recorded, never raised."""
        out = []
        for item in message.attachments:
            kind = "image" if (item.content_type or "").startswith("image/") else "file"
            entry = {"type": kind, "filename": item.filename, "url": item.url}
            if kind == "image" and self.vision_model and self.ollama is not None:
                entry["description"] = self._describe(item.url or "")
            out.append(entry)
        for url in list(dict.fromkeys(URL.findall(message.content)))[: self.max_links]:
            out.append(self._web(url.rstrip(".,;:!?")))
        return out

    def _describe(self, url: str) -> str | None:
        if self.ollama is None:
            return None
        try:
            _, content_type, image = self.fetcher.fetch(url)
            if not content_type.startswith("image/"):
                return None
            r = self.ollama.post(
                "/api/chat",
                json={
                    "model": self.vision_model,
                    "stream": False,
                    "messages": [
                        {
                            "role": "user",
                            "content": "Describe this image in two or three sentences.",
                            "images": [base64.b64encode(image).decode()],
                        }
                    ],
                },
            )
            r.raise_for_status()
            return (r.json().get("message") or {}).get("content") or None
        except (UnsafeURL, httpx.HTTPError, ValueError) as exc:
            log.info("image not described: %s", exc)
            return None

    def _web(self, url: str) -> dict[str, Any]:
        entry: dict[str, str | None] = {"type": "web", "url": url}
        try:
            final, content_type, body = self.fetcher.fetch(url)
            if "html" in content_type or not content_type:
                entry["title"], entry["text"] = readable_text(body)
            else:
                entry["error"] = f"not a web page ({content_type.split(';')[0]})"
        except UnsafeURL as exc:
            entry["error"] = str(exc)
        except httpx.HTTPError as exc:
            entry["error"] = f"could not fetch: {type(exc).__name__}"
        return entry
