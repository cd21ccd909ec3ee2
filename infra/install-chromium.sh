#!/bin/sh
# The browser tests drive Debian's Chromium (Playwright's own browsers cannot be downloaded offline).
# Installed here when missing, as `make run` installs Node's packages; says the exact command otherwise.
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for tests/browser (apt-get)..."
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null && exit 0
  echo "apt-get could not install chromium; tests/browser need it." >&2
  exit 2
fi
echo "tests/browser need Chromium: run 'sudo apt-get install chromium' (Debian/Ubuntu), or put chromium on PATH, then make test again." >&2
exit 2
