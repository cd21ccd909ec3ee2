"""`sam local invoke` / `start-api` against `make run`: writes .engram/env-sam.json (env.json with this
data dir's keys, a local Discord signing key and the host as Docker's default bridge sees it) and
.engram/events/ (the events/ files, Discord ones signed now with that key, so they verify: fresh for 5
minutes), starts make run's stack when none is up and a Qdrant for the run, and forwards them to the
bridge. `--invoke`: invoke every function once and check its answer (make sam-local); else keep it all up
for `sam local` by hand until Ctrl-C. ENGRAM_SAM_HOST=host.docker.internal on Docker Desktop."""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import time
from pathlib import Path

from nacl.signing import SigningKey

ROOT = Path(__file__).resolve().parent.parent


def signing_key(data_dir: Path) -> SigningKey:
    """The data dir's Discord signing key (made once): stands in for Discord's, which nobody has."""
    path = data_dir / "discord-signing-key"
    if not path.exists():
        path.write_text(SigningKey.generate().encode().hex())
        path.chmod(0o600)
    return SigningKey(bytes.fromhex(path.read_text().strip()))


def sign(event: dict, key: SigningKey, now: int | None = None) -> dict:
    """An API Gateway event of a Discord interaction, signed as Discord signs (timestamp + raw body)."""
    stamp = str(int(now if now is not None else time.time()))
    signature = key.sign(stamp.encode() + event["body"].encode()).signature.hex()
    return {
        **event,
        "headers": {**event["headers"], "x-signature-ed25519": signature, "x-signature-timestamp": stamp},
    }


def _key_file(data_dir: Path, name: str) -> str:
    path = data_dir / name
    return path.read_text().strip() if path.exists() else ""


def prepare(
    data_dir: Path, events_dir: Path = ROOT / "events", template_env: Path = ROOT / "env.json"
) -> Path:
    """Write <data_dir>/env.json and <data_dir>/events/; returns the events directory written."""
    key = signing_key(data_dir)
    env = json.loads(template_env.read_text())
    api_key = os.environ.get("ENGRAM_API_KEY") or _key_file(data_dir, "api-key")
    proxy_key = os.environ.get("ENGRAM_PROXY_KEY") or _key_file(data_dir, "proxy-key")
    env["Parameters"].update(
        {
            "ENGRAM_API_KEY": api_key,
            "ENGRAM_PROXY_KEY": proxy_key,
            "DISCORD_PUBLIC_KEY": key.verify_key.encode().hex(),
        }
    )
    (data_dir / "env.json").write_text(json.dumps(env, indent=2))
    out = data_dir / "events"
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(events_dir.glob("*.json")):
        # the events' placeholder keys become this data dir's, so the functions let them in
        event = json.loads(
            path.read_text()
            .replace("Bearer event-key", f"Bearer {api_key}")
            .replace("Bearer <the proxy key>", f"Bearer {proxy_key}")
        )
        if path.name.startswith("discord-"):
            event = sign(_fresh_interaction(event), key)
        (out / path.name).write_text(json.dumps(event, indent=2))
    return out


def _fresh_interaction(event: dict) -> dict:
    """The event with an interaction id of its own: Discord never sends one id twice, and the function
    refuses a replay (an id already handled), so every run of the same file is a new interaction."""
    body = json.loads(event["body"])
    body["id"] = str(time.time_ns())
    return {**event, "body": json.dumps(body)}


# Every function of the template with the events it is invoked with, and what its answer must show. The
# streaming proxy is left out: its AWS Lambda Web Adapter layer is an ARN in AWS's account, which `sam local`
# must download (with AWS credentials) and these machines cannot reach; run it locally as `make run` does.
def _body(out: dict) -> dict:
    try:
        return json.loads(out.get("body") or "{}")
    except ValueError:
        return {}


