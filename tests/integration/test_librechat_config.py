"""The LibreChat example as LibreChat reads it: librechat.yaml against LibreChat's own config schema
(librechat-data-provider, pinned in infra/librechat), and the compose file giving LibreChat's server
every variable it needs to start."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "librechat"
# What LibreChat's server reads at start and cannot start without (its source): JWT_SECRET
# (api/strategies/jwtStrategy.js: passport-jwt throws without a secret), JWT_REFRESH_SECRET
# (api/server/services/AuthService.js), CREDS_KEY and CREDS_IV (packages/data-schemas crypto: a 32-byte key
# and a 16-byte iv as hex), MONGO_URI (api/db/connect.js), HOST (api/server/index.js: localhost otherwise,
# unreachable from a published port)
REQUIRED = {"JWT_SECRET", "JWT_REFRESH_SECRET", "CREDS_KEY", "CREDS_IV", "MONGO_URI", "HOST"}


def schema_version() -> str:
    """The config version LibreChat's schema is at (librechat-data-provider's Constants.CONFIG_VERSION)."""
    done = subprocess.run(
        ["node", "-e", "console.log(require('librechat-data-provider').Constants.CONFIG_VERSION)"],
        cwd=ROOT / "infra" / "librechat",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(ROOT / "infra" / "librechat" / "validate-config.js"), str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_docs_librechat_yaml_is_valid_on_its_own(tmp_path):
    """docs/librechat.md's snippet, copied as it stands into a librechat.yaml, is a config LibreChat takes."""
    docs = (ROOT / "docs" / "librechat.md").read_text()
    snippet = re.search(r"```yaml\n(.*?)```", docs, re.DOTALL)
    assert snippet is not None
    (tmp_path / "librechat.yaml").write_text(snippet.group(1).replace("<engram>", "engram.example.com"))
    done = validate(tmp_path / "librechat.yaml")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(snippet.group(1))["version"] == schema_version()


def test_the_example_config_is_valid_and_keeps_every_key_for_librechat():
    done = subprocess.run(
        ["node", str(ROOT / "infra" / "librechat" / "validate-config.js"), str(EXAMPLE / "librechat.yaml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "valid for librechat-data-provider 0.8.524" in done.stdout


def test_the_validator_fails_a_key_librechat_would_drop(tmp_path):
    config = yaml.safe_load((EXAMPLE / "librechat.yaml").read_text())
    config["mcpServers"]["engram"]["requestHeader"] = {"x": "y"}  # misspelt: LibreChat would ignore it
    (tmp_path / "librechat.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        ["node", str(ROOT / "infra" / "librechat" / "validate-config.js"), str(tmp_path / "librechat.yaml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1 and "requestHeader" in done.stderr


def test_the_compose_file_gives_librechat_every_variable_it_needs_to_start():
    compose = yaml.safe_load((EXAMPLE / "docker-compose.yml").read_text())
    librechat = compose["services"]["librechat"]
    env_file = [line.split("=", 1)[0] for line in (EXAMPLE / "env.example").read_text().splitlines()]
    given = set(librechat.get("environment", {})) | (
        {name for name in env_file if name and not name.startswith("#")}
        if librechat.get("env_file") == ".env"
        else set()
    )
    assert given >= REQUIRED, REQUIRED - given
    assert librechat["environment"]["HOST"] == "0.0.0.0"
    # the first user can sign up (LibreChat's registration is off, and its form hidden, without it)
    assert librechat["environment"]["ALLOW_REGISTRATION"] == "true"
    # every ${VAR} librechat.yaml and the compose file use is one the .env provides
    used = set(re.findall(r"\$\{(\w+)\}", (EXAMPLE / "librechat.yaml").read_text()))
    used |= set(re.findall(r"\$\{(\w+)\}", (EXAMPLE / "docker-compose.yml").read_text()))
    assert used <= given, used - given
    config = yaml.safe_load((EXAMPLE / "librechat.yaml").read_text())
    claude = next(e for e in config["endpoints"]["custom"] if e.get("provider") == "anthropic")
    assert claude["baseURL"].endswith("/anthropic")  # Anthropic's API under engram's anthropic upstream
    for endpoint in config["endpoints"]["custom"]:  # facts follow LibreChat's edits by the parent id
        parent = endpoint["headers"]["x-librechat-parent-message-id"]
        assert parent == "{{LIBRECHAT_BODY_PARENTMESSAGEID}}"
        # and keep the user's names (packages/api/src/utils/env.ts: ALLOWED_USER_FIELDS name, username)
        assert endpoint["headers"]["x-librechat-user-name"] == "{{LIBRECHAT_USER_NAME}}"
        assert endpoint["headers"]["x-librechat-username"] == "{{LIBRECHAT_USER_USERNAME}}"
    assert config["version"] == schema_version()  # the config version LibreChat's schema is at
    mcp = config["mcpServers"]["engram"]
    assert mcp["serverInstructions"] is True and "{{" not in str(mcp["headers"])
    assert set(mcp["requestHeaders"]) == {
        "x-librechat-user-id",
        "x-librechat-conversation-id",
        "x-librechat-user-name",
        "x-librechat-username",
    }
