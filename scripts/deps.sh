#!/usr/bin/env bash
# Makes sure the Debian packages f2fuse builds, tests and benchmarks with are installed.
# As root it installs what is missing with apt-get; otherwise it names the packages.
set -euo pipefail
pkgs=(build-essential pkg-config libfuse3-dev fuse3 liburing-dev f2fs-tools fio util-linux
      python3 clang
      libblkid-dev android-libsparse-dev   # partition tables and content probes; sparse images
      android-sdk-libsparse-utils fdisk squashfs-tools # tests: img2simg, sfdisk, mksquashfs
      user-mode-linux kmod attr acl # test_kernel_oracle: Linux 6.1 f2fs as a process, insmod, *fattr/*facl
      python3-matplotlib fuse2fs) # PNG plots (writeback, gc, fio); bench/fio's FUSE ext4 reference
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "f2fuse: missing Debian packages: ${missing[*]}" >&2
    echo "f2fuse: install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "f2fuse: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