INVOCATIONS = (
    (
        "HttpFunction",
        "apigw-http-add-memory.json",
        lambda out: out.get("statusCode") in (200, 201) and "id" in _body(out),
    ),
    (
        "HttpFunction",
        "apigw-http-list-memories.json",
        lambda out: out.get("statusCode") == 200 and "The owner drinks green tea." in out.get("body", ""),
    ),
    (
        "InteractionsFunction",
        "discord-ping.json",
        lambda out: out.get("statusCode") == 200 and _body(out) == {"type": 1},
    ),
    (
        "InteractionsFunction",
        "discord-memory-status.json",
        lambda out: out.get("statusCode") == 200 and _body(out).get("type") == 4,
    ),
    ("WorkerFunction", "sqs-index-job.json", lambda out: out.get("batchItemFailures") == []),
    ("WorkerFunction", "sqs-sweep-job.json", lambda out: out.get("batchItemFailures") == []),
    ("ScheduleFunction", "schedule-sweep.json", lambda out: "errorMessage" not in out),
)
SKIPPED = {
    "StreamingProxyFunction": "its Lambda Web Adapter layer is an ARN `sam local` would download from AWS"
}


def _answer(stdout: str) -> dict:
    """The function's answer: the last JSON object `sam local invoke` prints."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict):
            return out
    return {}


def bridge_gateway() -> str:
    """The host as SAM's containers see it: the gateway of Docker's default bridge (ENGRAM_SAM_HOST overrides,
    e.g. host.docker.internal on Docker Desktop). The default bridge, not the host's network: there SAM's
    published emulator port (a free one in 5000-9000) is ignored, the emulator listens on 8080 and SAM never
    reaches it; and not a network of our own: SAM creates its container on the default one and connects it
    to --docker-network after, which leaves it no interface at all when the engine runs with --bridge=none."""
    import subprocess

    if os.environ.get("ENGRAM_SAM_HOST"):
        return os.environ["ENGRAM_SAM_HOST"]
    done = subprocess.run(
        ["docker", "network", "inspect", "bridge", "-f", "{{json .IPAM.Config}}"],
        check=False,
        capture_output=True,
        text=True,
    )
    config = (json.loads(done.stdout) or [{}])[0] if done.returncode == 0 else {}
    # Docker leaves Gateway out when it is the subnet's first address (as with docker0 here)
    gateway = config.get("Gateway") or (
        str(next(ipaddress.ip_network(config["Subnet"]).hosts())) if config.get("Subnet") else ""
    )
    if not gateway:
        sys.exit(
            "Docker's default bridge is off (dockerd --bridge=none?): `sam local` creates its containers on "
            "it; restart dockerd without --bridge=none (infra/image/engine.sh starts one so)"
        )
    return gateway


def forward(listen_host: str, ports: dict[int, int], target_host: str = "127.0.0.1"):
    """TCP forwarders listen_host:port -> target_host:ports[port] in a thread (make run's DynamoDB and SQS
    listen on loopback only; this shows them to the bridge's containers, and to nothing else). Returns a
    stop()."""
    import asyncio
    import threading

    loop = asyncio.new_event_loop()

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(port, target_port):
        async def handle(reader, writer):
            try:
                up_reader, up_writer = await asyncio.open_connection(target_host, target_port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        return await asyncio.start_server(handle, listen_host, port)

    try:
        servers = [loop.run_until_complete(serve(p, t)) for p, t in ports.items()]
    except OSError as exc:
        sys.exit(
            f"cannot forward {listen_host}:{sorted(ports)} to the containers ({exc.strerror}): is another "
            "`python -m infra.sam_local` up?"
        )
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop():
        for server in servers:
            server.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)

    return stop


QDRANT_PORT = 6333
# no usage reports to AWS from a local run (they cannot be sent here anyway: each one waits on a failed
# lookup)
SAM_ENV = {**os.environ, "SAM_CLI_TELEMETRY": "0"}


class Session:
    """What `sam local` needs around it for one run: env-sam.json and the signed events, a Qdrant (the URL in
    ENGRAM_QDRANT_URL, else qdrant-client's local engine behind Qdrant's REST API, tests/fake_qdrant.py,
    empty at every run), and make run's DynamoDB, SQS and that Qdrant forwarded to the bridge's gateway."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.events = prepare(data_dir)
        self.host = bridge_gateway()
        self.env_file = data_dir / "env-sam.json"
        self._qdrant = None
        ports = {8711: 8711, 8712: 8712}
        qdrant_url = os.environ.get("ENGRAM_QDRANT_URL", "")
        if not qdrant_url:
            sys.path.insert(0, str(ROOT))
            from tests.fake_qdrant import FakeQdrant

            self._qdrant = FakeQdrant().start()
            ports[QDRANT_PORT] = self._qdrant.port
            qdrant_url = f"http://127.0.0.1:{QDRANT_PORT}"
        env = json.loads((data_dir / "env.json").read_text())
        env["Parameters"]["ENGRAM_QDRANT_URL"] = qdrant_url
        self.env_file.write_text(json.dumps(env, indent=2).replace("127.0.0.1", self.host))
        # an IP is forwarded to; a name (host.docker.internal) already reaches the host's loopback
        self._stop_forwarding = forward(self.host, ports) if self.host[0].isdigit() else (lambda: None)

    def close(self) -> None:
        """Stop the forwarders and the run's Qdrant."""
        self._stop_forwarding()
        if self._qdrant is not None:
            self._qdrant.stop()


def invoke_all(
    data_dir: Path, sam: str, template: Path, only: set[str] | None = None
) -> list[tuple[str, str, bool, float, str]]:
    """Invoke every function through the Runtime Interface Emulator; (function, event, ok, seconds,
    answer)."""
    import subprocess

    session = Session(data_dir)
    results = []
    try:
        for function, event, ok in INVOCATIONS:
            if only and function not in only:
                continue
            started = time.monotonic()
            done = subprocess.run(
                [
                    sam,
                    "local",
                    "invoke",
                    function,
                    "-t",
                    str(template),
                    "-e",
                    str(session.events / event),
                    "--env-vars",
                    str(session.env_file),
                    "--skip-pull-image",
                ],
                check=False,
                capture_output=True,
                text=True,
                timeout=600,
                env=SAM_ENV,
            )
            answer = _answer(done.stdout)
            passed = done.returncode == 0 and bool(answer) and bool(ok(answer))
            results.append(
                (
                    function,
                    event,
                    passed,
                    round(time.monotonic() - started, 1),
                    json.dumps(answer)[:300] if answer else (done.stderr or done.stdout)[-600:],
                )
            )
        results += start_api_checks(session, sam, template)
    finally:
        session.close()
    return results


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_api_checks(session: Session, sam: str, template: Path) -> list[tuple[str, str, bool, float, str]]:
    """`sam local start-api` serving the template's HTTP routes: the Memory API lists what the invocations
    added, a new memory goes in, a signed Discord PING is answered. (route, what, ok, seconds, answer)."""
    import signal
    import subprocess

    import httpx

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = session.data_dir / "sam-start-api.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sam,
                "local",
                "start-api",
                "-t",
                str(template),
                "--env-vars",
                str(session.env_file),
                "--skip-pull-image",
                "-p",
                str(port),
                "--warm-containers",
                "LAZY",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=SAM_ENV,
        )
    results = []
    api_key = json.loads(session.env_file.read_text())["Parameters"]["ENGRAM_API_KEY"]
    admin = {"authorization": f"Bearer {api_key}"}
    ping = json.loads((session.events / "discord-ping.json").read_text())
    ping = sign(_fresh_interaction(ping), signing_key(session.data_dir))
    checks = (
        (
            "GET /v1/bots/demo/memories",
            lambda c: c.get(f"{base}/v1/bots/demo/memories", headers=admin),
            lambda r: r.status_code == 200 and "The owner drinks green tea." in r.text,
        ),
        (
            "POST /v1/bots/demo/memories",
            lambda c: c.post(
                f"{base}/v1/bots/demo/memories", headers=admin, json={"text": "The owner walks at dawn."}
            ),
            lambda r: r.status_code in (200, 201) and r.json().get("text") == "The owner walks at dawn.",
        ),
        (
            "GET /v1/bots/demo/memories (no key)",
            lambda c: c.get(f"{base}/v1/bots/demo/memories"),
            lambda r: r.status_code == 401,
        ),
        (
            "POST /discord/interactions",
            lambda c: c.post(
                f"{base}/discord/interactions",
                content=ping["body"],
                headers={k: v for k, v in ping["headers"].items() if k != "host"},
            ),
            lambda r: r.status_code == 200 and r.json() == {"type": 1},
        ),
    )
    try:
        deadline = time.monotonic() + 120
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                return [("start-api", "started", False, 0.0, log.read_text()[-600:])]
            time.sleep(0.5)
        with httpx.Client(timeout=120) as client:
            for route, call, ok in checks:
                started = time.monotonic()
                try:
                    response = call(client)
                    passed, answer = bool(ok(response)), f"{response.status_code} {response.text[:200]}"
                except (httpx.HTTPError, ValueError) as exc:
                    passed, answer = False, repr(exc)
                results.append(("start-api", route, passed, round(time.monotonic() - started, 1), answer))
    finally:
        proc.send_signal(signal.SIGINT)  # SAM removes its warm containers on Ctrl-C, not on SIGTERM
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        _remove_left_containers(log.read_text())
    return results


