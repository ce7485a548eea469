#!/usr/bin/env bash
# `make run`: mounts ./f2fuse.img at ./mnt, creating a 1 GiB sparse f2fs image first when
# there is none.  F2FUSE_IMAGE, F2FUSE_MNT and F2FUSE_OPTS override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${F2FUSE_IMAGE:-f2fuse.img}
mnt=${F2FUSE_MNT:-mnt}
opts=${F2FUSE_OPTS:-rw}

if [ ! -e "$image" ]; then
    echo "f2fuse: creating $image (1 GiB, sparse) with mkfs.f2fs"
    truncate -s 1G "$image"
    mkfs.f2fs -q -f -l f2fuse "$image"
fi
mkdir -p "$mnt"
if mountpoint -q "$mnt"; then
    echo "f2fuse: $mnt is already a mount point; unmount it with: fusermount3 -u $mnt" >&2
    exit 1
fi
./build/f2fuse -o "$opts" "$image" "$mnt"
echo "f2fuse: $image is mounted at $mnt (options: $opts)"
echo "  counters:  ./build/f2fuse stat $mnt"
echo "  unmount:   fusermount3 -u $mnt"
