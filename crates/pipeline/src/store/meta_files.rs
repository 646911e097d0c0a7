//! Which form a pool's metadata store has in its directory, and the operations that pick,
//! create, replace and check it:
//!
//!   PLAIN     meta.redb                    one redb file, unchecked (pools made before
//!                                          checked stores, and kept so until converted)
//!   CHECKED   meta.copy0 [+ meta.copy1]    redb's file as checked copies (meta_copy.rs,
//!                                          meta_mirror.rs); copy 0's header says how many
//!
//! Both copies live in the pool directory, also on pools of several devices: the devices
//! hold records only, at places the allocator hands out, and a block device has no room
//! for a growable file; the copies guard against damaged blocks of the filesystem holding
//! the directory, not against losing it.
//!
//! A new form is installed by writing every copy as `meta.copyN.new`, whole, checked and
//! synced, then renaming copy 1 before copy 0 and removing what the old form left (a plain
//! `meta.redb`, a copy 1 the new form no longer has). A crash between the renames leaves
//! copy 0 of the old form with a copy 1 of the new one, whose stamps differ: the open
//! trusts copy 0 and rewrites copy 1 from it (meta_mirror.rs), the store the old form held.
//! Copy 0 present means the checked form is complete: a `meta.redb` beside it is stale.

use crate::base::error::{PoolError, Result};
use crate::base::options::META_FILE;
use crate::store::meta_copy::{
    block_sum, copy_len, data_offset, encode_sums, random_stamp, sum_offset, CopyFile, CopyHeader, BLOCK, PER_GROUP,
};
use crate::store::meta_mirror::{Mirror, Shared, StoreCheck};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The files of a checked store's copies, copy 0 first.
pub const COPY_FILES: [&str; 2] = ["meta.copy0", "meta.copy1"];
/// The suffix of a copy being installed.
const NEW_SUFFIX: &str = ".new";
/// Copies of a new pool's store unless mkfs is told otherwise.
pub const DEFAULT_META_COPIES: u8 = 2;

/// The form of a pool's store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Plain,
    Checked { copies: u8 },
}

/// The form of the store in `pool`; `None`: there is none (not a pool, or sealed).
pub fn form(pool: &Path) -> Option<Form> {
    let c0 = pool.join(COPY_FILES[0]);
    if c0.exists() {
        let header = |p: &Path| CopyFile::open(p, false).ok().and_then(|f| f.header());
        let copies = header(&c0)
            .map(|h| h.copies)
            .or_else(|| header(&pool.join(COPY_FILES[1])).map(|h| h.copies))
            .unwrap_or(if pool.join(COPY_FILES[1]).exists() { 2 } else { 1 });
        return Some(Form::Checked { copies });
    }
    pool.join(META_FILE).exists().then_some(Form::Plain)
}

pub fn copy_paths(pool: &Path, copies: u8) -> Vec<PathBuf> {
    COPY_FILES[..copies as usize].iter().map(|n| pool.join(n)).collect()
}

/// The files a store of any form may have left in `pool`.
fn all_files(pool: &Path) -> Vec<PathBuf> {
    let mut v = vec![pool.join(META_FILE)];
    for n in COPY_FILES {
        v.push(pool.join(n));
        v.push(pool.join(format!("{n}{NEW_SUFFIX}")));
    }
    v
}

fn remove_if_present(p: &Path) -> Result<bool> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(PoolError::Remove { path: p.to_path_buf(), source }.into()),
    }
}

fn sync_dir(pool: &Path) -> Result<()> {
    std::fs::File::open(pool)
        .and_then(|d| d.sync_all())
        .map_err(|source| PoolError::SyncDir { path: pool.to_path_buf(), source }.into())
}

/// Remove every store file of `pool` (mkfs --force, sealing).
pub fn remove_all(pool: &Path) -> Result<()> {
    for p in all_files(pool) {
        remove_if_present(&p)?;
    }
    Ok(())
}

