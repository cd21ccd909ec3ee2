"""Link fetching refuses to reach inside the network; pages become readable text; images get described."""

import socket

import httpx
import pytest

from engram.discord.attachments import Interpreter, SafeFetcher, UnsafeURL
from engram.discord.objects import Message
from tests.fake_discord import FakeDiscord


@pytest.fixture(scope="module")
def site():
    fake = FakeDiscord().start()
    yield fake
    fake.stop()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://localhost:9/",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://172.16.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[fe80::1]/",
        "http://0.0.0.0/",
        "file:///etc/passwd",
        "ftp://example.com/",
        "gopher://x/",
    ],
)
def test_private_addresses_and_other_schemes_are_refused(url):
    with pytest.raises(UnsafeURL):
        SafeFetcher().fetch(url)


def test_a_name_that_resolves_inside_is_refused():
    def resolve(host, port, type=0):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))]

    with pytest.raises(UnsafeURL, match="10.0.0.7"):
        SafeFetcher(resolve=resolve).fetch("http://innocent.example/")


def test_redirects_are_checked_at_every_hop(site):
    fetcher = SafeFetcher(
        allow=["127.0.0.1/32"]
    )  # the test site itself is allowed; the metadata address is not
    with pytest.raises(UnsafeURL, match="169.254.169.254"):
        fetcher.fetch(f"{site.url}/to-metadata")


def test_size_and_time_limits(site):
    _, _, body = SafeFetcher(allow=["127.0.0.1/32"], max_bytes=10_000).fetch(f"{site.url}/big")
    assert len(body) == 10_000
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        with pytest.raises(httpx.TimeoutException):
            SafeFetcher(allow=["127.0.0.1/32"], timeout_s=0.5).fetch(
                f"http://127.0.0.1:{silent.getsockname()[1]}/"
            )


def test_links_become_web_attachments_and_images_descriptions(site):
    ollama = httpx.Client(base_url=site.url)
    interpreter = Interpreter(SafeFetcher(allow=["127.0.0.1/32"]), ollama, "llava")
    cat = {"filename": "cat.png", "content_type": "image/png", "url": f"{site.url}/cat.png"}
    message = Message.model_validate(  # as the REST client hands it over: Discord's JSON, parsed
        {
            "id": "1",
            "content": f"Read this: {site.url}/page. And not this http://169.254.169.254/x",
            "attachments": [cat],
        }
    )
    image, web, blocked = interpreter.attachments(message)
    assert image == {
        "type": "image",
        "filename": "cat.png",
        "url": f"{site.url}/cat.png",
        "description": "A grey cat asleep on a windowsill.",
    }
    assert web["type"] == "web" and web["title"] == "Growing tomatoes" and "six hours of sun" in web["text"]
    assert "menu" not in web["text"] and "footer" not in web["text"]
    assert blocked["url"] == "http://169.254.169.254/x" and "does not fetch" in blocked["error"]
    assert (
        Interpreter(SafeFetcher(), ollama, None)
        .attachments(Message.model_validate({"id": "2", "content": "", "attachments": [cat]}))[0]
        .get("description")
        is None
    )


def test_one_deadline_bounds_the_whole_fetch():
    """A server that drips a byte every 0.2 s never trips the per-read timeout; the fetch still ends."""
    import socket as sock
    import threading
    import time

    import httpx

    server = sock.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def drip():
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 100000\r\n\r\n")
        try:
            for _ in range(100):
                conn.sendall(b"x")
                time.sleep(0.2)
        except OSError:
            pass
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        SafeFetcher(allow=["127.0.0.1/32"], timeout_s=1.0, total_s=1.5).fetch(
            f"http://127.0.0.1:{server.getsockname()[1]}/"
        )
    assert time.monotonic() - started < 3
    server.close()
