#!/usr/bin/env bash
# Builds the Debian package target/debian/squeezefs_VERSION-1_ARCH.deb with cargo-deb
# (metadata in crates/cli/Cargo.toml): the release binary (built if needed, reused as it is
# otherwise), and the man pages and completions from `squeezefs generate`, as install.sh
# installs them. Prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked
cargo build --release --locked -p squeezefs
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
assets="$target/release/deb-assets"
rm -rf "$assets"
mkdir -p "$assets"
"$target/release/squeezefs" generate man "$assets/man" >/dev/null
gzip -9n "$assets"/man/*.1
for sh in bash zsh fish; do "$target/release/squeezefs" generate completions "$sh" > "$assets/completion.$sh"; done
# stripped: the release profile keeps line tables, which a package does without
cargo deb -p squeezefs --no-build --fast --strip 2>&1 | tail -n 1
