#!/usr/bin/env bash
# Installs Debian's Prometheus (/usr/bin/prometheus and /usr/bin/promtool) for the alerting test
# (test/e2e/prometheus-alerts.test.ts) where it is missing: as root, or through sudo without a
# password. Idempotent. Exits 0 when both are there at the end, non-zero (saying why) otherwise.
# The package's own service is never started here (policy-rc.d refuses it; the test runs its own).
set -u
[ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  as_root=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root="sudo -n"
else
  echo "cannot install prometheus: not root and no password-less sudo" >&2
  exit 2
fi
if ! command -v apt-get >/dev/null; then
  echo "cannot install prometheus: apt-get is missing (not a Debian-like system)" >&2
  exit 3
fi
echo "installing prometheus (apt-get install prometheus) for the alerting test" >&2
policy=/usr/sbin/policy-rc.d
created_policy=""
if [ ! -e "$policy" ]; then
  # Exit 101: "action not allowed", so the package's post-install does not start a server.
  printf '#!/bin/sh\nexit 101\n' | $as_root tee "$policy" >/dev/null && $as_root chmod 0755 "$policy" && created_policy=1
fi
$as_root apt-get update -qq >&2 &&
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
status=$?
[ -n "$created_policy" ] && $as_root rm -f "$policy"
[ "$status" -eq 0 ] || { echo "apt-get install prometheus failed ($status)" >&2; exit 4; }
[ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ] || { echo "prometheus or promtool is still missing after apt-get" >&2; exit 5; }
