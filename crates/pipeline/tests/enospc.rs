//! ENOSPC: a pool on a fixed-size device. Filling it returns `EngineError::NoSpace`,
//! committed data stays readable, the pool stays consistent, and deleting files frees space
//! for new writes (after the commit that freed it).

mod crash_common;

use crash_common::{assert_fsck_clean, delete_file, random_bytes, read_all, write_new_file};
use squeezefs_pipeline::{Engine, EngineError, MkfsOptions, OpenOptions, ROOT_INO};

const MIB: u64 = 1024 * 1024;
const CAPACITY: u64 = 8 * MIB;

fn opts() -> OpenOptions {
    // Random data does not compress: what is written is what is stored.
    OpenOptions { compression: "zstd:1".parse().unwrap(), ..OpenOptions::default() }
}

/// Write `data` to a new file `name` and fsync; `Err` is where it failed.
fn write_file(e: &Engine, name: &str, data: &[u8]) -> Result<u64, EngineError> {
    let ino = write_new_file(e, name, data)?;
    e.fsync(ino)?;
    Ok(ino)
}

#[test]
fn filling_a_fixed_device_returns_no_space_and_recovers_after_delete() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    Engine::mkfs(&pool, &MkfsOptions { device_capacity: Some(CAPACITY), ..MkfsOptions::default() }).unwrap();
    let e = Engine::open(&pool, &opts()).unwrap();
    let keep = random_bytes(1, 2 * MIB);
    let keep_ino = write_file(&e, "keep", &keep).unwrap();

    // Fill with 1 MiB files until the pool says NoSpace.
    let mut fillers = Vec::new();
    let mut failed_name = None;
    for k in 0..32u64 {
        let name = format!("fill{k}");
        match write_file(&e, &name, &random_bytes(100 + k, MIB)) {
            Ok(_) => fillers.push(name),
            Err(EngineError::NoSpace) => {
                failed_name = Some(name);
                break;
            }
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
    }
    let failed_name = failed_name.expect("a fixed 8 MiB device took 32 MiB of random data");
    assert!(fillers.len() >= 3, "only {} MiB fitted next to 2 MiB", fillers.len());
    assert!((fillers.len() as u64 + 2) * MIB <= CAPACITY, "more data than capacity fitted");

    // Committed data intact; the pool is consistent.
    assert_eq!(read_all(&e, keep_ino).unwrap(), keep);
    for (k, name) in fillers.iter().enumerate() {
        let (ino, _) = e.lookup(ROOT_INO, name.as_bytes()).unwrap().unwrap();
        assert_eq!(read_all(&e, ino).unwrap(), random_bytes(100 + k as u64, MIB), "{name}");
    }
    assert_fsck_clean(&e, "after ENOSPC");

    // Delete the partial file and the fillers; after the commit that frees them, new data fits.
    delete_file(&e, failed_name.as_bytes()).unwrap();
    for name in &fillers {
        delete_file(&e, name.as_bytes()).unwrap();
    }
    e.sync().unwrap();
    let fresh = random_bytes(2, 3 * MIB);
    let fresh_ino = write_file(&e, "fresh", &fresh).expect("space freed by deletes is reusable");
    assert_eq!(read_all(&e, fresh_ino).unwrap(), fresh);
    assert_fsck_clean(&e, "after delete and rewrite");
    e.close().unwrap();
    drop(e); // releases the pool lock

    // And all of it survives a reopen.
    let e = Engine::open(&pool, &opts()).unwrap();
    assert_eq!(read_all(&e, keep_ino).unwrap(), keep);
    assert_eq!(read_all(&e, fresh_ino).unwrap(), fresh);
    assert_fsck_clean(&e, "after reopen");
    e.close().unwrap();
}

