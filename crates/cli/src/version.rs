//! `squeezefs --version`: the release, the commit it was built from (build.rs), the
//! compression libraries linked in, and the on-disk format versions this build reads and
//! writes, taken from the constants the encoders and decoders themselves check.
use squeezefs_device::FORMAT_VERSION as DEVICE_HEADER_VERSION;
use squeezefs_meta::superblock::{DEVICE_RECORD_VERSION, SUPERBLOCK_VERSION};
use squeezefs_meta::{auto_start, background, bundle, encode, extent, seal, Features};
use std::sync::OnceLock;

/// The text after `squeezefs ` that `--version` prints (`-V` prints the release alone).
pub fn long_version() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(render)
}

fn render() -> String {
    let mut rows: Vec<(String, String)> = vec![("commit".into(), env!("SQUEEZEFS_GIT_COMMIT").into())];
    for lib in squeezefs_codec::library_versions() {
        rows.push((lib.name.into(), lib.version));
    }
    rows.push((
        "pool format".into(),
        format!(
            "superblock {SUPERBLOCK_VERSION}, device record {DEVICE_RECORD_VERSION}, device header \
             {DEVICE_HEADER_VERSION}, sealed metadata (meta.seal) {}: each read and written",
            seal::VERSION
        ),
    ));
    rows.push((
        "rows".into(),
        format!(
            "inode {}, directory entry {}, extent {}, bundle {}, background cursor {}, auto start {}: \
             all read; the highest written (the first three at {} in a pool without compact rows)",
            span(encode::INODE_VERSION, encode::INODE_VERSION_COMPACT),
            span(encode::DIRENT_VERSION, encode::DIRENT_VERSION_COMPACT),
            span(extent::EXTENT_VERSION, extent::EXTENT_VERSION_COMPACT),
            bundle::BUNDLE_VERSION,
            background::BG_CURSOR_VERSION,
            auto_start::AUTO_START_VERSION,
            encode::INODE_VERSION,
        ),
    ));
    rows.push((
        "features".into(),
        format!(
            "opens pools with incompat {:#x}, ro_compat {:#x}, compat {:#x} (or fewer); mkfs sets incompat {:#x}",
            Features::KNOWN_INCOMPAT,
            Features::KNOWN_RO_COMPAT,
            Features::KNOWN_COMPAT,
            Features::current().incompat,
        ),
    ));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut text = env!("CARGO_PKG_VERSION").to_string();
    for (k, v) in rows {
        text.push_str(&format!("\n{k:width$}  {v}"));
    }
    text
}

/// `1-2`, or `1` when the oldest and newest versions are one.
fn span(oldest: u8, newest: u8) -> String {
    if oldest == newest {
        oldest.to_string()
    } else {
        format!("{oldest}-{newest}")
    }
}
