//! `CrashDevice`: an in-memory device that remembers which writes were made durable by
//! `sync`, and produces the image a power loss would leave behind.
//!
//! States of a write: *pending* (written, not yet synced; visible to reads) → *durable*
//! (a later `sync` returned Ok). `crash_image(mode)` starts from the durable image and
//! applies the pending writes as `mode` says:
//! * `DropUnsynced`: all pending writes lost (a disk that caches everything);
//! * `KeepUnsynced`: all reached the medium (a crash right after the last write);
//! * `Random { seed }`: each pending write independently dropped, kept, or torn; a torn
//!   write keeps a random subset of its sectors (sector = the device's sector size, aligned
//!   to absolute offsets). Pending writes may thus land in any order, as with a volatile
//!   write cache. Same seed, same image.
//!
//! `cut_power_after(n)` emulates the power going away mid-run (redb's crash tests do the
//! same): after `n` more successful writes, every write and sync fails with an I/O error,
//! so the code under test stops where it stands; reads still work.

use super::mem::{apply, check_read, check_write};
use super::{MemDevice, SplitMix64};
use crate::{Device, DeviceError};
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    DropUnsynced,
    KeepUnsynced,
    Random { seed: u64 },
}

pub struct CrashDevice {
    name: String,
    sector: u64,
    capacity: Option<u64>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(usize, Vec<u8>)>,
    writes: u64,
    syncs: u64,
    /// Writes still allowed before the power goes; `None` = no cut planned.
    writes_before_cut: Option<u64>,
}

impl State {
    fn powered(&self) -> bool {
        self.writes_before_cut != Some(0)
    }
}

impl CrashDevice {
    /// `sector` is the tear granularity (512 or 4096 in practice; must be > 0).
    pub fn new(name: &str, sector: u64) -> Self {
        Self::with_image(name, sector, Vec::new(), None)
    }

    /// A device whose durable contents start as `image` (e.g. a previous crash image).
    pub fn with_image(name: &str, sector: u64, image: Vec<u8>, capacity: Option<u64>) -> Self {
        assert!(sector > 0, "sector size must be positive");
        Self {
            name: name.to_string(),
            sector,
            capacity,
            state: Mutex::new(State { current: image.clone(), durable: image, ..Default::default() }),
        }
    }

    /// After `n` more successful writes, all writes and syncs fail.
    pub fn cut_power_after(&self, n: u64) {
        self.lock().writes_before_cut = Some(n);
    }

    pub fn power_is_cut(&self) -> bool {
        !self.lock().powered()
    }

    pub fn pending_writes(&self) -> usize {
        self.lock().pending.len()
    }

    pub fn write_count(&self) -> u64 {
        self.lock().writes
    }

    pub fn sync_count(&self) -> u64 {
        self.lock().syncs
    }

    /// The device contents after a power loss now.
    pub fn crash_image(&self, mode: CrashMode) -> Vec<u8> {
        let st = self.lock();
        let mut img = st.durable.clone();
        match mode {
            CrashMode::DropUnsynced => {}
            CrashMode::KeepUnsynced => {
                for (off, data) in &st.pending {
                    apply(&mut img, *off, data);
                }
            }
            CrashMode::Random { seed } => {
                let mut rng = SplitMix64::new(seed);
                for (off, data) in &st.pending {
                    match rng.below(3) {
                        0 => {}
                        1 => apply(&mut img, *off, data),
                        _ => {
                            for (piece_off, piece) in sector_pieces(*off, data, self.sector) {
                                if rng.below(2) == 1 {
                                    apply(&mut img, piece_off, piece);
                                }
                            }
                        }
                    }
                }
            }
        }
        img
    }

    /// `crash_image` as a fresh growable/fixed `MemDevice` with this device's name.
    pub fn crash_device(&self, mode: CrashMode) -> MemDevice {
        MemDevice::from_bytes(&self.name, self.crash_image(mode), self.capacity)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn power_cut_error(&self) -> DeviceError {
        DeviceError::Io {
            path: self.name.clone(),
            source: std::io::Error::other("power cut (simulated by CrashDevice)"),
        }
    }
}

/// Split a write at `off` into pieces that do not cross sector boundaries (absolute).
fn sector_pieces(off: usize, data: &[u8], sector: u64) -> Vec<(usize, &[u8])> {
    let sector = sector as usize;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let abs = off + pos;
        let to_boundary = sector - abs % sector;
        let n = to_boundary.min(data.len() - pos);
        out.push((abs, &data[pos..pos + n]));
        pos += n;
    }
    out
}