/// Remove what an interrupted install left (module comment); the holder lock held for
/// writing.
pub fn settle(pool: &Path) -> Result<()> {
    let mut removed = false;
    for n in COPY_FILES {
        removed |= remove_if_present(&pool.join(format!("{n}{NEW_SUFFIX}")))?;
    }
    if let Some(Form::Checked { copies }) = form(pool) {
        removed |= remove_if_present(&pool.join(META_FILE))?;
        for n in &COPY_FILES[copies as usize..] {
            removed |= remove_if_present(&pool.join(n))?;
        }
    }
    if removed {
        sync_dir(pool)?;
    }
    Ok(())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> crate::EngineError + '_ {
    move |source| PoolError::MetaCopy { path: path.to_path_buf(), source }.into()
}

/// A new, empty store of `copies` checked copies (1 or 2) in `pool`.
pub fn create(pool: &Path, copies: u8) -> Result<redb::Database> {
    let paths = copy_paths(pool, copies);
    crate::store::meta_mirror::create(&paths).map_err(io(&paths[0]))?;
    let shared = Shared::open(&paths, true).map_err(io(&paths[0]))?;
    Ok(redb::Builder::new().create_with_backend(Mirror(shared))?)
}

/// A store's backend: its checked copies, or its plain file.
#[derive(Debug)]
pub enum Backend {
    Checked(Mirror),
    Plain(redb::backends::FileBackend),
}

macro_rules! either {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            Backend::Checked($b) => $e,
            Backend::Plain($b) => $e,
        }
    };
}

type Bound = std::ops::Bound<u64>;

impl redb::StorageBackend for Backend {
    fn len(&self) -> std::io::Result<u64> {
        either!(self, b => b.len())
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        either!(self, b => b.read(offset, out))
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        either!(self, b => b.set_len(len))
    }
    fn sync_data(&self) -> std::io::Result<()> {
        either!(self, b => b.sync_data())
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        either!(self, b => b.write(offset, data))
    }
    fn close(&self) -> std::io::Result<()> {
        either!(self, b => b.close())
    }
    fn try_lock_range(&self, s: Bound, e: Bound) -> std::result::Result<bool, redb::BackendError> {
        either!(self, b => b.try_lock_range(s, e))
    }
    fn try_lock_shared_range(&self, s: Bound, e: Bound) -> std::result::Result<bool, redb::BackendError> {
        either!(self, b => b.try_lock_shared_range(s, e))
    }
    fn lock_range(&self, s: Bound, e: Bound) -> std::result::Result<(), redb::BackendError> {
        either!(self, b => b.lock_range(s, e))
    }
    fn lock_shared_range(&self, s: Bound, e: Bound) -> std::result::Result<(), redb::BackendError> {
        either!(self, b => b.lock_shared_range(s, e))
    }
    fn unlock_range(&self, s: Bound, e: Bound) -> std::result::Result<(), redb::BackendError> {
        either!(self, b => b.unlock_range(s, e))
    }
    fn query_lock_range(&self, s: Bound, e: Bound) -> std::result::Result<bool, redb::BackendError> {
        either!(self, b => b.query_lock_range(s, e))
    }
}

/// The store of `pool` as a redb backend: the copies (checked) or the file (plain).
pub fn backend(pool: &Path, write: bool) -> Result<(Backend, Option<Arc<Shared>>)> {
    match form(pool) {
        Some(Form::Checked { copies }) => {
            let paths = copy_paths(pool, copies);
            let cut = crate::store::meta_copy::cut_for_pool(pool);
            let shared = Shared::open_with_cut(&paths, write, cut).map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock => PoolError::AlreadyOpen { path: pool.to_path_buf() }.into(),
                _ => io(&paths[0])(e),
            })?;
            Ok((Backend::Checked(Mirror(shared.clone())), Some(shared)))
        }
        Some(Form::Plain) => {
            let p = pool.join(META_FILE);
            let f = std::fs::OpenOptions::new().read(true).write(write).open(&p).map_err(io(&p))?;
            let b =
                redb::backends::FileBackend::new(f).map_err(|e| PoolError::OpenStore { path: p.clone(), source: e })?;
            Ok((Backend::Plain(b), None))
        }
        None => Err(PoolError::NotAPool { path: pool.to_path_buf() }.into()),
    }
}

