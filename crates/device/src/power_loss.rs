//! Power-loss emulation for real device files, for crash tests of code that opens its
//! devices by path (the engine): `arm(path)` registers a recorder; every `FileDevice`
//! opened on that path afterwards reports its writes and syncs to it.
//!
//! States: *recording* (writes pass through to the file; each one since the last successful
//! sync is remembered with the bytes it overwrote) → *cut* (`cut_now` / `cut_after_writes`:
//! every further write and sync fails with an I/O error, as if the disk lost power; nothing
//! more reaches the file) → `apply_crash(mode)` rewrites the file as a power loss at the cut
//! would have left it: the image at the last successful sync, plus the writes since then
//! dropped / kept / torn at sector granularity as `CrashMode` says (same rules as
//! `CrashDevice`). The redb metadata file is not covered: it has its own crash safety.
//!
//! Cost when nothing is armed: one lookup in an empty map at open, one `Option` check per
//! write and sync.

use crate::doubles::{CrashMode, SplitMix64};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub struct PowerLoss {
    path: PathBuf,
    sector: u64,
    state: Mutex<State>,
}

struct Pending {
    offset: u64,
    /// Bytes the write replaced (only the part below the file length at that moment).
    old: Vec<u8>,
    new: Vec<u8>,
}

struct State {
    cut: bool,
    writes_before_cut: Option<u64>,
    pending: Vec<Pending>,
    /// File length at the last successful sync (or when armed).
    durable_len: u64,
    writes: u64,
    syncs: u64,
}

fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<PowerLoss>>> {
    static R: OnceLock<Mutex<HashMap<PathBuf, Arc<PowerLoss>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

fn key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Start recording for the (existing) device file `path`; tears use `sector` bytes.
pub fn arm(path: &Path, sector: u64) -> std::io::Result<Arc<PowerLoss>> {
    assert!(sector > 0, "sector size must be positive");
    let len = std::fs::metadata(path)?.len();
    let p = Arc::new(PowerLoss {
        path: path.to_path_buf(),
        sector,
        state: Mutex::new(State {
            cut: false,
            writes_before_cut: None,
            pending: Vec::new(),
            durable_len: len,
            writes: 0,
            syncs: 0,
        }),
    });
    registry().lock().unwrap_or_else(|e| e.into_inner()).insert(key(path), p.clone());
    Ok(p)
}

/// Stop recording for `path` (devices already open keep their recorder).
pub fn disarm(path: &Path) {
    registry().lock().unwrap_or_else(|e| e.into_inner()).remove(&key(path));
}

/// The recorder for `path`, if armed (used by `FileDevice::open_with`).
pub(crate) fn recorder_for(path: &Path) -> Option<Arc<PowerLoss>> {
    let r = registry().lock().unwrap_or_else(|e| e.into_inner());
    if r.is_empty() {
        return None;
    }
    r.get(&key(path)).cloned()
}

impl PowerLoss {
    pub fn cut_now(&self) {
        self.lock().cut = true;
    }

    /// After `n` more successful writes, the power goes.
    pub fn cut_after_writes(&self, n: u64) {
        let mut st = self.lock();
        st.writes_before_cut = Some(n);
        if n == 0 {
            st.cut = true;
        }
    }

    pub fn is_cut(&self) -> bool {
        self.lock().cut
    }

    pub fn pending_writes(&self) -> usize {
        self.lock().pending.len()
    }

    /// (writes, syncs) seen while recording.
    pub fn counts(&self) -> (u64, u64) {
        let st = self.lock();
        (st.writes, st.syncs)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cut_error(&self) -> std::io::Error {
        std::io::Error::other("power cut (simulated by power_loss)")
    }

    /// Record and perform a write of `data` at `offset` on `file` (whose length is `len`).
    pub(crate) fn write(&self, file: &File, len: u64, data: &[u8], offset: u64) -> std::io::Result<()> {
        let mut st = self.lock();
        if st.cut {
            return Err(self.cut_error());
        }
        let old_end = (offset + data.len() as u64).min(len);
        let mut old = vec![0u8; old_end.saturating_sub(offset) as usize];
        if !old.is_empty() {
            file.read_exact_at(&mut old, offset)?;
        }
        file.write_all_at(data, offset)?;
        st.pending.push(Pending { offset, old, new: data.to_vec() });
        st.writes += 1;
        if let Some(n) = st.writes_before_cut.as_mut() {
            *n -= 1;
            if *n == 0 {
                st.cut = true;
            }
        }
        Ok(())
    }

    /// Perform `sync`; on success the pending writes become durable.
    pub(crate) fn sync(&self, file: &File) -> std::io::Result<()> {
        let mut st = self.lock();
        if st.cut {
            return Err(self.cut_error());
        }
        file.sync_data()?;
        st.pending.clear();
        st.durable_len = file.metadata()?.len();
        st.syncs += 1;
        Ok(())
    }

    /// Rewrite the file as a power loss now would leave it. Call once every device opened
    /// on the path is closed. Recording continues from the new image.
    pub fn apply_crash(&self, mode: CrashMode) -> std::io::Result<()> {
        let mut st = self.lock();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&self.path)?;
        // Undo every pending write, newest first: back to the image at the last sync.
        for w in st.pending.iter().rev() {
            f.write_all_at(&w.old, w.offset)?;
        }
        f.set_len(st.durable_len)?;
        // Redo the writes that "reached the medium".
        let mut rng = match mode {
            CrashMode::Random { seed } => Some(SplitMix64::new(seed)),
            _ => None,
        };
        for w in &st.pending {
            match (mode, rng.as_mut().map(|r| r.below(3))) {
                (CrashMode::DropUnsynced, _) | (_, Some(0)) => {}
                (CrashMode::KeepUnsynced, _) | (_, Some(1)) => f.write_all_at(&w.new, w.offset)?,
                (_, _) => {
                    let rng = rng.as_mut().expect("random mode");
                    for (off, piece) in sector_pieces(w.offset, &w.new, self.sector) {
                        if rng.below(2) == 1 {
                            f.write_all_at(piece, off)?;
                        }
                    }
                }
            }
        }
        f.sync_all()?;
        st.pending.clear();
        st.durable_len = f.metadata()?.len();
        st.cut = false;
        st.writes_before_cut = None;
        Ok(())
    }
}

/// Pieces of a write at `off` that do not cross absolute sector boundaries.
fn sector_pieces(off: u64, data: &[u8], sector: u64) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let abs = off + pos as u64;
        let n = ((sector - abs % sector) as usize).min(data.len() - pos);
        out.push((abs, &data[pos..pos + n]));
        pos += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, FileDevice};

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        std::fs::write(&path, vec![1u8; 1024]).unwrap();
        (dir, path)
    }

    #[test]
    fn drop_mode_restores_the_last_synced_image() {
        let (_d, path) = setup();
        let p = arm(&path, 512).unwrap();
        let dev = FileDevice::open(&path).unwrap();
        dev.write_at(&[2u8; 512], 512).unwrap();
        dev.sync().unwrap();
        dev.write_at(&[3u8; 1024], 256).unwrap(); // overwrite + extend
        dev.write_at(&[4u8; 10], 2000).unwrap();
        assert_eq!(p.pending_writes(), 2);
        p.cut_now();
        assert!(dev.write_at(&[5u8; 1], 0).is_err());
        assert!(dev.sync().is_err());
        drop(dev);
        p.apply_crash(CrashMode::DropUnsynced).unwrap();
        disarm(&path);
        let img = std::fs::read(&path).unwrap();
        let mut want = vec![1u8; 512];
        want.extend_from_slice(&[2u8; 512]);
        assert_eq!(img, want);
    }

    #[test]
    fn keep_mode_keeps_everything_before_the_cut() {
        let (_d, path) = setup();
        let p = arm(&path, 512).unwrap();
        let dev = FileDevice::open(&path).unwrap();
        p.cut_after_writes(2);
        dev.write_at(&[3u8; 100], 0).unwrap();
        dev.write_at(&[4u8; 100], 1000).unwrap();
        assert!(p.is_cut());
        assert!(dev.write_at(&[9u8; 100], 0).is_err());
        drop(dev);
        p.apply_crash(CrashMode::KeepUnsynced).unwrap();
        disarm(&path);
        let img = std::fs::read(&path).unwrap();
        assert_eq!(img.len(), 1100);
        assert_eq!(&img[..100], &[3u8; 100][..]);
        assert_eq!(&img[100..1000], &[1u8; 900][..]);
        assert_eq!(&img[1000..], &[4u8; 100][..]);
    }

    #[test]
    fn random_mode_tears_at_sectors_and_never_invents_bytes() {
        let mut shapes = std::collections::HashSet::new();
        for seed in 0..60 {
            let (_d, path) = setup();
            let p = arm(&path, 512).unwrap();
            let dev = FileDevice::open(&path).unwrap();
            dev.write_at(&[7u8; 2048], 0).unwrap();
            drop(dev);
            p.apply_crash(CrashMode::Random { seed }).unwrap();
            disarm(&path);
            let img = std::fs::read(&path).unwrap();
            let mut shape = Vec::new();
            for (i, s) in img.chunks(512).enumerate() {
                assert!(s.iter().all(|&b| b == s[0]), "seed {seed}: torn inside a sector");
                // Below the old length: old (1) or new (7); past it, a kept later sector
                // leaves a hole (0) where an earlier one was lost.
                let ok = s[0] == 7 || if i < 2 { s[0] == 1 } else { s[0] == 0 };
                assert!(ok, "seed {seed}: sector {i} holds {}", s[0]);
                shape.push(s[0]);
            }
            shapes.insert((img.len(), shape));
        }
        assert!(shapes.len() >= 5, "{shapes:?}");
    }

    #[test]
    fn unarmed_paths_are_not_recorded() {
        let (_d, path) = setup();
        let dev = FileDevice::open(&path).unwrap();
        dev.write_at(&[2u8; 10], 0).unwrap();
        dev.sync().unwrap();
        assert!(recorder_for(&path).is_none());
    }
}
