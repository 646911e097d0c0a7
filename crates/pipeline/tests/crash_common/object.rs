//! Shared by the crash tests over the object device (crash_kill_object.rs,
//! crash_power_object.rs): the pool on a real S3 server, the workload's extra operations
//! (truncate, unlink, punch), the checker of the whole pool after a crash, and the check
//! that the bucket holds exactly what the metadata references.
//!
//! Included with `#[path]` next to `mod crash_common`, whose log and per-file acceptance
//! rule it builds on. Truncates and unlinks are barriers: the child commits everything
//! (`SyncAll`), logs the operation, does it and commits again, so that after a crash every
//! file is either exactly as before the operation or exactly as after it; plain writes keep
//! crash_common's byte-level rule. Punched ranges are logged as writes of zeros (seeds with
//! the low 5 bits zero), clamped to the file's size so that they never extend it.
//!
//! Bucket rule (issue 48, item 3): after the open that follows a crash has swept, every
//! segment object in the bucket is referenced by the object map or by a complete metadata
//! backup, and every segment the map's extents or a complete backup reference is there.

#![allow(dead_code)] // each test binary uses its own part of this module

use crate::crash_common::{complete_lines, expectations, file_name, parse_log, FileExpect, LogRec, FILES};
use squeezefs_object::testing::S3Server;
use squeezefs_object::{Manifest, ObjectDevice, ObjectOptions, ObjectSpec, StoreConfig};
use squeezefs_pipeline::{Engine, MkfsOptions, ObjectSettings, OpenOptions};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const BUCKET: &str = "crash-bucket";
pub const PREFIX: &str = "pool";
/// Small segments: a txg spans several, and a full segment's upload starts while the txg
/// is still being written, so kills land between uploads, between an upload and the map's
/// commit, and between the map's commit and the engine's.
pub const SEGMENT_BYTES: u64 = 256 << 10;

/// How often the background repack runs in these tests.
pub const REPACK_EVERY: Duration = Duration::from_millis(20);

pub fn spec_str() -> String {
    format!("s3://{BUCKET}/{PREFIX}")
}

pub fn spec() -> ObjectSpec {
    ObjectSpec::parse(&spec_str()).expect("a valid spec")
}

/// The client configuration for an S3 server at `endpoint` started by `S3Server`.
pub fn store_config(endpoint: &str) -> StoreConfig {
    StoreConfig {
        endpoint: Some(endpoint.to_string()),
        region: Some("us-east-1".into()),
        access_key_id: Some(squeezefs_object::testing::ACCESS_KEY.into()),
        secret_access_key: Some(squeezefs_object::testing::SECRET_KEY.into()),
        allow_http: true,
        source: "test".into(),
        ..Default::default()
    }
}

pub fn settings(cfg: &StoreConfig, backup_interval: Option<Duration>) -> ObjectSettings {
    ObjectSettings {
        store: Some(cfg.clone()),
        cache_bytes: Some(64 << 20),
        segment_bytes: Some(SEGMENT_BYTES),
        // a store that stops answering in these tests is a harness failure: fail soon
        stall_timeout: Some(Duration::from_secs(20)),
        backup_interval,
        // far more often than the default, so that repacks run within a child's short life
        // and a kill or cut lands in them too
        repack_interval: Some(REPACK_EVERY),
        ..Default::default()
    }
}

pub fn open_options(cfg: &StoreConfig, backup_interval: Option<Duration>) -> OpenOptions {
    OpenOptions {
        compression: "zstd:1".parse().expect("zstd:1 is a valid spec"),
        // short txgs and a small dirty bound, as in crash_kill.rs: kills land in every phase
        txg_timeout: Duration::from_millis(50),
        max_dirty_bytes: 4 * 1024 * 1024,
        workers: 2,
        object: settings(cfg, backup_interval),
        ..OpenOptions::default()
    }
}

/// A new pool at `pool` whose one device is `s3://BUCKET/PREFIX`.
pub fn mkfs(pool: &Path, cfg: &StoreConfig) {
    let opts =
        MkfsOptions { devices: vec![PathBuf::from(spec_str())], object: settings(cfg, None), ..MkfsOptions::default() };
    Engine::mkfs(pool, &opts).expect("mkfs on the object device");
}

/// One line of the child's log: crash_common's records plus the barrier operations and
/// the metadata backups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rec {
    Base(LogRec),
    /// Intent: `f{file}` is about to be cut or extended to `size` (between two `SyncAll`s).
    Truncate {
        file: usize,
        size: u64,
    },
    /// Intent: `f{file}` is about to be unlinked (between two `SyncAll`s).
    Unlink(usize),
    /// Intent: a metadata backup of the state as of the last `SyncAll` is about to be taken.
    BackupBegin,
    /// That backup was written (its manifest is in the bucket).
    BackupDone,
    /// The background repack has copied this many bytes since open (a progress mark: the
    /// files' expected state does not depend on it).
    Repacked(u64),
}