/// Write `src`'s bytes into `pool` as a checked store of `copies` copies, replacing the
/// store there (module comment).
pub fn install(pool: &Path, src: &dyn redb::StorageBackend, copies: u8) -> Result<()> {
    let first = pool.join(COPY_FILES[0]);
    let len = src.len().map_err(io(&first))?;
    let blocks = len.div_ceil(BLOCK as u64);
    let stamp = random_stamp();
    let mut news = Vec::new();
    for i in 0..copies {
        let p = pool.join(format!("{}{NEW_SUFFIX}", COPY_FILES[i as usize]));
        let f = CopyFile::create(&p).map_err(io(&p))?;
        let w = |r: std::io::Result<()>| r.map_err(io(&p));
        w(f.write_header(&CopyHeader { index: i, copies, clean: false, stamp: 0, len, seq: 0, digest: None }))?;
        w(f.set_len(copy_len(blocks)))?;
        let mut buf = vec![0u8; BLOCK];
        let mut sums = Vec::with_capacity(PER_GROUP as usize);
        let mut all = Vec::with_capacity(blocks as usize);
        for l in 0..blocks {
            let n = (len - l * BLOCK as u64).min(BLOCK as u64) as usize;
            buf.fill(0);
            src.read(l * BLOCK as u64, &mut buf[..n]).map_err(io(&first))?;
            w(f.write_at(data_offset(l), &buf))?;
            sums.push(block_sum(&buf));
            all.push(block_sum(&buf));
            if sums.len() as u64 == PER_GROUP || l + 1 == blocks {
                w(f.write_at(sum_offset(l / PER_GROUP), &encode_sums(&sums)))?;
                sums.clear();
            }
        }
        w(f.sync())?;
        let digest = Some(crate::store::meta_copy::sums_digest(&all));
        w(f.write_header(&CopyHeader { index: i, copies, clean: true, stamp, len, seq: 0, digest }))?;
        w(f.sync())?;
        news.push(p);
    }
    sync_dir(pool)?;
    for i in (0..copies as usize).rev() {
        let to = pool.join(COPY_FILES[i]);
        std::fs::rename(&news[i], &to).map_err(|source| PoolError::Replace {
            path: to.clone(),
            from: news[i].clone(),
            source,
        })?;
    }
    sync_dir(pool)?;
    settle(pool)
}

/// Check every block of every copy of `pool`'s checked store; `repair`: make them equal
/// from the intact ones (meta_mirror.rs). `None` for a plain store (nothing to check it by).
pub fn check(pool: &Path, repair: bool) -> Result<Option<StoreCheck>> {
    match form(pool) {
        Some(Form::Checked { copies }) => {
            let paths = copy_paths(pool, copies);
            let mut c = crate::store::meta_mirror::check(&paths, repair).map_err(io(&paths[0]))?;
            crate::store::meta_owner::name_owners(&paths, &mut c.lost);
            Ok(Some(c))
        }
        Some(Form::Plain) => Ok(None),
        None => Err(PoolError::NotAPool { path: pool.to_path_buf() }.into()),
    }
}

/// The file that stands for the store of `pool` in messages and sizes: copy 0, or the
/// plain file.
pub fn store_file(pool: &Path) -> PathBuf {
    match form(pool) {
        Some(Form::Checked { .. }) => pool.join(COPY_FILES[0]),
        _ => pool.join(META_FILE),
    }
}

/// The length of `store_file` (0 when absent).
pub fn store_len(pool: &Path) -> u64 {
    std::fs::metadata(store_file(pool)).map_or(0, |m| m.len())
}

/// The store of the closed pool in `pool`, opened read-write (compaction, sealing,
/// conversion; the holder lock held by the caller).
pub fn open_rw(pool: &Path) -> Result<redb::Database> {
    let (b, _) = backend(pool, true)?;
    redb::Builder::new()
        .create_with_backend(b)
        .map_err(|source| PoolError::OpenStore { path: store_file(pool), source }.into())
}

/// Install the plain redb file `from` as the checked store of `pool` (`install`), then
/// remove `from`.
pub fn install_file(pool: &Path, from: &Path, copies: u8) -> Result<()> {
    let f = std::fs::File::open(from).map_err(io(from))?;
    let b = redb::backends::FileBackend::new(f)
        .map_err(|e| PoolError::OpenStore { path: from.to_path_buf(), source: e })?;
    install(pool, &b, copies)?;
    remove_if_present(from)?;
    sync_dir(pool)
}
