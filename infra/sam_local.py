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


def main() -> None:
    data_dir = Path(os.environ.get("ENGRAM_DATA_DIR", ".engram"))
    data_dir.mkdir(parents=True, exist_ok=True)
    out = prepare(data_dir)
    print(f"wrote {data_dir / 'env.json'} and {out}/ (Discord events signed; valid for 5 minutes)")
    print(f"e.g. sam local invoke InteractionsFunction -e {out}/discord-ping.json --env-vars {data_dir}/env.json "
          "--docker-network host", file=sys.stderr)


if __name__ == "__main__":
    main()
