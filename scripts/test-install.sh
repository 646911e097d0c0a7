#!/usr/bin/env bash
# Tests scripts/install.sh as a user meets it: install into a fresh prefix, then from another
# directory `squeezefs --version`, `man -w`, bash completion of `squeezefs pr<TAB>`, an fstab
# line mounted with `mount MNT` and unmounted with `umount MNT` (waiting for the daemon's
# flush), the example systemd unit verified; `--uninstall` must leave the prefix and /sbin
# as they were. Needs root and /dev/fuse (mount helpers live in /sbin). Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
fail() { echo "test-install: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (mount helpers in /sbin, /etc/fstab)"
for h in /sbin/mount.fuse.squeezefs /sbin/umount.fuse.squeezefs; do
    if [ -e "$h" ] || [ -L "$h" ]; then fail "$h exists: this machine already has squeezefs installed; remove it first"; fi
done

tmp=$(mktemp -d /tmp/squeezefs-install-test.XXXXXX)
prefix="$tmp/prefix"
mnt="$tmp/mnt"
fstab_backup="$tmp/fstab.orig"
cp /etc/fstab "$fstab_backup" 2>/dev/null || : > "$fstab_backup"
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && umount -l "$mnt" 2>/dev/null
    cp "$fstab_backup" /etc/fstab
    [ -f "$prefix/share/squeezefs/install-manifest" ] && bash "$repo/scripts/install.sh" --prefix "$prefix" --uninstall >/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

list() { { find "$prefix" 2>/dev/null; ls -d /sbin/*squeezefs* 2>/dev/null || true; } | sort; }
mkdir -p "$prefix"
before=$(list)

bash scripts/install.sh --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "install.sh"; }
installed=$(list)

cd "$tmp"
export PATH="$prefix/bin:$PATH"

# --version names the release, the commit, the codec libraries and the format versions
v=$(squeezefs --version)
echo "$v"
for want in "squeezefs $(grep -m1 '^version' "$repo/Cargo.toml" | cut -d'"' -f2)" commit libzstd lz4 libdeflate "pool format" "superblock 1"; do
    grep -q "$want" <<< "$v" || fail "--version lacks '$want'"
done
if git -C "$repo" rev-parse HEAD >/dev/null 2>&1; then
    grep -q "commit *$(git -C "$repo" rev-parse --short=12 HEAD)" <<< "$v" || fail "--version does not name HEAD $(git -C "$repo" rev-parse --short=12 HEAD)"
fi

# man finds the pages through PATH (prefix/bin -> prefix/share/man)
pages=$(man -w squeezefs squeezefs-mount) || fail "man -w squeezefs squeezefs-mount"
echo "$pages"
[ "$(grep -c "^$prefix/share/man/man1/squeezefs\(-mount\)\?.1.gz$" <<< "$pages")" = 2 ] || fail "man pages not from $prefix: $pages"
man squeezefs-mount 2>/dev/null | grep -q 'compress=SPEC' || fail "man squeezefs-mount does not show the mount options"

# bash completion, loaded the way bash-completion loads it on the first <TAB>
comp=$(XDG_DATA_DIRS="$prefix/share:/usr/share" bash -c '
    source /usr/share/bash-completion/bash_completion
    __load_completion squeezefs || exit 3
    complete -p squeezefs >&2
    COMP_WORDS=(squeezefs pr); COMP_CWORD=1; COMP_LINE="squeezefs pr"; COMP_POINT=${#COMP_LINE}
    _squeezefs squeezefs pr squeezefs
    echo "${COMPREPLY[*]}"') || fail "bash completion of squeezefs did not load"
echo "squeezefs pr<TAB> -> $comp"
[ "$comp" = prop ] || fail "squeezefs pr<TAB> completed to '$comp', not 'prop'"

# the example unit is valid systemd syntax (systemd is not PID 1 here: it is not started)
if command -v systemd-analyze >/dev/null 2>&1; then
    unit="$tmp/unit/mnt-data.mount"
    mkdir -p "$tmp/unit"
    cp "$prefix/share/doc/squeezefs/examples/mnt-data.mount" "$unit"
    systemd-analyze verify "$unit" || fail "systemd-analyze verify of the example mount unit"
fi

# an fstab line: mount MNT, write, umount MNT; umount returns once the daemon has exited
squeezefs mkfs "$tmp/pool" >/dev/null
mkdir -p "$mnt"
echo "$tmp/pool $mnt fuse.squeezefs compress=zstd:3,helper=fuse.squeezefs,noauto,nofail 0 0" >> /etc/fstab
for round in plain systemd; do
    mount "$mnt" || fail "mount $mnt (fstab line)"
    grep -q " $mnt fuse.squeezefs " /proc/mounts || fail "$mnt not mounted as fuse.squeezefs"
    pid=$(getfattr --absolute-names --only-values -n user.squeezefs.mount "$mnt" | sed -n 's/^pid=//p')
    [ -n "$pid" ] || fail "no daemon pid in user.squeezefs.mount of $mnt"
    # helper=fuse.squeezefs got the mount a utab entry: what makes a plain umount run the helper
    grep -q "TARGET=$mnt .*helper=fuse.squeezefs" /run/mount/utab || fail "no utab entry with helper= for $mnt"
    head -c 4M /dev/zero > "$mnt/zeros.$round"
    if [ "$round" = plain ]; then umount "$mnt"; else umount -c "$mnt"; fi
    if grep -q " $mnt " /proc/mounts; then fail "$mnt still mounted after umount ($round)"; fi
    # the daemon's last words (cmd_mount.rs UNMOUNT_REPORT), written after its final commit
    [ "$(cat "$tmp/pool/squeezefs.unmount" 2>/dev/null)" = "$(printf 'pid=%s\nflushed' "$pid")" ] ||
        fail "umount ($round) returned before daemon $pid reported its flush"
    # (a zombie has exited: this machine's PID 1 may be slow to reap the orphan)
    if [ -e "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
        fail "daemon $pid still running after umount ($round)"
    fi
    echo "umount ($round): returned after the daemon's flush"
done
cp "$fstab_backup" /etc/fstab
squeezefs fsck "$tmp/pool" >/dev/null || fail "fsck after the fstab mounts"

cd "$repo"
bash scripts/install.sh --prefix "$prefix" --uninstall
after=$(list)
echo "files under the prefix and in /sbin: $(wc -l <<< "$before") before, $(wc -l <<< "$installed") installed, $(wc -l <<< "$after") after --uninstall"
[ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after") >&2; fail "--uninstall left files behind"; }
echo "test-install: 1 passed, 0 failed"