impl Device for CrashDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let st = self.lock();
        let (s, e) = check_read(&self.name, st.current.len() as u64, offset, buf.len())?;
        buf.copy_from_slice(&st.current[s..e]);
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<(), DeviceError> {
        let (s, _) = check_write(&self.name, self.capacity, offset, data.len())?;
        let mut st = self.lock();
        if !st.powered() {
            return Err(self.power_cut_error());
        }
        if let Some(n) = st.writes_before_cut.as_mut() {
            *n -= 1;
        }
        st.writes += 1;
        apply(&mut st.current, s, data);
        st.pending.push((s, data.to_vec()));
        Ok(())
    }

    fn sync(&self) -> Result<(), DeviceError> {
        let mut st = self.lock();
        if !st.powered() {
            return Err(self.power_cut_error());
        }
        let st = &mut *st;
        for (off, data) in st.pending.drain(..) {
            apply(&mut st.durable, off, &data);
        }
        st.syncs += 1;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.lock().current.len() as u64
    }

    fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev_with_history() -> CrashDevice {
        let d = CrashDevice::new("c", 512);
        d.write_at(&[1u8; 1024], 0).unwrap();
        d.sync().unwrap();
        d.write_at(&[2u8; 2048], 512).unwrap(); // pending, spans 4 sectors
        d
    }

    #[test]
    fn reads_see_pending_writes() {
        let d = dev_with_history();
        let mut b = [0u8; 4];
        d.read_at(&mut b, 510).unwrap();
        assert_eq!(b, [1, 1, 2, 2]);
        assert_eq!(d.pending_writes(), 1);
        assert_eq!((d.write_count(), d.sync_count()), (2, 1));
    }

    #[test]
    fn drop_and_keep_modes() {
        let d = dev_with_history();
        assert_eq!(d.crash_image(CrashMode::DropUnsynced), vec![1u8; 1024]);
        let kept = d.crash_image(CrashMode::KeepUnsynced);
        assert_eq!(kept.len(), 2560);
        assert_eq!(&kept[..512], &[1u8; 512][..]);
        assert!(kept[512..].iter().all(|&x| x == 2));
        d.sync().unwrap();
        assert_eq!(d.crash_image(CrashMode::DropUnsynced), kept);
    }

    #[test]
    fn random_mode_tears_only_at_sector_boundaries_and_is_reproducible() {
        let mut outcomes = std::collections::HashSet::new();
        for seed in 0..200 {
            let d = dev_with_history();
            let img = d.crash_image(CrashMode::Random { seed });
            assert_eq!(img, d.crash_image(CrashMode::Random { seed }), "seed {seed}");
            // Every sector is entirely old or entirely new.
            let mut pattern = Vec::new();
            for s in 0..5 {
                let sec = img.get(s * 512..((s + 1) * 512).min(img.len())).unwrap_or(&[]);
                let first = sec.first().copied();
                assert!(sec.iter().all(|&x| Some(x) == first), "seed {seed} sector {s}");
                pattern.push(first);
            }
            outcomes.insert(pattern);
        }
        // Dropped, kept, and several torn variants all occur.
        assert!(outcomes.len() >= 6, "{outcomes:?}");
    }

    #[test]
    fn unaligned_write_tears_on_absolute_sector_boundaries() {
        let pieces = sector_pieces(500, &[0u8; 1100], 512);
        let spans: Vec<_> = pieces.iter().map(|(o, p)| (*o, p.len())).collect();
        assert_eq!(spans, vec![(500, 12), (512, 512), (1024, 512), (1536, 64)]);
        assert!(sector_pieces(7, &[], 512).is_empty());
    }

    #[test]
    fn power_cut_stops_writes_and_syncs() {
        let d = CrashDevice::new("c", 512);
        d.cut_power_after(2);
        d.write_at(b"a", 0).unwrap();
        d.write_at(b"b", 1).unwrap();
        assert!(d.power_is_cut());
        assert!(d.write_at(b"c", 2).is_err());
        assert!(d.sync().is_err(), "a sync after the cut must not make writes durable");
        assert_eq!(d.crash_image(CrashMode::DropUnsynced), Vec::<u8>::new());
        assert_eq!(d.crash_image(CrashMode::KeepUnsynced), b"ab".to_vec());
        let mut b = [0u8; 2];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"ab");
    }

    #[test]
    fn crash_device_continues_from_the_image() {
        let d = dev_with_history();
        let m = d.crash_device(CrashMode::DropUnsynced);
        assert_eq!(m.len(), 1024);
        assert_eq!(m.name(), "c");
        let again = CrashDevice::with_image("c", 512, m.snapshot(), None);
        assert_eq!(again.crash_image(CrashMode::DropUnsynced), vec![1u8; 1024]);
    }
}
