"""The OpenAPI document generates a working TypeScript client: openapi-typescript turns the live
/openapi.json into types, tsc --strict compiles calls made with openapi-fetch against them (a route, a
parameter or a body the document got wrong fails here), and node runs them against the running stack."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx

from tests.integration.conftest import KEY

HERE = Path(__file__).resolve().parents[1] / "typescript"
BIN = HERE / "node_modules" / ".bin"


def run(*cmd: str) -> str:
    done = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{' '.join(cmd)}: {done.stdout}{done.stderr}"
    return done.stdout


def test_a_typescript_client_generated_from_the_document_works(stack):
    assert (BIN / "tsc").exists(), "tests/typescript has no node_modules: `make test` installs them (npm ci)"
    build = HERE / "build"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    (build / "openapi.json").write_text(httpx.get(f"{stack.url}/openapi.json").text)
    run(str(BIN / "openapi-typescript"), "build/openapi.json", "-o", "build/schema.d.ts")
    shutil.copy(HERE / "client.ts", build / "client.ts")
    run(str(BIN / "tsc"), "-p", "tsconfig.json")
    bot = f"ts-{uuid.uuid4().hex[:8]}"
    said = json.loads(run("node", "build/out/client.js", stack.url, KEY, bot).strip().splitlines()[-1])
    assert said["added"].startswith("mem:") and said["found"][0] == "The cat is called Miso."
    assert said["pageNext"] == said["added"]  # a full page (limit 1) says where the next would start
    assert said["missingStatus"] == 404 and said["missingType"] == "application/problem+json"
    assert said["missingCode"] == "not_found" and said["keyPrefix"] == "egk_"
