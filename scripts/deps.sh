#!/usr/bin/env bash
# Makes sure the Debian packages a make target needs are installed: `deps.sh [GROUP...]`, the
# groups below (default: build).  `make` asks only for build, so a user with the build
# dependencies builds without root and without the test tools; `make test`, `make bench`,
# `make fuzzers` and `make check` add theirs.  As root it installs what is missing with
# apt-get; otherwise it names the packages and fails.
set -euo pipefail
declare -A group=(
    # libicu-dev: the Unicode data casefolded directories fold names with (casefold.c)
    [build]="build-essential pkg-config libfuse3-dev liburing-dev libblkid-dev
             android-libsparse-dev liblz4-dev liblzo2-dev libzstd-dev libssl-dev libicu-dev"
    # make run: mkfs.f2fs for a new image, fusermount3 to unmount it
    [run]="fuse3 f2fs-tools"
    # the suite: f2fs-tools are the oracle; img2simg, sfdisk, mksquashfs build test images;
    # user-mode-linux + kmod run Linux 6.1's f2fs as a process (test_kernel_oracle); attr and
    # acl for *fattr/*facl; clang for test_fuzz's harnesses; mkfs.ext4 and xz for the
    # foreign inputs of test_image_formats; quota's setquota/repquota set limits and read
    # usage in the kernel (test_quota); fsverity computes Merkle trees independently of
    # f2fuse for test_verity's images; unicode-data's DerivedAge.txt for test_casefold's
    # model of the kernel's Unicode 12.1 folding; f2fs-tools' source built with LZ4/LZO
    # (tests/integration/build_f2fs_tools) and Debian's Python codecs for test_compress;
    # python3-cryptography for f2crypt.py, test_fscrypt(_nokey)'s independent fscrypt encoder;
    # the network devices: libnbd-dev and librbd-dev (optional for `make`, so that the test
    # build has both backends), nbdkit and qemu-nbd as NBD servers with nbdcopy, and a
    # one-node Ceph cluster for test_rbd
    [test]="fuse3 f2fs-tools util-linux python3 android-sdk-libsparse-utils fdisk
            squashfs-tools user-mode-linux kmod attr acl clang e2fsprogs xz-utils quota
            fsverity unicode-data dpkg-dev autoconf automake libtool pkg-config uuid-dev
            liblz4-dev liblzo2-dev python3-lz4 python3-lzo python3-zstandard
            python3-cryptography
            libnbd-dev libnbd-bin nbdkit qemu-utils librbd-dev ceph-mon ceph-mgr ceph-osd
            ceph-common"
    # fio workloads, PNG plots, fuse2fs as the FUSE ext4 reference of bench/fio; bench/nbd:
    # nbdkit as the server, libnbd-dev for f2fuse's NBD backend (fio's nbd engine is the ceiling);
    # bench/fscrypt: python3-cryptography for f2crypt.py, which makes its encrypted directory
    [bench]="fuse3 f2fs-tools util-linux python3 fio python3-matplotlib fuse2fs fsverity
             nbdkit libnbd-dev python3-cryptography"
    [fuzz]="clang f2fs-tools"
    [check]="cppcheck clang-format"
)
[ $# -eq 0 ] && set -- build
wanted=()
for g in "$@"; do
    [ -n "${group[$g]+set}" ] || { echo "deps.sh: unknown group $g (${!group[*]})" >&2; exit 2; }
    # shellcheck disable=SC2206 # the lists are words, split on purpose
    wanted+=(${group[$g]})
done
missing=()
for p in $(printf '%s\n' "${wanted[@]}" | awk '!seen[$0]++'); do
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
