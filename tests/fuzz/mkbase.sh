#!/usr/bin/env bash
# Builds the fuzzers' base images into DIR (96 MiB each: room for a file with an indirect node):
#   base.img   default features, sload'ed tree with every structure a harness points at:
#              inline and block files, a file with direct and indirect nodes, inline and
#              multi-block directories, short and long symlinks, a hard link
#   fresh.img  an empty mkfs image
#   feat.img   extra_attr, inode_checksum, flexible_inline_xattr, inode_crtime,
#              sb_checksum, lost_found with a small tree
#   crypt.img  encrypt, a tree whose directory "sealed" tests/integration/f2crypt.py encrypts
#              with a fixed key (/usr/bin/python3 with python3-cryptography; without them
#              the tree stays plain)
# The harness then adds xattrs with f2fuse itself.  Fixed UUID and timestamps keep the
# layout the same from run to run.
set -euo pipefail
dir=${1:?usage: mkbase.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
tree=$(mktemp -d "${TMPDIR:-/tmp}/f2fuse-fuzz-tree.XXXXXX")
trap "rm -rf \"\$tree\"" EXIT
uuid=f2f05e00-0000-4000-8000-00000000f022

mk() { # image features...
    rm -f "$1"; truncate -s 96M "$1"
    local feat=()
    [ -n "${2:-}" ] && feat=(-O "$2")
    mkfs.f2fs -f -U "$uuid" "${feat[@]}" "$1" >/dev/null
}
load() { # image tree
    # sload exits 1 when its own fsck fixed a slip of its own (see tests/integration/f2test.py)
    sload.f2fs -P -T 1700000000 -f "$2" -t / "$1" >/dev/null || [ $? -eq 1 ]
}

# the tree
cd "$tree"
mkdir -p big small deep/a/b/c
printf 'hello f2fs\n' > small/inline.txt
: > small/empty
head -c 10000 /dev/zero | tr '\0' 'x' > small/three_blocks
ln small/three_blocks small/hardlink
# 12 MiB: i_addr, both direct nodes and one indirect node; mostly zeros (cheap seeds)
truncate -s 12M nodes.bin
printf 'start' | dd of=nodes.bin conv=notrunc status=none
printf 'direct' | dd of=nodes.bin bs=4096 seek=1000 conv=notrunc status=none
printf 'indirect' | dd of=nodes.bin bs=4096 seek=3000 conv=notrunc status=none
for i in $(seq 1 60); do printf '%d\n' "$i" > "big/entry_with_a_longer_name_$i"; done
printf 'deep\n' > deep/a/b/c/leaf
ln -s small/inline.txt short_link
ln -s "$(head -c 3000 /dev/zero | tr '\0' 'l')" long_link
ln -s "$(head -c 4000 /dev/zero | tr '\0' 'm')" longer_link
touch -h -d @1700000000 short_link long_link longer_link

mk "$dir/base.img"
load "$dir/base.img" "$tree"
mk "$dir/fresh.img"
mk "$dir/feat.img" extra_attr,inode_checksum,flexible_inline_xattr,inode_crtime,sb_checksum,lost_found
load "$dir/feat.img" "$tree/small"

# an encrypted tree: files in blocks (an encrypted file is never inline), an empty one, a
# long name (a no-key name in the digest form), a symlink, a subdirectory
mkdir -p crypt/sealed/sub
head -c 3600 /dev/zero | tr '\0' 's' > crypt/sealed/first
head -c 5000 /dev/zero | tr '\0' 't' > "crypt/sealed/$(head -c 180 /dev/zero | tr '\0' 'n')"
: > crypt/sealed/empty
head -c 4000 /dev/zero | tr '\0' 'u' > crypt/sealed/sub/inner
ln -s first crypt/sealed/link
touch -h -d @1700000000 crypt/sealed/link
mk "$dir/crypt.img" encrypt
load "$dir/crypt.img" "$tree/crypt"
/usr/bin/python3 "$here/../integration/f2crypt.py" encrypt "$dir/crypt.img" /sealed \
    "$(printf '%0128d' 7)" >/dev/null 2>&1 || echo "mkbase.sh: crypt.img left unencrypted" >&2
