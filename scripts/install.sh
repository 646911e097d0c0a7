#!/usr/bin/env bash
# Installs squeezefs: the binary, the mount(8)/umount(8) helpers, man pages, bash/zsh/fish
# completions and an example fstab line and systemd mount unit; writes a manifest of every
# file and directory it made, which --uninstall removes again (and nothing else).
#
#   bash scripts/install.sh [--prefix DIR] [--helper-dir DIR|none]
#   bash scripts/install.sh [--prefix DIR] --uninstall
#
# --prefix      where bin/, sbin/ and share/ go (default /usr/local)
# --helper-dir  mount(8) looks for mount.fuse.squeezefs only in /sbin (and /sbin/fs.d,
#               /sbin/fs), whatever the prefix: links to the binary go there too (default
#               /sbin when run as root, else none; not needed when PREFIX/sbin is /sbin)
# SQUEEZEFS_BIN=FILE installs that binary instead of building target/release/squeezefs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

prefix=/usr/local
helper_dir=
uninstall=false
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --helper-dir) helper_dir=${2:?--helper-dir needs a directory or none}; shift 2 ;;
        --helper-dir=*) helper_dir=${1#--helper-dir=}; shift ;;
        --uninstall) uninstall=true; shift ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument '$1' (accepted: --prefix DIR, --helper-dir DIR|none, --uninstall)" >&2; exit 2 ;;
    esac
done
case "$prefix" in /*) ;; *) prefix="$(pwd)/$prefix" ;; esac
prefix=${prefix%/}
manifest="$prefix/share/squeezefs/install-manifest"

# Removes what a manifest lists: files and links, the manifest, then the directories the
# installation made, deepest first, each only if empty (something else may have put files
# there since).
uninstall_manifest() {
    local m=$1 kind path
    [ -f "$m" ] || { echo "install.sh: no squeezefs installation under $prefix ($m missing)" >&2; return 1; }
    while read -r kind path; do
        case "$kind" in f|l) rm -f -- "$path" ;; esac
    done < "$m"
    local dirs
    dirs=$(grep '^d ' "$m" | cut -c3- | tac || true)
    rm -f -- "$m"
    while read -r path; do
        [ -n "$path" ] && { rmdir -- "$path" 2>/dev/null || true; }
    done <<< "$dirs"
}

if $uninstall; then
    uninstall_manifest "$manifest"
    echo "squeezefs removed from $prefix"
    exit 0
fi

if [ -z "$helper_dir" ]; then
    if [ "$(id -u)" = 0 ] && [ "$prefix/sbin" != /sbin ] && [ "$prefix/sbin" != /usr/sbin ]; then
        helper_dir=/sbin
    else
        helper_dir=none
    fi
fi

if [ -n "${SQUEEZEFS_BIN:-}" ]; then
    bin=$SQUEEZEFS_BIN
else
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || { echo "install.sh: cargo not found: install Rust (rustup) first" >&2; exit 1; }
    # a no-op when the release binary is up to date
    cargo build --release --locked -p squeezefs
    bin="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/squeezefs"
fi
[ -x "$bin" ] || { echo "install.sh: $bin is not an executable" >&2; exit 1; }

# a reinstall replaces the previous installation of this prefix
[ -f "$manifest" ] && uninstall_manifest "$manifest"

# every file goes through here: refuse to replace what another installation owns
made=$(mktemp)
stage=$(mktemp -d)
complete=false
# a failed installation takes back what it had made so far
rollback() {
    if ! $complete; then
        echo "install.sh: failed; removing what this run installed" >&2
        cp "$made" "$stage/partial-manifest"
        uninstall_manifest "$stage/partial-manifest" || true
    fi
    rm -f "$made"
    rm -rf "$stage"
}
trap rollback EXIT
new_dir() {
    local d=$1 missing=()
    while [ ! -d "$d" ]; do missing+=("$d"); d=$(dirname "$d"); done
    local i
    for ((i=${#missing[@]}-1; i>=0; i--)); do
        mkdir -- "${missing[$i]}"
        echo "d ${missing[$i]}" >> "$made"
    done
}
claim() {
    if [ -e "$1" ] || [ -L "$1" ]; then
        echo "install.sh: $1 exists and is not from this installation; remove it (or the package that owns it) first" >&2
        exit 1
    fi
    new_dir "$(dirname "$1")"
}
put() { # SRC DEST MODE
    claim "$2"
    install -m "$3" "$1" "$2"
    echo "f $2" >> "$made"
}
link() { # TARGET LINK
    claim "$2"
    ln -s "$1" "$2"
    echo "l $2" >> "$made"
}

"$bin" generate man "$stage/man" >/dev/null
gzip -9n "$stage"/man/*.1
for sh in bash zsh fish; do "$bin" generate completions "$sh" > "$stage/completion.$sh"; done

put "$bin" "$prefix/bin/squeezefs" 755
link ../bin/squeezefs "$prefix/sbin/mount.fuse.squeezefs"
link ../bin/squeezefs "$prefix/sbin/umount.fuse.squeezefs"
if [ "$helper_dir" != none ]; then
    for h in mount.fuse.squeezefs umount.fuse.squeezefs; do
        link "$prefix/bin/squeezefs" "$helper_dir/$h"
    done
fi
for page in "$stage"/man/*.1.gz; do
    put "$page" "$prefix/share/man/man1/$(basename "$page")" 644
done
put "$stage/completion.bash" "$prefix/share/bash-completion/completions/squeezefs" 644
put "$stage/completion.zsh" "$prefix/share/zsh/site-functions/_squeezefs" 644
put "$stage/completion.fish" "$prefix/share/fish/vendor_completions.d/squeezefs.fish" 644
for f in packaging/examples/*; do
    put "$f" "$prefix/share/doc/squeezefs/examples/$(basename "$f")" 644
done

claim "$manifest"
cp "$made" "$manifest"
complete=true
echo "squeezefs installed under $prefix ($(grep -c '^[fl] ' "$manifest") files and links, listed in $manifest)"
[ "$helper_dir" = none ] && echo "note: no mount helper link in /sbin: mount -t fuse.squeezefs needs $prefix/sbin/mount.fuse.squeezefs linked there"
"$prefix/bin/squeezefs" -V
