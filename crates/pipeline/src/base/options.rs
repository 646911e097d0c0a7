//! Options of `mkfs` and `open`.

use squeezefs_codec::Spec;
use std::path::PathBuf;
use std::time::Duration;

/// The metadata store's file in the pool directory.
pub const META_FILE: &str = "meta.redb";
/// The metadata store of a sealed pool, in place of `META_FILE` (meta_seal.rs).
pub const SEAL_FILE: &str = "meta.seal";
/// The pool's own growable device file, when mkfs names no device.
pub const DEFAULT_DEVICE_FILE: &str = "data.0";
/// Default record size: 128 KiB (docs/design.md §2).
pub const DEFAULT_RECORDSIZE: u32 = 128 * 1024;
/// Default largest stored size of a file kept inline in the metadata store.
pub const DEFAULT_MAX_INLINE: u32 = 2048;
/// Record sizes accepted by mkfs and for files: powers of two in this range.
pub const MIN_RECORDSIZE: u32 = 4096;
pub const MAX_RECORDSIZE: u32 = 1024 * 1024;

/// Whether `bytes` is a record size the engine supports (a power of two from
/// [`MIN_RECORDSIZE`] to [`MAX_RECORDSIZE`]).
pub fn recordsize_supported(bytes: u64) -> bool {
    bytes.is_power_of_two() && (u64::from(MIN_RECORDSIZE)..=u64::from(MAX_RECORDSIZE)).contains(&bytes)
}
/// Largest bundle size (`MkfsOptions::bundle_size`): 4 MiB, so a read of one small file
/// decodes at most that much whatever the record size.
pub const MAX_BUNDLE_SIZE: u32 = 4 << 20;

/// Whether `bytes` is a bundle size for a pool of `recordsize`-byte records: a power of two
/// from the record size to [`MAX_BUNDLE_SIZE`] (a bundle holds any member a record of the
/// pool could be, bundle.rs).
pub fn bundle_size_supported(bytes: u64, recordsize: u64) -> bool {
    bytes.is_power_of_two() && (recordsize..=u64::from(MAX_BUNDLE_SIZE)).contains(&bytes)
}

/// Bundle size of a pool of `recordsize`-byte records made without `--bundle-size`: twice
/// the record size, so reading a bundled small file decodes at most two records' worth
/// (docs/benchmarks.md, rootdir: what larger bundles save and cost).
pub fn default_bundle_size(recordsize: u32) -> u32 {
    recordsize.saturating_mul(2).min(MAX_BUNDLE_SIZE)
}

/// Default of `OpenOptions::max_delta_rows`: rows of metadata changes held in memory
/// (nsdelta.rs, ~200 B each) past which the txg driver is asked to commit.
pub const DEFAULT_MAX_DELTA_ROWS: usize = 256 * 1024;
/// Default of `OpenOptions::qos_burst` (control::qos admission.rs TUNABLES).
pub const DEFAULT_QOS_BURST: Duration = Duration::from_millis(250);
/// The range `qos-burst=` accepts.
pub const QOS_BURST_RANGE: std::ops::RangeInclusive<Duration> = Duration::from_millis(10)..=Duration::from_secs(10);

#[derive(Clone, Debug, Default)]
pub struct MkfsOptions {
    /// Device files or block devices. Empty: one growable file `data.0` inside the pool
    /// directory.
    pub devices: Vec<PathBuf>,
    /// 512 or 4096; `None`: 4096 if any device is a block device, else 512.
    pub sector: Option<u32>,
    /// Power of two between 4 KiB and 1 MiB; `None`: 128 KiB.
    pub recordsize: Option<u32>,
    /// Overwrite an existing pool / non-empty devices.
    pub force: bool,
    /// Largest stored (compressed) size of a small file kept inline; `None`: 2 KiB.
    pub max_inline: Option<u32>,
    /// Bound of a bundle's decoded bytes (bundle.rs): a power of two from the record size to
    /// [`MAX_BUNDLE_SIZE`]; `None`: [`default_bundle_size`]. Equal to the record size, the
    /// pool stays readable by builds that bound bundles by the record size.
    pub bundle_size: Option<u32>,
    /// Fixed capacity for the pool's own device file (tests of ENOSPC); `None`: growable.
    pub device_capacity: Option<u64>,
    /// Copies of the metadata store, 1 or 2 (store/meta_files.rs); `None`: 2.
    pub meta_copies: Option<u8>,
    /// Object devices (`s3://` in `devices`).
    pub object: ObjectSettings,
}