impl std::fmt::Display for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rec::Base(r) => write!(f, "{r}"),
            Rec::Truncate { file, size } => write!(f, "T {file} {size}"),
            Rec::Unlink(i) => write!(f, "U {i}"),
            Rec::BackupBegin => write!(f, "B"),
            Rec::BackupDone => write!(f, "D"),
            Rec::Repacked(b) => write!(f, "P {b}"),
        }
    }
}

/// Parse a log; a torn last line is ignored.
pub fn parse(text: &str) -> Vec<Rec> {
    let mut out = Vec::new();
    for line in complete_lines(text) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok());
        out.push(match w.first().copied() {
            Some("T") => Rec::Truncate { file: num(1).expect("T file") as usize, size: num(2).expect("T size") },
            Some("U") => Rec::Unlink(num(1).expect("U file") as usize),
            Some("B") => Rec::BackupBegin,
            Some("D") => Rec::BackupDone,
            Some("P") => Rec::Repacked(num(1).expect("P bytes")),
            _ => Rec::Base(parse_log(line).pop().expect("one record")),
        });
    }
    out
}

pub type State = Vec<Option<Vec<u8>>>;

/// What the pool may hold after a crash during a child that started from `baseline`.
pub enum Expect {
    /// crash_common's rule per file.
    Files(Vec<FileExpect>),
    /// A barrier operation was under way: the files are exactly one of these states.
    OneOf(State, State),
}

/// What the log says the pool may hold, and what the newest complete metadata backup and
/// the one being written when the child died hold (`backups.0`: `None` when the child
/// completed none; `backups.1`: the state of a backup begun and not logged done).
pub struct Outcome {
    pub expect: Expect,
    pub last_backup: Option<State>,
    pub inflight_backup: Option<State>,
}

/// The exact state after a `SyncAll`: every existing file is acknowledged.
fn exact(exp: &[FileExpect]) -> State {
    exp.iter()
        .map(|e| {
            assert!(e.pending.is_empty() && e.pending_bytes.is_empty(), "a barrier must follow a SyncAll");
            e.acked.clone()
        })
        .collect()
}

pub fn outcome(baseline: &[Option<Vec<u8>>], log: &[Rec]) -> Outcome {
    let mut base: State = baseline.to_vec();
    let mut seg: Vec<LogRec> = Vec::new();
    // a barrier operation logged and not yet followed by its SyncAll: (before, after)
    let mut barrier: Option<(State, State)> = None;
    let (mut last_backup, mut inflight) = (None, None);
    for rec in log {
        match rec {
            Rec::Base(r) => {
                if barrier.is_some() {
                    assert_eq!(*r, LogRec::SyncAll, "a barrier is followed by its SyncAll");
                    base = barrier.take().expect("checked").1;
                    seg.clear();
                } else {
                    seg.push(r.clone());
                }
            }
            Rec::Truncate { file, size } => {
                let before = exact(&expectations(&base, &seg));
                let mut after = before.clone();
                after[*file].get_or_insert_with(Vec::new).resize(*size as usize, 0);
                barrier = Some((before, after));
            }
            Rec::Unlink(file) => {
                let before = exact(&expectations(&base, &seg));
                let mut after = before.clone();
                after[*file] = None;
                barrier = Some((before, after));
            }
            Rec::BackupBegin => inflight = Some(exact(&expectations(&base, &seg))),
            Rec::BackupDone => last_backup = Some(inflight.take().expect("a backup done was begun")),
            Rec::Repacked(_) => {}
        }
    }
    let expect = match barrier {
        Some((before, after)) => Expect::OneOf(before, after),
        None => Expect::Files(expectations(&base, &seg)),
    };
    Outcome { expect, last_backup, inflight_backup: inflight }
}

/// Check `actual` against `expect`; `Err` says what is wrong.
pub fn check(expect: &Expect, actual: &[Option<Vec<u8>>]) -> Result<(), String> {
    match expect {
        Expect::Files(exp) => {
            for (i, (e, a)) in exp.iter().zip(actual).enumerate() {
                crate::crash_common::check_file(&format!("f{i}"), e, a.as_deref())?;
            }
            Ok(())
        }
        Expect::OneOf(before, after) => {
            if actual == &before[..] || actual == &after[..] {
                return Ok(());
            }
            Err(format!(
                "during a truncate or unlink: the files are neither the state before it nor the one after it \
                 ({}; before: {}; after: {})",
                describe(actual),
                describe(before),
                describe(after)
            ))
        }
    }
}