/// Regression (byte packing): bytes freed inside sectors that still hold live
/// records were counted as free space, although the allocator hands out only whole free
/// sectors. Writes were accepted that no txg could place: the txg failed with NoSpace and
/// the pool was suspended, losing the accepted data. Now such writes are refused up front.
#[test]
fn free_bytes_in_shared_sectors_are_not_offered_to_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    // no inline records: every small file is a device record, packed byte by byte
    let mkfs = MkfsOptions { device_capacity: Some(MIB), max_inline: Some(0), ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e =
        Engine::open(&pool, &OpenOptions { compression: "none".parse().unwrap(), ..OpenOptions::default() }).unwrap();
    let mut names = Vec::new();
    for k in 0..10_000u64 {
        let name = format!("s{k}");
        match write_new_file(&e, &name, &random_bytes(k, 300)) {
            Ok(_) => names.push(name),
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
        if k % 500 == 499 {
            e.sync().unwrap();
        }
    }
    e.sync().unwrap();
    assert!(names.len() > 2000, "only {} files of 300 bytes fitted in 1 MiB", names.len());
    // every other file goes: ~half the bytes are free, but no sector is wholly free
    for name in names.iter().step_by(2) {
        delete_file(&e, name.as_bytes()).unwrap();
    }
    e.sync().unwrap();
    assert_fsck_clean(&e, "after the deletes");
    let big = random_bytes(7, 256 * 1024);
    match write_new_file(&e, "big", &big) {
        Err(EngineError::NoSpace) => {}
        Ok(_) => panic!("256 KiB accepted with no whole sector free"),
        Err(other) => panic!("expected NoSpace, got {other}"),
    }
    // the pool is not suspended: syncs go on, and freeing whole sectors makes room again
    e.sync().unwrap();
    for name in names.iter().skip(1).step_by(2) {
        delete_file(&e, name.as_bytes()).unwrap();
    }
    e.sync().unwrap();
    let ino = write_new_file(&e, "big2", &big).unwrap();
    e.fsync(ino).unwrap();
    assert_eq!(read_all(&e, ino).unwrap(), big);
    assert_fsck_clean(&e, "at the end");
}

fn raw_opts() -> OpenOptions {
    OpenOptions { compression: "none".parse().unwrap(), ..OpenOptions::default() }
}

/// Free space made only of whole sectors that are not contiguous was counted
/// (about half the device) and admitted a 128 KiB record, but no 256 contiguous free sectors
/// existed, so the txg failed in `place` and the pool was suspended, losing the txg's writes.
#[test]
fn fragmented_free_sectors_do_not_suspend_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let mkfs = MkfsOptions { device_capacity: Some(MIB), max_inline: Some(0), ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    // 1 KiB files: each record is exactly two 512-byte sectors, packed back to back
    let mut names = Vec::new();
    for k in 0..800u64 {
        let name = format!("s{k}");
        write_new_file(&e, &name, &random_bytes(k, 1024)).unwrap();
        names.push(name);
    }
    e.sync().unwrap();
    let whole_free_before = e.statfs().unwrap().total_bytes;
    // every other file goes: ~400 KiB more free in whole sectors, in pieces of 2 sectors
    for name in names.iter().step_by(2) {
        delete_file(&e, name.as_bytes()).unwrap();
    }
    e.sync().unwrap();
    let st = e.statfs().unwrap();
    assert_eq!(st.total_bytes, whole_free_before, "the total counts every whole sector");
    // what statfs offers is what a write gets: here less than one record
    let free = st.free_bytes;
    assert!(free < 128 * 1024, "statfs offers {free} bytes, in pieces no record fits");
    let big = random_bytes(7, 128 * 1024);
    match write_new_file(&e, "big", &big) {
        // refused up front: fine
        Err(EngineError::NoSpace) => {}
        Ok(_) => {
            // accepted: the txg must place it (or at least not suspend the pool)
            match e.sync() {
                Ok(()) => {}
                Err(err) => panic!("a write accepted with {free} bytes 'free' made the txg fail: {err}"),
            }
        }
        Err(other) => panic!("expected NoSpace or success, got {other}"),
    }
    // small files still fit in what statfs offers
    for k in 0..(free / 1024).saturating_sub(2) {
        write_new_file(&e, &format!("t{k}"), &random_bytes(1000 + k, 1024)).unwrap();
    }
    e.sync().expect("the pool must not be suspended");
}

/// Make a pool as builds before `PACKED_BYTES` did: mkfs, then clear the feature bit in the
/// (still empty) pool's superblock.
fn mkfs_sector_packed(pool: &std::path::Path, mkfs: &MkfsOptions) {
    Engine::mkfs(pool, mkfs).unwrap();
    use redb::ReadableTable;
    use squeezefs_meta::{tables, Features, Superblock};
    let db = Engine::open_meta_store(pool).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(tables::SUPERBLOCK).unwrap();
        let mut sb = Superblock::decode(t.get(0u8).unwrap().unwrap().value()).unwrap();
        sb.features.incompat &= !Features::INCOMPAT_PACKED_BYTES;
        t.insert(0u8, &sb.encode()[..]).unwrap();
    }
    tx.commit().unwrap();
}