/// Settings of object devices (engine/object_dev.rs); `None` fields take crates/object's
/// defaults.
#[derive(Clone, Debug, Default)]
pub struct ObjectSettings {
    /// Endpoint and credentials; `None`: the standard AWS environment and shared files.
    pub store: Option<squeezefs_object::StoreConfig>,
    /// Bytes of the local read cache (0: none).
    pub cache_bytes: Option<u64>,
    /// Directory holding the read cache; `None`: the pool directory.
    pub cache_dir: Option<PathBuf>,
    /// How long a sync waits for a store that does not take data before failing with EIO.
    pub stall_timeout: Option<Duration>,
    /// Size at which a segment object is sealed and uploaded.
    pub segment_bytes: Option<u64>,
    /// Longest time between two metadata backups into the bucket while commits go on
    /// (engine/backup.rs; `None`: 30 s).
    pub backup_interval: Option<Duration>,
    /// How often the background repack looks for segments below half live
    /// (`None`: squeezefs_object's default, 10 s).
    pub repack_interval: Option<Duration>,
}

#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Open read-only (no writes at all, no txg).
    pub read_only: bool,
    /// Mount-wide compression for new data (`compress=` / `compress-force=`).
    pub compression: Spec,
    /// `compress-force`: compress every record, skipping the heuristic.
    pub force_compression: bool,
    /// Upper bound on dirty (not yet synced) data; writers are delayed near it.
    pub max_dirty_bytes: u64,
    /// A txg closes at the latest after this long.
    pub txg_timeout: Duration,
    /// Compress workers; 0 = one per core.
    pub workers: usize,
    /// Bytes of decompressed records kept for reads.
    pub record_cache_bytes: usize,
    /// Override the device paths recorded at mkfs (devices moved); index = device index.
    pub devices: Vec<PathBuf>,
    /// Rows of metadata changes held in memory before a commit is asked for (nsdelta.rs;
    /// writers wait past four times this).
    pub max_delta_rows: usize,
    /// Write one CSV row per record compressed to this file (mount option `trace=FILE`;
    /// crates/control trace.rs has the format). Created (truncated) at open.
    pub trace: Option<PathBuf>,
    /// QoS trees' bucket depth, seconds of their rate (mount option `qos-burst=`;
    /// control::qos AdmissionTunables::burst_secs)
    pub qos_burst: Duration,
    /// Store the short last records of files (small files, tails) compressed together in
    /// bundles (bundle.rs), in pools with `INCOMPAT_BUNDLES`. Off by default: a bundle keeps
    /// its whole space until its last member is rewritten or deleted, which suits a tree
    /// written once (`mkfs --rootdir`) better than files changed piecemeal.
    pub bundle_small_records: bool,
    /// Object devices: endpoint, read cache, stall timeout (mount options `s3-cache=`,
    /// `s3-cache-dir=`, `s3-timeout=`).
    pub object: ObjectSettings,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            compression: Spec::Off,
            force_compression: false,
            max_dirty_bytes: 256 * 1024 * 1024,
            txg_timeout: Duration::from_secs(5),
            workers: 0,
            record_cache_bytes: 64 * 1024 * 1024,
            devices: Vec::new(),
            max_delta_rows: DEFAULT_MAX_DELTA_ROWS,
            trace: None,
            qos_burst: DEFAULT_QOS_BURST,
            bundle_small_records: false,
            object: ObjectSettings::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record size against every power of two up to 16 MiB and its neighbours (never
    /// accepted: not powers of two, or below every record size): a bundle size is accepted
    /// exactly from the record size to `MAX_BUNDLE_SIZE`, and the default of every record
    /// size is accepted and twice it.
    #[test]
    fn bundle_sizes_run_from_the_record_size_to_4m() {
        for rs in (12..=20).map(|s| 1u64 << s) {
            assert!(recordsize_supported(rs));
            for b in (0..=24).map(|s| 1u64 << s) {
                let want = b >= rs && b <= u64::from(MAX_BUNDLE_SIZE);
                assert_eq!(bundle_size_supported(b, rs), want, "{b} with records of {rs}");
                for off in [b - 1, b + 1] {
                    assert!(!bundle_size_supported(off, rs), "{off} with records of {rs}");
                }
            }
            let d = default_bundle_size(rs as u32);
            assert_eq!(u64::from(d), 2 * rs);
            assert!(bundle_size_supported(u64::from(d), rs));
        }
    }
}
