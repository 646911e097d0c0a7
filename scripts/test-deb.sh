#!/usr/bin/env bash
# Tests the Debian package: build it (scripts/build-deb.sh, reusing the release binary),
# `dpkg -i` it, check what it installed works (binary, helpers, man pages, completions, a
# mount through mount(8)), `dpkg -r` it and check every file it installed is gone. Needs
# root, fuse3 and /dev/fuse. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (dpkg -i)"
if dpkg -s squeezefs >/dev/null 2>&1; then fail "the squeezefs package is installed already; remove it first"; fi
for h in /sbin/mount.fuse.squeezefs /sbin/umount.fuse.squeezefs /usr/bin/squeezefs; do
    if [ -e "$h" ] || [ -L "$h" ]; then fail "$h exists (another installation): remove it first"; fi
done

deb=$(bash scripts/build-deb.sh | tail -n 1)
[ -f "$deb" ] || fail "build-deb.sh did not print a package path: '$deb'"
echo "package: $deb ($(du -k "$deb" | cut -f1) KiB)"
dpkg-deb -f "$deb" Depends | grep -q fuse3 || fail "the package does not depend on fuse3"

tmp=$(mktemp -d /tmp/squeezefs-deb-test.XXXXXX)
cleanup() {
    mountpoint -q "$tmp/mnt" 2>/dev/null && umount -l "$tmp/mnt"
    dpkg -s squeezefs >/dev/null 2>&1 && dpkg -r squeezefs >/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

dpkg -i "$deb" > "$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i"; }
files=$(dpkg -L squeezefs | while read -r f; do [ -d "$f" ] || echo "$f"; done)
echo "installed $(wc -l <<< "$files") files and links"
for want in /usr/bin/squeezefs /sbin/mount.fuse.squeezefs /sbin/umount.fuse.squeezefs \
    /usr/share/man/man1/squeezefs.1.gz /usr/share/man/man1/squeezefs-mount.1.gz \
    /usr/share/bash-completion/completions/squeezefs /usr/share/zsh/vendor-completions/_squeezefs \
    /usr/share/fish/vendor_completions.d/squeezefs.fish /usr/share/doc/squeezefs/examples/mnt-data.mount; do
    grep -qx "$want" <<< "$files" || fail "$want not in the package"
    [ -e "$want" ] || fail "$want not installed (or a dangling link)"
done
cd "$tmp"
/usr/bin/squeezefs --version | grep -q '^libzstd' || fail "squeezefs --version"
[ "$(man -w squeezefs-mount)" = /usr/share/man/man1/squeezefs-mount.1.gz ] || fail "man -w squeezefs-mount: $(man -w squeezefs-mount 2>&1)"
/usr/bin/squeezefs mkfs "$tmp/pool" >/dev/null
mkdir "$tmp/mnt"
mount -t fuse.squeezefs "$tmp/pool" "$tmp/mnt" -o compress=lz4 || fail "mount -t fuse.squeezefs through the packaged helper"
echo hello > "$tmp/mnt/f"
umount -c "$tmp/mnt" || fail "umount -c through the packaged helper"
grep -qx flushed "$tmp/pool/squeezefs.unmount" || fail "umount returned before the daemon's flush"
cd /

dpkg -r squeezefs > "$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -r"; }
left=$(while read -r f; do if [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done <<< "$files")
[ -z "$left" ] || fail "left behind after dpkg -r: $left"
echo "dpkg -r removed all $(wc -l <<< "$files") files and links"
echo "test-deb: 1 passed, 0 failed"