def _remove_left_containers(log: str) -> None:
    """The containers this start-api started (SAM prints each one's SAM_CONTAINER_ID) that are still there.
    SAM removes its warm containers on Ctrl-C, but on a busy machine its shutdown can outlast the wait (seen
    in CI beside the integration tier: two left up, SAM killed); only this run's are removed, never another
    SAM's."""
    import re
    import subprocess

    ids = sorted(set(re.findall(r"SAM_CONTAINER_ID: ([0-9a-f]{12,64})", log)))
    if ids:  # one gone already makes docker say so and remove the rest
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _same_keys(data_dir: Path) -> None:
    """The stack already up must be this data dir's: the functions get its keys, and the stack's DynamoDB
    holds what they check them against."""
    import httpx

    key = os.environ.get("ENGRAM_API_KEY") or _key_file(data_dir, "api-key")
    if not key:
        sys.exit(
            f"a stack is up on :8710 but {data_dir} has no admin key (api-key): set ENGRAM_DATA_DIR to that "
            "stack's data dir, or stop it and let this start one"
        )
    try:
        status = httpx.get(
            "http://127.0.0.1:8710/v1/bots/demo/memories?limit=1",
            timeout=10,
            headers={"authorization": f"Bearer {key}"},
        ).status_code
    except httpx.HTTPError:
        status = 0
    if status != 200:
        sys.exit(
            f"a stack is up on :8710 but {data_dir}'s admin key does not open it ({status or 'no answer'}): "
            "set ENGRAM_DATA_DIR to that stack's data dir, or stop it and let this start one"
        )


