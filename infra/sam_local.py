"""`sam local invoke` / `start-api` against `make run`: writes .engram/env.json (env.json with this data
dir's keys and a local Discord signing key) and .engram/events/ (the events/ files, Discord ones signed
now with that key, so they verify). Run it right before invoking: Discord signatures are fresh for 5
minutes. Linux: `--docker-network host` (the stack listens on 127.0.0.1); Docker Desktop: replace
127.0.0.1 by host.docker.internal in .engram/env.json."""

from __future__ import annotations

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
    return {**event, "headers": {**event["headers"], "x-signature-ed25519": signature, "x-signature-timestamp": stamp}}


def _key_file(data_dir: Path, name: str) -> str:
    path = data_dir / name
    return path.read_text().strip() if path.exists() else ""


def prepare(data_dir: Path, events_dir: Path = ROOT / "events", template_env: Path = ROOT / "env.json") -> Path:
    """Write <data_dir>/env.json and <data_dir>/events/; returns the events directory written."""
    key = signing_key(data_dir)
    env = json.loads(template_env.read_text())
    env["Parameters"].update({
        "ENGRAM_API_KEY": os.environ.get("ENGRAM_API_KEY") or _key_file(data_dir, "api-key"),
        "ENGRAM_PROXY_KEY": os.environ.get("ENGRAM_PROXY_KEY") or _key_file(data_dir, "proxy-key"),
        "DISCORD_PUBLIC_KEY": key.verify_key.encode().hex(),
    })
    (data_dir / "env.json").write_text(json.dumps(env, indent=2))
    out = data_dir / "events"
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(events_dir.glob("*.json")):
        event = json.loads(path.read_text())
        if path.name.startswith("discord-"):
            event = sign(event, key)
        (out / path.name).write_text(json.dumps(event, indent=2))
    return out


# Every function of the template with the events it is invoked with, and what its answer must show. The
# streaming proxy is left out: its AWS Lambda Web Adapter layer is an ARN in AWS's account, which `sam local`
# must download (with AWS credentials) and these machines cannot reach; run it locally as `make run` does.
INVOCATIONS = (
    ("HttpFunction", "apigw-http-add-memory.json", lambda out: out.get("statusCode") in (200, 201)),
    ("HttpFunction", "apigw-http-list-memories.json", lambda out: out.get("statusCode") == 200),
    ("InteractionsFunction", "discord-ping.json", lambda out: out.get("statusCode") == 200 and json.loads(out.get("body") or "{}") == {"type": 1}),
    ("InteractionsFunction", "discord-memory-status.json", lambda out: out.get("statusCode") == 200),
    ("WorkerFunction", "sqs-index-job.json", lambda out: out.get("batchItemFailures") == []),
    ("WorkerFunction", "sqs-sweep-job.json", lambda out: out.get("batchItemFailures") == []),
    ("ScheduleFunction", "schedule-sweep.json", lambda out: "errorMessage" not in out),
)
SKIPPED = {"StreamingProxyFunction": "its Lambda Web Adapter layer is an ARN `sam local` would download from AWS"}


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


NETWORK = os.environ.get("ENGRAM_SAM_NETWORK", "engram-sam")


def sam_network() -> str:
    """A Docker bridge network of engram's own (made once) and its gateway, the host as containers see it.
    Not the host's network: there SAM's published port for the emulator (a free one in 5000-9000) is
    ignored, the emulator listens on 8080 and SAM never reaches it."""
    import subprocess

    def gateway() -> str:
        done = subprocess.run(["docker", "network", "inspect", NETWORK, "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"],
                              capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    if not gateway():
        subprocess.run(["docker", "network", "create", NETWORK], capture_output=True, text=True, check=True)
    return gateway()


def forward(listen_host: str, ports: list[int], target_host: str = "127.0.0.1"):
    """TCP forwarders listen_host:port -> target_host:port in a thread (make run's DynamoDB and SQS listen on
    loopback only; this shows them to the bridge's containers, and to nothing else). Returns a stop()."""
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

    async def serve(port):
        async def handle(reader, writer):
            try:
                up_reader, up_writer = await asyncio.open_connection(target_host, port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        return await asyncio.start_server(handle, listen_host, port)

    servers = [loop.run_until_complete(serve(p)) for p in ports]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop():
        for server in servers:
            server.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
    return stop


def invoke_all(data_dir: Path, sam: str, template: Path, only: set[str] | None = None) -> list[tuple[str, str, bool, float, str]]:
    """Invoke every function through the Runtime Interface Emulator; (function, event, ok, seconds, answer)."""
    import subprocess

    events = prepare(data_dir)
    host = sam_network()
    env_file = data_dir / "env-sam.json"
    env_file.write_text((data_dir / "env.json").read_text().replace("127.0.0.1", host))
    stop = forward(host, [8711, 8712])
    results = []
    for function, event, ok in INVOCATIONS:
        if only and function not in only:
            continue
        started = time.monotonic()
        done = subprocess.run(
            [sam, "local", "invoke", function, "-t", str(template), "-e", str(events / event),
             "--env-vars", str(env_file), "--docker-network", NETWORK, "--skip-pull-image"],
            capture_output=True, text=True, timeout=600)
        answer = _answer(done.stdout)
        passed = done.returncode == 0 and bool(answer) and bool(ok(answer))
        results.append((function, event, passed, round(time.monotonic() - started, 1),
                        json.dumps(answer)[:200] if answer else (done.stderr or done.stdout)[-600:]))
    stop()
    return results


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _start_stack(data_dir: Path):
    """`make run`'s stack, when none is up: its DynamoDB on :8711 and SQS on :8712, as env.json says."""
    import subprocess

    log = open(data_dir / "sam-local-stack.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "infra.local_stack"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "ENGRAM_DATA_DIR": str(data_dir.resolve())})
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
    if "--invoke" not in sys.argv:
        out = prepare(data_dir)
        print(f"wrote {data_dir / 'env.json'} and {out}/ (Discord events signed; valid for 5 minutes)")
        print(f"e.g. sam local invoke InteractionsFunction -e {out}/discord-ping.json --env-vars {data_dir}/env.json "
              "--docker-network host --skip-pull-image", file=sys.stderr)
        return
    sam = os.environ.get("SAM", str(ROOT / ".venv-sam" / "bin" / "sam"))
    template = ROOT / ".aws-sam" / "build" / "template.yaml"
    stack = None if _answers("http://127.0.0.1:8710/livez") else _start_stack(data_dir)
    try:
        results = invoke_all(data_dir, sam, template)
    finally:
        if stack is not None:
            stack.terminate()
            stack.wait(timeout=60)
    for function, event, passed, seconds, answer in results:
        print(f"{'ok  ' if passed else 'FAIL'} {function:<22} {event:<32} {seconds:>6} s  {answer if not passed else ''}")
    for function, why in SKIPPED.items():
        print(f"skip {function:<22} {why}")
    sys.exit(0 if all(r[2] for r in results) else 1)


if __name__ == "__main__":
    main()
