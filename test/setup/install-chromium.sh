#!/usr/bin/env bash
# Installs Debian's Chromium (/usr/bin/chromium) for the console's browser test
# (test/e2e/console.test.ts) where it is missing: as root, or through sudo without a password.
# Exits 0 when /usr/bin/chromium is there at the end, non-zero (saying why) otherwise.
set -u
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  as_root=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root="sudo -n"
else
  echo "cannot install chromium: not root and no password-less sudo" >&2
  exit 2
fi
if ! command -v apt-get >/dev/null; then
  echo "cannot install chromium: apt-get is missing (not a Debian-like system)" >&2
  exit 3
fi
echo "installing chromium (apt-get install chromium) for the console's browser test" >&2
$as_root apt-get update -qq >&2 &&
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
[ -x /usr/bin/chromium ] || { echo "chromium is still missing after apt-get" >&2; exit 4; }