def _start_stack(data_dir: Path):
    """`make run`'s stack, when none is up: its DynamoDB on :8711 and SQS on :8712, as env.json says."""
    import subprocess

    with open(data_dir / "sam-local-stack.log", "w") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "infra.local_stack"],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ENGRAM_DATA_DIR": str(data_dir.resolve())},
        )
    deadline = time.monotonic() + 120
    while not _answers("http://127.0.0.1:8710/livez"):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"make run's stack did not start; see {data_dir / 'sam-local-stack.log'}")
        time.sleep(0.5)
    print("started make run's stack for the invocations (stopped after them)")
    return proc


def main() -> None:
    data_dir = Path(os.environ.get("ENGRAM_DATA_DIR", ".engram"))
    data_dir.mkdir(parents=True, exist_ok=True)
    sam = os.environ.get("SAM", str(ROOT / ".venv-sam" / "bin" / "sam"))
    template = ROOT / ".aws-sam" / "build" / "template.yaml"
    stack = None if _answers("http://127.0.0.1:8710/livez") else _start_stack(data_dir)
    if stack is None:
        _same_keys(data_dir)
    try:
        if "--invoke" in sys.argv:
            results = invoke_all(data_dir, sam, template)
        else:
            _serve(data_dir)
            return
    finally:
        if stack is not None:
            stack.terminate()
            stack.wait(timeout=60)
    for function, event, passed, seconds, answer in results:
        print(
            f"{'ok  ' if passed else 'FAIL'} {function:<22} {event:<36} {seconds:>6} s  "
            f"{answer if not passed else ''}"
        )
    for function, why in SKIPPED.items():
        print(f"skip {function:<22} {why}")
    sys.exit(0 if all(r[2] for r in results) else 1)


def _serve(data_dir: Path) -> None:
    """Keep the forwarders and the run's Qdrant up for `sam local` by hand, until Ctrl-C."""
    session = Session(data_dir)
    print(
        f"wrote {session.env_file} and {session.events}/ (Discord events signed; fresh for 5 minutes); "
        f"DynamoDB, SQS and Qdrant shown to containers at {session.host}. Ctrl-C to stop. E.g.\n"
        f"  .venv-sam/bin/sam local invoke InteractionsFunction -e {session.events}/discord-ping.json "
        f"--env-vars {session.env_file} --skip-pull-image\n"
        f"  .venv-sam/bin/sam local start-api --env-vars {session.env_file} --skip-pull-image",
        flush=True,
    )
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops it as Ctrl-C does
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        session.close()


if __name__ == "__main__":
    main()
