#!/usr/bin/env bash
# Installs Debian's podman, buildah and debootstrap for the container image's test
# (test/image/container-image.test.ts) where any is missing: as root, or through sudo without a
# password. Exits 0 when all three are there at the end, non-zero (saying why) otherwise.
set -u
missing() {
  command -v podman >/dev/null && command -v buildah >/dev/null &&
    { command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ]; } && return 1
  return 0
}
missing || exit 0
if [ "$(id -u)" -eq 0 ]; then
  as_root=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root="sudo -n"
else
  echo "cannot install podman: not root and no password-less sudo" >&2
  exit 2
fi
if ! command -v apt-get >/dev/null; then
  echo "cannot install podman: apt-get is missing (not a Debian-like system)" >&2
  exit 3
fi
echo "installing podman, buildah and debootstrap (apt-get) for the container image's test" >&2
$as_root apt-get update -qq >&2 &&
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah debootstrap >&2
if missing; then
  echo "podman, buildah or debootstrap is still missing after apt-get" >&2
  exit 4
fi