/// Sizes of the files of a state, for messages.
pub fn describe(s: &[Option<Vec<u8>>]) -> String {
    s.iter()
        .enumerate()
        .map(|(i, f)| match f {
            None => format!("f{i} missing"),
            Some(d) => format!("f{i} {} bytes", d.len()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Wait until the bucket's listing has not changed for 100 ms (at most 10 s). A PUT whose
/// body reached the server before the client died may complete after it: the open after
/// a crash sweeps what it lists, so these tests reopen once such requests are done, as a
/// restart after a crash does; a PUT landing after that open's sweep is left for the next
/// one, and the bucket check here would report it.
pub fn settle(s3: &S3Server) {
    let t0 = Instant::now();
    let mut last = s3.objects(BUCKET, PREFIX);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(100) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
        let now = s3.objects(BUCKET, PREFIX);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

/// Segment numbers of object names under `PREFIX/segments/`.
fn segment_ids(names: &[String]) -> BTreeSet<u64> {
    names.iter().filter_map(|n| n.rsplit('/').next()).filter_map(|hex| u64::from_str_radix(hex, 16).ok()).collect()
}

/// The bucket rule (module comment), on a closed pool: the map read through a read-only
/// device (which sweeps nothing), the bucket listed through the server's directory.
pub fn check_bucket(s3: &S3Server, cfg: &StoreConfig, pool: &Path, what: &str) -> BucketUse {
    let objects = segment_ids(&s3.objects(BUCKET, &format!("{PREFIX}/segments")));
    let mut o = ObjectOptions::new(pool.join("object.0.cache"));
    o.read_only = true;
    let dev = ObjectDevice::open(&spec(), cfg, &squeezefs_pipeline::object_map_path(pool, 0), o)
        .unwrap_or_else(|e| panic!("{what}: opening the object map: {e}"));
    let snap = dev.snapshot_map().unwrap_or_else(|e| panic!("{what}: reading the object map: {e}"));
    let rows: BTreeSet<u64> = snap.map.segments.iter().map(|(id, _)| *id).collect();
    let mapped: BTreeSet<u64> = snap.map.referenced().into_iter().collect();
    dev.drop_snapshot(snap);
    drop(dev);
    let backup_dir = s3.data_dir().join(BUCKET).join(PREFIX);
    let mut kept: BTreeSet<u64> = BTreeSet::new();
    let mut manifests = 0;
    for name in s3.objects(BUCKET, &format!("{PREFIX}/backup")) {
        if !name.ends_with(".done") {
            continue;
        }
        let rel = name.strip_prefix(&format!("{PREFIX}/")).expect("under the prefix");
        let bytes = std::fs::read(backup_dir.join(rel)).unwrap_or_else(|e| panic!("{what}: reading {name}: {e}"));
        let m = Manifest::decode(&bytes).unwrap_or_else(|e| panic!("{what}: backup manifest {name}: {e}"));
        kept.extend(m.segments);
        manifests += 1;
    }
    let stray: Vec<u64> = objects.iter().copied().filter(|id| !rows.contains(id) && !kept.contains(id)).collect();
    assert!(
        stray.is_empty(),
        "{what}: the bucket holds segment objects {stray:x?} that neither the object map nor a kept backup \
         references (not swept at open); map rows {rows:x?}, backups keep {kept:x?}"
    );
    let lost: Vec<u64> = mapped.iter().chain(&kept).copied().filter(|id| !objects.contains(id)).collect();
    assert!(
        lost.is_empty(),
        "{what}: segments {lost:x?} are referenced (by the map's extents or a kept backup) but not in the bucket; \
         bucket holds {objects:x?}"
    );
    BucketUse { segments: objects.len(), manifests }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct BucketUse {
    pub segments: usize,
    pub manifests: usize,
}

/// Names of the workload files, for readers of this module.
pub fn names() -> Vec<Vec<u8>> {
    (0..FILES).map(file_name).collect()
}

/// The self test of the barrier and backup rules.
pub fn self_test() {
    use crate::crash_common::content;
    let log = parse("R\nC 0\nW 0 0 10 5\nA\nT 0 4\nA\nW 0 0 2 7\nS 0\nA\nU 0\nT 0 ");
    assert_eq!(log.len(), 10, "torn last line ignored");
    let o = outcome(&[None, None], &log);
    let Expect::OneOf(before, after) = o.expect else { panic!("an unlink was under way") };
    let mut want = content(5, 10);
    want.truncate(4);
    want[..2].copy_from_slice(&content(7, 2));
    assert_eq!(before, vec![Some(want.clone()), None]);
    assert_eq!(after, vec![None, None]);
    assert!(check(&Expect::OneOf(before.clone(), after.clone()), &[None, None]).is_ok());
    assert!(check(&Expect::OneOf(before.clone(), after.clone()), &before).is_ok());
    assert!(check(&Expect::OneOf(before, after), &[Some(content(5, 10)), None]).is_err());
    // backups: the state of the last SyncAll before each B
    let log = parse("R\nC 0\nW 0 0 10 5\nA\nB\nD\nW 0 0 3 6\nA\nB\n");
    let o = outcome(&[None, None], &log);
    assert_eq!(o.last_backup, Some(vec![Some(content(5, 10)), None]));
    let mut second = content(5, 10);
    second[..3].copy_from_slice(&content(6, 3));
    assert_eq!(o.inflight_backup, Some(vec![Some(second), None]));
}