/// In a sector-packed (old) pool a record of 513 stored bytes occupies 1024
/// bytes, but write admission compared free space with the *logical* dirty bytes: ~2x more
/// data was accepted than the txg could place; it failed with NoSpace and suspended the pool.
#[test]
fn old_pool_write_admission_counts_sector_footprints() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let mkfs = MkfsOptions { device_capacity: Some(MIB), max_inline: Some(0), ..MkfsOptions::default() };
    mkfs_sector_packed(&pool, &mkfs);
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let mut accepted = 0u64;
    for k in 0..1500u64 {
        match write_new_file(&e, &format!("s{k}"), &random_bytes(k, 513)) {
            Ok(_) => accepted += 1,
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
    }
    match e.sync() {
        Ok(()) => {}
        Err(err) => panic!("{accepted} files of 513 bytes were accepted, then the txg failed: {err}"),
    }
}

/// Unmounts the tmpfs it mounted when dropped (also when the test panics).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// A tmpfs of `size` bytes, or `None` where mounting is not allowed (not root).
    fn mount(size: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap().keep();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A pool on a growable device file. Write admission uses the host
/// filesystem's free space, cached by `Space::refresh_host`, which ran only at the start of a
/// txg's sync (and at open). After txg N had written its data, the cache still showed the
/// space N took while the dirty bytes no longer counted N's bytes: the next writes were
/// admitted against space that was gone, and the txg that synced them failed on the host's
/// ENOSPC and suspended the pool, instead of the write returning NoSpace.
#[test]
fn growable_pool_admission_sees_the_host_space_the_last_txg_took() {
    let Some(fs) = Tmpfs::mount(16 * MIB) else {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let pool = fs.0.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let a = write_new_file(&e, "a", &random_bytes(1, 6 * MIB)).unwrap();
    e.fsync(a).unwrap();
    // the host holds ~6 MiB of data now; ~9 MiB are left, but the cache says ~15
    let mut refused = false;
    match write_new_file(&e, "b", &random_bytes(2, 12 * MIB)) {
        Ok(_) => {}
        Err(EngineError::NoSpace) => refused = true,
        Err(other) => panic!("expected NoSpace or success, got {other}"),
    }
    let r = e.sync();
    let _ = e.close();
    drop(e);
    assert!(r.is_ok(), "12 MiB accepted with ~9 MiB left on the host (refused: {refused}): {}", r.unwrap_err());
}

/// A short record that is not the file's last (a write ending inside a
/// record of a file that is, or later becomes, longer: a write into a hole, or past a gap)
/// was charged its buffer's few bytes at admission, but the quiesce pads every record to its
/// logical length (`normalize`) and the txg stores all of it: one byte written at the start
/// of each record took a whole record of raw space. Writes far beyond the free space were
/// accepted, the txg failed in placement with NoSpace, and the pool was suspended.
#[test]
fn short_records_inside_a_file_are_charged_their_padded_length() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let mkfs = MkfsOptions { device_capacity: Some(MIB), recordsize: Some(4096), ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let ino = write_new_file(&e, "sparse", b"x").unwrap();
    // one byte at the start of each record: each becomes a 4 KiB raw record at the quiesce
    let mut accepted = 0u64;
    for k in 1..1024u64 {
        match e.write(ino, k * 4096, b"y") {
            Ok(()) => accepted += 1,
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
    }
    match e.sync() {
        Ok(()) => {}
        Err(err) => {
            panic!("{accepted} one-byte records of 4 KiB each were accepted in 1 MiB, then the txg failed: {err}")
        }
    }
    assert_fsck_clean(&e, "after the fill");
}

/// The same through `set_size`: growing a file makes its short last record a whole one
/// (padded at the quiesce); a write of one byte at the end and a grow by a record, again
/// and again, took a record of space per byte charged.
#[test]
fn growing_a_file_past_its_short_last_record_is_charged_the_padding() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let mkfs = MkfsOptions { device_capacity: Some(MIB), recordsize: Some(4096), ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let ino = write_new_file(&e, "grown", b"x").unwrap();
    let mut accepted = 0u64;
    for k in 1..1024u64 {
        let r = e.write(ino, k * 4096 - 2048, b"y").and_then(|()| e.set_size(ino, k * 4096 + 1));
        match r {
            Ok(()) => accepted += 1,
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
    }
    match e.sync() {
        Ok(()) => {}
        Err(err) => panic!("{accepted} grows past a short record were accepted in 1 MiB, then the txg failed: {err}"),
    }
    assert_fsck_clean(&e, "after the fill");
}

/// A growable device file on another filesystem than the pool directory
/// (`mkfs --device /other/fs/file`). Write admission counted the free space of the pool
/// directory's filesystem only, and device choice saw every growable device as unbounded:
/// when the device's own filesystem filled, the txg failed on its ENOSPC and suspended the
/// pool, although the write should have been refused, or placed on a device with room.
#[test]
fn growable_devices_on_other_filesystems_count_their_own_host_space() {
    let Some(small) = Tmpfs::mount(4 * MIB) else {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // alone: the write is refused (or fits), the pool is not suspended
    let pool = dir.path().join("pool1");
    let mkfs = MkfsOptions { devices: vec![small.0.join("dev")], ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let r = write_new_file(&e, "big", &random_bytes(1, 8 * MIB));
    assert!(matches!(r, Ok(_) | Err(EngineError::NoSpace)), "{r:?}");
    let s = e.sync();
    e.close().ok();
    drop(e);
    assert!(s.is_ok(), "8 MiB accepted for a device on a 4 MiB filesystem: {}", s.unwrap_err());
    std::fs::remove_file(small.0.join("dev")).unwrap();
    // beside a device with room: records go there once the small filesystem is full
    let pool = dir.path().join("pool2");
    let mkfs = MkfsOptions { devices: vec![dir.path().join("dev0"), small.0.join("dev1")], ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    for k in 0..12u64 {
        let data = random_bytes(10 + k, MIB);
        let ino = write_new_file(&e, &format!("f{k}"), &data).unwrap_or_else(|err| panic!("file {k}: {err}"));
        e.fsync(ino).unwrap_or_else(|err| panic!("fsync of file {k} with room on device 0: {err}"));
    }
    assert_fsck_clean(&e, "after filling the small filesystem");
    e.close().unwrap();
}

/// A file of whole 4 KiB records written until the 1 MiB device is refused, then committed.
fn full_pool_with_one_file(pool: &std::path::Path) -> (std::sync::Arc<Engine>, u64, u64) {
    let mkfs = MkfsOptions {
        device_capacity: Some(MIB),
        recordsize: Some(4096),
        max_inline: Some(0),
        ..MkfsOptions::default()
    };
    Engine::mkfs(pool, &mkfs).unwrap();
    let e = Engine::open(pool, &raw_opts()).unwrap();
    let ino = write_new_file(&e, "full", b"").unwrap();
    let mut records = 0u64;
    loop {
        match e.write(ino, records * 4096, &random_bytes(records, 4096)) {
            Ok(()) => records += 1,
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
    }
    e.sync().unwrap();
    assert!(records > 100, "only {records} records fitted");
    (e, ino, records)
}

/// A hole punch
/// covering part of a committed record copies the whole record into the open txg, which
/// stores it anew (copy on write: the old copy is freed only by the commit), but admission
/// charged a punch nothing (and a write its own bytes only). One-byte punches across a full
/// pool were accepted, the txg failed with NoSpace in placement and the pool was suspended.
#[test]
fn partial_hole_punches_of_committed_records_are_charged_the_records_they_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (e, ino, records) = full_pool_with_one_file(&dir.path().join("pool"));
    let mut accepted = 0;
    for k in 0..records {
        match e.punch_hole(ino, k * 4096 + 100, 1) {
            Ok(()) => accepted += 1,
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("punching: expected NoSpace, got {other}"),
        }
    }
    match e.sync() {
        Ok(()) => {}
        Err(err) => panic!("{accepted} one-byte punches in 4 KiB records accepted on a full pool, then: {err}"),
    }
    assert_fsck_clean(&e, "after the punches");
}

/// The same through `set_size`: a truncation inside a committed record stores the record's
/// kept part anew, and was never charged.
#[test]
fn truncations_inside_committed_records_are_charged_the_records_they_copy() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let mkfs = MkfsOptions {
        device_capacity: Some(MIB),
        recordsize: Some(4096),
        max_inline: Some(0),
        ..MkfsOptions::default()
    };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    // files of two whole records until the device is full
    let mut inos = Vec::new();
    for k in 0..1000u64 {
        match write_new_file(&e, &format!("t{k}"), &random_bytes(k, 8192)) {
            Ok(ino) => inos.push(ino),
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("filling: expected NoSpace, got {other}"),
        }
    }
    e.sync().unwrap();
    // cutting each file inside its second record rewrites that record
    let mut accepted = 0;
    for &ino in &inos {
        match e.set_size(ino, 4096 + 4000) {
            Ok(()) => accepted += 1,
            Err(EngineError::NoSpace) => break,
            Err(other) => panic!("truncating: expected NoSpace, got {other}"),
        }
    }
    match e.sync() {
        Ok(()) => {}
        Err(err) => panic!("{accepted} truncations inside 4 KiB records accepted on a full pool, then: {err}"),
    }
    assert_fsck_clean(&e, "after the truncations");
}

/// Data through the pool until it is refused (devices or metadata room); returns the count.
fn fill_with_data(e: &Engine, size: u64) -> u64 {
    let mut k = 0u64;
    loop {
        match write_new_file(e, &format!("d{k}"), &random_bytes(k, size)).and_then(|ino| e.fsync(ino)) {
            Ok(()) => k += 1,
            Err(EngineError::NoSpace | EngineError::NoMetaSpace { .. }) => return k,
            Err(other) => panic!("filling with data: expected a refusal for space, got {other}"),
        }
        assert!(k < 10_000, "the filesystem never filled");
    }
}

/// Empty files with 200-byte names until the metadata room refuses one; returns the count.
fn fill_with_names(e: &Engine, prefix: &str) -> u64 {
    let mut n = 0u64;
    loop {
        let name = format!("{prefix}{n:0>200}");
        match crash_common::create_file(e, name.as_bytes()) {
            Ok(_) => n += 1,
            Err(EngineError::NoMetaSpace { reserve, .. }) => {
                assert!(reserve >= 1 << 20, "reserve {reserve}");
                return n;
            }
            Err(other) => panic!("create {n}: expected NoMetaSpace, got {other}"),
        }
        assert!(n < 500_000, "creates never refused");
    }
}

/// Admission counted the devices only, never the metadata store. On a pool
/// whose directory's filesystem was full of data, 1 000 creates made the txg's redb commit
/// fail with ENOSPC: the pool was suspended, every later call failed, and the creates
/// acknowledged since the last commit were lost. Now metadata changes are refused with
/// NoMetaSpace once only the reserve is left, and deletions can still use the reserve.
#[test]
fn metadata_ops_on_a_full_host_filesystem_get_no_space_not_a_suspended_pool() {
    let Some(fs) = Tmpfs::mount(16 * MIB) else {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let pool = fs.0.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    // df: the reserve is free but not available to new data
    let st = e.statfs().unwrap();
    assert!(st.free_bytes >= st.avail_bytes + MIB, "free {} avail {}", st.free_bytes, st.avail_bytes);
    let files = fill_with_data(&e, 256 * 1024);
    assert!(files >= 20, "only {files} files of 256 KiB on a 16 MiB filesystem");
    e.sync().unwrap();
    let names = fill_with_names(&e, "a");
    if let Err(err) = e.sync() {
        panic!("{names} creates accepted on a full filesystem, then the commit failed: {err}");
    }
    assert_fsck_clean(&e, "after the creates were refused");
    // deletions go through on the reserve, and their space serves new names
    for k in 0..files / 2 {
        delete_file(&e, format!("d{k}").as_bytes()).unwrap_or_else(|err| panic!("delete d{k}: {err}"));
    }
    e.sync().unwrap();
    let more = fill_with_names(&e, "b");
    assert!(more > names, "deleting {} MiB of data made room for {more} names only", files / 8);
    e.sync().unwrap();
    assert_fsck_clean(&e, "after deleting and creating again");
    e.close().unwrap();
    drop(e);
    // every acknowledged name is there after a reopen
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    for (prefix, count) in [("a", names), ("b", more)] {
        for n in [0, count / 2, count - 1] {
            let name = format!("{prefix}{n:0>200}");
            assert!(e.lookup(ROOT_INO, name.as_bytes()).unwrap().is_some(), "{prefix}{n} lost");
        }
    }
    assert_fsck_clean(&e, "after the reopen");
}

/// Another program fills the pool directory's filesystem: the pool refuses new names with
/// NoMetaSpace while deletions, which may use the reserve, still commit.
#[test]
fn deletions_commit_on_the_metadata_reserve_when_another_program_filled_the_filesystem() {
    let Some(fs) = Tmpfs::mount(16 * MIB) else {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let pool = fs.0.join("pool");
    Engine::mkfs(&pool, &MkfsOptions::default()).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    for k in 0..50 {
        crash_common::create_file(&e, format!("keep{k}").as_bytes()).unwrap();
    }
    e.sync().unwrap();
    // leave half of the 1 MiB reserve free, outside the pool
    let free = statvfs_free(&fs.0);
    std::fs::write(fs.0.join("other"), vec![1u8; (free - MIB / 2) as usize]).unwrap();
    // a txg measures the filesystem again (so does a change a second after the last figure)
    crash_common::create_file(&e, b"trigger").unwrap();
    e.sync().unwrap();
    match crash_common::create_file(&e, b"new") {
        Err(EngineError::NoMetaSpace { .. }) => {}
        other => panic!("a create with half the reserve left: expected NoMetaSpace, got {other:?}"),
    }
    for k in 0..50 {
        delete_file(&e, format!("keep{k}").as_bytes()).unwrap_or_else(|err| panic!("delete keep{k}: {err}"));
    }
    e.sync().unwrap_or_else(|err| panic!("deletions on the reserve did not commit: {err}"));
    assert_fsck_clean(&e, "after the deletions");
    std::fs::remove_file(fs.0.join("other")).unwrap();
    e.sync().unwrap();
    crash_common::create_file(&e, b"new").unwrap();
    e.close().unwrap();
}

/// Small files live inline in the metadata store: with the device on another filesystem,
/// their data fills the store's filesystem, not the device, and is refused there before a
/// commit can fail.
#[test]
fn inline_small_files_cannot_overfill_the_metadata_filesystem() {
    let Some(fs) = Tmpfs::mount(8 * MIB) else {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pool = fs.0.join("pool");
    let mkfs = MkfsOptions { devices: vec![dir.path().join("dev")], ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let mut n = 0u64;
    loop {
        match write_new_file(&e, &format!("small{n}"), &random_bytes(n, 2000)) {
            Ok(_) => n += 1,
            Err(EngineError::NoMetaSpace { .. }) => break,
            Err(other) => panic!("small file {n}: expected NoMetaSpace, got {other}"),
        }
        assert!(n < 100_000, "never refused");
    }
    e.sync().unwrap_or_else(|err| panic!("{n} small files accepted, then the commit failed: {err}"));
    assert!(n > 500, "only {n} small files of 2000 bytes on an 8 MiB filesystem");
    let (ino, _) = e.lookup(ROOT_INO, format!("small{}", n - 1).as_bytes()).unwrap().unwrap();
    assert_eq!(read_all(&e, ino).unwrap(), random_bytes(n - 1, 2000));
    assert_fsck_clean(&e, "after the small files");
    e.close().unwrap();
}

fn statvfs_free(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("stat").args(["-f", "-c", "%a %S"]).arg(path).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut it = text.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    it.next().unwrap() * it.next().unwrap()
}

/// Take the rest of `dir`'s filesystem, as another program would.
fn fill_host(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("other-program");
    let free = statvfs_free(dir);
    let ok = std::process::Command::new("fallocate").args(["-l", &free.to_string()]).arg(&path).status().unwrap();
    assert!(ok.success());
    path
}

/// A pool whose only device is a growable file on `fs`, holding a 4 MiB file `f` written
/// (admitted) but not synced.
fn pool_with_unsynced_file_on(
    fs: &Tmpfs,
    dir: &std::path::Path,
) -> (std::sync::Arc<Engine>, std::path::PathBuf, u64, Vec<u8>) {
    let pool = dir.join("pool");
    let mkfs = MkfsOptions { devices: vec![fs.0.join("dev")], ..MkfsOptions::default() };
    Engine::mkfs(&pool, &mkfs).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let data = random_bytes(5, 4 * MIB);
    let ino = write_new_file(&e, "f", &data).unwrap();
    (e, pool, ino, data)
}

/// Another program filled the filesystem of a growable device between a
/// write's admission and its txg. The txg failed to place or write the records and the pool
/// was suspended: the write was lost at close, although nothing of the txg had been
/// committed and the room came back a moment later. Now the txg waits for room (writes and
/// syncs get NoSpace meanwhile) and is tried again every second; it commits once room is
/// back, and nothing is lost.
#[test]
fn a_txg_that_finds_no_room_waits_for_room_instead_of_losing_its_data() {
    let Some(fs) = Tmpfs::mount(16 * MIB) else {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (e, pool, ino, data) = pool_with_unsynced_file_on(&fs, dir.path());
    let other = fill_host(&fs.0);
    match e.sync() {
        Err(EngineError::NoSpace) => {}
        other => panic!("sync with the device's filesystem full: expected NoSpace, got {other:?}"),
    }
    assert!(matches!(e.write(ino, 0, b"more"), Err(EngineError::NoSpace)));
    assert_eq!(read_all(&e, ino).unwrap(), data, "the waiting txg's data reads back from memory");
    std::fs::remove_file(other).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match e.sync() {
            Ok(()) => break,
            Err(EngineError::NoSpace) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            other => panic!("after the room came back: {other:?}"),
        }
    }
    e.write(ino, 0, b"more").unwrap();
    e.close().unwrap();
    drop(e);
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    let mut want = data;
    want[..4].copy_from_slice(b"more");
    assert_eq!(read_all(&e, ino).unwrap(), want);
    assert_fsck_clean(&e, "after the retried txg");
}

/// If the room does not come back, close tries once more, then reports the loss (the
/// pool on disk stays at its last commit, consistent).
#[test]
fn a_txg_still_without_room_at_close_is_reported_lost() {
    let Some(fs) = Tmpfs::mount(16 * MIB) else {
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (e, pool, _, _) = pool_with_unsynced_file_on(&fs, dir.path());
    let other = fill_host(&fs.0);
    assert!(matches!(e.sync(), Err(EngineError::NoSpace)));
    match e.close() {
        Err(EngineError::Suspended(cause)) => assert!(matches!(*cause, EngineError::NoSpace), "{cause}"),
        other => panic!("close with the txg still waiting for room: {other:?}"),
    }
    drop(e);
    std::fs::remove_file(other).unwrap();
    let e = Engine::open(&pool, &raw_opts()).unwrap();
    assert!(e.lookup(ROOT_INO, b"f").unwrap().is_none(), "the lost txg's file is not in the pool");
    assert_fsck_clean(&e, "after the lost txg");
}

/// Found with examples/fragmented_writes.rs: while a txg synced, its records already placed
/// on the device were counted twice by admission, once in the dirty bytes (until the txg's
/// release) and once as used device space, so a pool with room for a write refused it for
/// as long as the device was busy writing the txg.
#[test]
fn a_syncing_txg_is_not_counted_twice_by_admission() {
    use squeezefs_device::doubles::{MemDevice, Throttled};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    // 32 MiB at 16 MiB/s: the txg writes for about 2 s after placing everything
    let dev = Arc::new(Throttled::new(MemDevice::with_capacity("slow", 64 * MIB), 0));
    Engine::mkfs_with_devices(&pool, vec![dev.clone()], &MkfsOptions::default()).unwrap();
    let e = Engine::open_with_devices(&pool, vec![dev.clone()], &raw_opts()).unwrap();
    let a = random_bytes(1, 32 * MIB);
    write_new_file(&e, "a", &a).unwrap();
    dev.set_rate(16 * MIB);
    let syncing = {
        let e = e.clone();
        std::thread::spawn(move || e.sync())
    };
    // wait until the txg has placed all of `a` (its space is taken; the writes go on)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while e.device_stats()[0].used_bytes < 32 * MIB && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // 24 MiB fit beside the 32 placed (64 MiB device); counted twice they did not
    let b = random_bytes(2, 24 * MIB);
    let r = write_new_file(&e, "b", &b);
    syncing.join().unwrap().unwrap();
    dev.set_rate(0);
    r.unwrap_or_else(|err| panic!("24 MiB refused on a 64 MiB device holding 32 MiB: {err}"));
    e.sync().unwrap();
    let (ino, _) = e.lookup(ROOT_INO, b"b").unwrap().unwrap();
    assert_eq!(read_all(&e, ino).unwrap(), b);
    assert_fsck_clean(&e, "after both files");
}
