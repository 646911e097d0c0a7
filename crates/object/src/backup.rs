//! Backups of a pool's metadata in its bucket, and how a restore finds the newest one.
//!
//! A backup of generation G is two objects under `backup/` of the prefix (docs/format.md):
//! `G.bak`, the backup itself (the metadata store's seal and a dump of the object map,
//! taken at the same commit), and `G.done`, a small manifest naming the length and xxh3 of
//! `G.bak` and the segments its map references. The manifest is written only once `G.bak`
//! is completely uploaded, so a backup without one (an upload cut off) is never chosen;
//! one whose `.bak` does not match its manifest is skipped with a warning. Generations are
//! 20 decimal digits, so names sort as numbers.
//!
//! Pruning keeps the newest `keep` complete backups: an older one loses its manifest first
//! (from then on it is not a backup), then its `.bak`. A segment a kept backup's map
//! references is never deleted (device.rs `delete_dead`), so each kept backup stays
//! restorable on its own.

use xxhash_rust::xxh3::xxh3_64;

/// Folder of the backup objects under the prefix.
pub const BACKUP_DIR: &str = "backup";
pub const BACKUP_MAGIC: [u8; 8] = *b"SQZFSBAK";
pub const MANIFEST_MAGIC: [u8; 8] = *b"SQZFSBKM";
pub const MAP_DUMP_MAGIC: [u8; 8] = *b"SQZFSOMD";
/// Version of the `.bak`, `.done` and map dump layouts.
pub const BACKUP_VERSION: u32 = 1;
/// Complete backups kept in the bucket.
pub const DEFAULT_KEEP: usize = 3;
/// zstd level of the map dump inside a `.bak`.
const MAP_LEVEL: i32 = 3;
/// Bytes of the `.bak` header.
pub const BACKUP_HEADER_LEN: usize = 64;

/// The two objects of a backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupPart {
    /// `.bak`
    Image,
    /// `.done`
    Manifest,
}

pub fn backup_name(generation: u64, part: BackupPart) -> String {
    let ext = match part {
        BackupPart::Image => "bak",
        BackupPart::Manifest => "done",
    };
    format!("{BACKUP_DIR}/{generation:020}.{ext}")
}

/// The generation and part of an object name under the prefix, if it is a backup's.
pub fn parse_backup_name(name: &str) -> Option<(u64, BackupPart)> {
    let rest = name.strip_prefix(BACKUP_DIR)?.strip_prefix('/')?;
    let (num, ext) = rest.split_once('.')?;
    if num.len() != 20 || !num.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let part = match ext {
        "bak" => BackupPart::Image,
        "done" => BackupPart::Manifest,
        _ => return None,
    };
    Some((num.parse().ok()?, part))
}

/// The object map at one commit, as rows (map.rs tables).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapDump {
    pub spec: String,
    pub next_segment: u64,
    pub device_len: u64,
    /// (device offset, (length, segment, offset in the segment))
    pub extents: Vec<(u64, (u64, u64, u64))>,
    /// (segment, encoded `SegmentRow`)
    pub segments: Vec<(u64, Vec<u8>)>,
}

impl MapDump {
    /// The segments the extents reference, ascending.
    pub fn referenced(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.extents.iter().map(|(_, (_, seg, _))| *seg).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Layout (little-endian): magic `SQZFSOMD`, version u32, flags u32 = 0,
    /// next_segment u64, device_len u64, spec length u32 and its UTF-8 bytes, extent count
    /// u64 and per extent dev_off, len, seg, seg_off (u64 each), segment count u64 and per
    /// segment its number u64, row length u32 and the row.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64 + 32 * self.extents.len() + self.segments.len() * 64);
        v.extend_from_slice(&MAP_DUMP_MAGIC);
        put32(&mut v, BACKUP_VERSION);
        put32(&mut v, 0);
        put64(&mut v, self.next_segment);
        put64(&mut v, self.device_len);
        put32(&mut v, self.spec.len() as u32);
        v.extend_from_slice(self.spec.as_bytes());
        put64(&mut v, self.extents.len() as u64);
        for &(dev_off, (len, seg, seg_off)) in &self.extents {
            for x in [dev_off, len, seg, seg_off] {
                put64(&mut v, x);
            }
        }
        put64(&mut v, self.segments.len() as u64);
        for (id, row) in &self.segments {
            put64(&mut v, *id);
            put32(&mut v, row.len() as u32);
            v.extend_from_slice(row);
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<MapDump, String> {
        let mut r = Reader { b, at: 0 };
        if r.take(8)? != MAP_DUMP_MAGIC {
            return Err("not an object map dump (bad magic)".into());
        }
        let version = r.u32()?;
        if version != BACKUP_VERSION {
            return Err(format!("map dump version {version} (this build reads {BACKUP_VERSION})"));
        }
        let flags = r.u32()?;
        if flags != 0 {
            return Err(format!("map dump flags {flags:#x} this build does not know"));
        }
        let next_segment = r.u64()?;
        let device_len = r.u64()?;
        let n = r.u32()? as usize;
        let spec = String::from_utf8(r.take(n)?.to_vec()).map_err(|_| "the store name is not UTF-8".to_string())?;
        let count = r.count(32)?;
        let mut extents = Vec::with_capacity(count);
        for _ in 0..count {
            extents.push((r.u64()?, (r.u64()?, r.u64()?, r.u64()?)));
        }
        let count = r.count(12)?;
        let mut segments = Vec::with_capacity(count);
        for _ in 0..count {
            let id = r.u64()?;
            let n = r.u32()? as usize;
            segments.push((id, r.take(n)?.to_vec()));
        }
        if r.at != b.len() {
            return Err(format!("{} bytes after the last segment row", b.len() - r.at));
        }
        Ok(MapDump { spec, next_segment, device_len, extents, segments })
    }
}

/// A whole backup: what a `.bak` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupImage {
    pub generation: u64,
    /// the metadata commit (txg) the backup is of
    pub txg: u64,
    /// when it was taken, seconds since the Unix epoch
    pub created: u64,
    /// the metadata store in the seal format (squeezefs-meta seal.rs)
    pub meta_seal: Vec<u8>,
    pub map: MapDump,
}

impl BackupImage {
    /// Layout (little-endian): a 64-byte header — magic `SQZFSBAK`, version u32, flags
    /// u32 = 0, generation u64, txg u64, created u64, seal length u64, compressed map length
    /// u64, map dump length u64 — then the seal, then the map dump compressed with zstd,
    /// then the xxh3-64 of every byte before it (u64).
    pub fn encode(&self) -> Vec<u8> {
        let dump = self.map.encode();
        let map = zstd::bulk::compress(&dump, MAP_LEVEL).expect("compressing into a growable buffer");
        let mut v = Vec::with_capacity(BACKUP_HEADER_LEN + self.meta_seal.len() + map.len() + 8);
        v.extend_from_slice(&BACKUP_MAGIC);
        put32(&mut v, BACKUP_VERSION);
        put32(&mut v, 0);
        for x in [self.generation, self.txg, self.created, self.meta_seal.len() as u64, map.len() as u64] {
            put64(&mut v, x);
        }
        put64(&mut v, dump.len() as u64);
        debug_assert_eq!(v.len(), BACKUP_HEADER_LEN);
        v.extend_from_slice(&self.meta_seal);
        v.extend_from_slice(&map);
        let sum = xxh3_64(&v);
        put64(&mut v, sum);
        v
    }

    pub fn decode(b: &[u8]) -> Result<BackupImage, String> {
        if b.len() < BACKUP_HEADER_LEN + 8 {
            return Err(format!("{} bytes, shorter than a header and checksum", b.len()));
        }
        let (body, tail) = b.split_at(b.len() - 8);
        if xxh3_64(body) != u64::from_le_bytes(tail.try_into().expect("8 bytes")) {
            return Err("its checksum does not match".into());
        }
        let mut r = Reader { b: body, at: 0 };
        if r.take(8)? != BACKUP_MAGIC {
            return Err("not a squeezefs backup (bad magic)".into());
        }
        let version = r.u32()?;
        if version != BACKUP_VERSION {
            return Err(format!("backup version {version} (this build reads {BACKUP_VERSION})"));
        }
        let flags = r.u32()?;
        if flags != 0 {
            return Err(format!("backup flags {flags:#x} this build does not know"));
        }
        let (generation, txg, created) = (r.u64()?, r.u64()?, r.u64()?);
        let (seal_len, map_len, dump_len) = (r.u64()? as usize, r.u64()? as usize, r.u64()? as usize);
        let meta_seal = r.take(seal_len)?.to_vec();
        let map = r.take(map_len)?;
        if r.at != body.len() {
            return Err(format!("{} bytes after the map", body.len() - r.at));
        }
        let dump = zstd::bulk::decompress(map, dump_len).map_err(|e| format!("the map does not decompress: {e}"))?;
        if dump.len() != dump_len {
            return Err(format!("the map decompresses to {} bytes, not {dump_len}", dump.len()));
        }
        let map = MapDump::decode(&dump).map_err(|e| format!("map: {e}"))?;
        Ok(BackupImage { generation, txg, created, meta_seal, map })
    }
}

/// What a `.done` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub generation: u64,
    pub txg: u64,
    pub created: u64,
    /// length and xxh3-64 of the `.bak`
    pub image_len: u64,
    pub image_xxh3: u64,
    /// segments the backup's map references, ascending
    pub segments: Vec<u64>,
}

impl Manifest {
    /// Layout (little-endian): magic `SQZFSBKM`, version u32, flags u32 = 0, generation,
    /// txg, created, `.bak` length, `.bak` xxh3-64, segment count (u64 each), the segment
    /// numbers (u64 each), then the xxh3-64 of every byte before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64 + 8 * self.segments.len());
        v.extend_from_slice(&MANIFEST_MAGIC);
        put32(&mut v, BACKUP_VERSION);
        put32(&mut v, 0);
        for x in [self.generation, self.txg, self.created, self.image_len, self.image_xxh3] {
            put64(&mut v, x);
        }
        put64(&mut v, self.segments.len() as u64);
        for s in &self.segments {
            put64(&mut v, *s);
        }
        let sum = xxh3_64(&v);
        put64(&mut v, sum);
        v
    }

    pub fn decode(b: &[u8]) -> Result<Manifest, String> {
        if b.len() < 64 + 8 {
            return Err(format!("{} bytes, shorter than a manifest", b.len()));
        }
        let (body, tail) = b.split_at(b.len() - 8);
        if xxh3_64(body) != u64::from_le_bytes(tail.try_into().expect("8 bytes")) {
            return Err("its checksum does not match".into());
        }
        let mut r = Reader { b: body, at: 0 };
        if r.take(8)? != MANIFEST_MAGIC {
            return Err("not a backup manifest (bad magic)".into());
        }
        let version = r.u32()?;
        if version != BACKUP_VERSION {
            return Err(format!("manifest version {version} (this build reads {BACKUP_VERSION})"));
        }
        let flags = r.u32()?;
        if flags != 0 {
            return Err(format!("manifest flags {flags:#x} this build does not know"));
        }
        let (generation, txg, created, image_len, image_xxh3) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let count = r.count(8)?;
        let segments = (0..count).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        if r.at != body.len() {
            return Err(format!("{} bytes after the segment list", body.len() - r.at));
        }
        Ok(Manifest { generation, txg, created, image_len, image_xxh3, segments })
    }
}

fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end =
            self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| {
                format!("cut short: {n} bytes wanted at byte {}, {} bytes in all", self.at, self.b.len())
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// A count of items of at least `min` bytes each, bounded by the bytes left.
    fn count(&mut self, min: usize) -> Result<usize, String> {
        let n = self.u64()?;
        let left = (self.b.len() - self.at) as u64;
        if n > left / min as u64 {
            return Err(format!("a count of {n} items in {left} remaining bytes"));
        }
        Ok(n as usize)
    }
}

/// Which backup a restore takes, from the backup objects listed: complete generations
/// (with a manifest), newest first. A `.bak` without its manifest is never one.
pub fn complete_generations(names: &[String]) -> Vec<u64> {
    let mut v: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_backup_name(n))
        .filter(|(_, p)| *p == BackupPart::Manifest)
        .map(|(g, _)| g)
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.dedup();
    v
}

/// Check `image` (a `.bak`) against its manifest and decode it.
pub fn check_image(m: &Manifest, image: &[u8]) -> Result<BackupImage, String> {
    if image.len() as u64 != m.image_len {
        return Err(format!("{} bytes, the manifest says {}", image.len(), m.image_len));
    }
    if xxh3_64(image) != m.image_xxh3 {
        return Err("its xxh3 differs from the manifest's".into());
    }
    let b = BackupImage::decode(image)?;
    if b.generation != m.generation {
        return Err(format!("generation {} inside, {} in the manifest", b.generation, m.generation));
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> BackupImage {
        BackupImage {
            generation: 7,
            txg: 42,
            created: 1_700_000_000,
            meta_seal: b"SQZFSEAL and then some".to_vec(),
            map: MapDump {
                spec: "s3://b/p".into(),
                next_segment: 9,
                device_len: 1 << 20,
                extents: vec![(0, (4096, 1, 0)), (8192, (100, 3, 4096))],
                segments: vec![(1, vec![1, 2, 3]), (3, vec![4; 33])],
            },
        }
    }

    #[test]
    fn backups_and_manifests_round_trip_and_refuse_damage() {
        let b = image();
        let enc = b.encode();
        assert_eq!(&enc[..8], b"SQZFSBAK");
        assert_eq!(BackupImage::decode(&enc).unwrap(), b);
        assert_eq!(b.map.referenced(), vec![1, 3]);
        let m = Manifest {
            generation: 7,
            txg: 42,
            created: b.created,
            image_len: enc.len() as u64,
            image_xxh3: xxh3_64(&enc),
            segments: b.map.referenced(),
        };
        assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
        assert_eq!(check_image(&m, &enc).unwrap(), b);
        for at in [0, 12, BACKUP_HEADER_LEN + 3, enc.len() - 1] {
            let mut bad = enc.clone();
            bad[at] ^= 1;
            assert!(check_image(&m, &bad).is_err(), "flip at {at}");
            assert!(BackupImage::decode(&bad).is_err(), "flip at {at}");
        }
        assert!(check_image(&m, &enc[..enc.len() - 1]).is_err());
        let mut bad = m.encode();
        bad[20] ^= 1;
        assert!(Manifest::decode(&bad).is_err());
        assert!(MapDump::decode(&b.map.encode()[..40]).is_err());
    }

    #[test]
    fn only_generations_with_a_manifest_are_complete_newest_first() {
        let names: Vec<String> = vec![
            backup_name(3, BackupPart::Image),
            backup_name(3, BackupPart::Manifest),
            backup_name(12, BackupPart::Image),
            backup_name(12, BackupPart::Manifest),
            backup_name(13, BackupPart::Image),
            "backup/junk".into(),
            "segments/0000000000000001".into(),
        ];
        assert_eq!(complete_generations(&names), vec![12, 3]);
        assert_eq!(parse_backup_name("backup/00000000000000000012.done"), Some((12, BackupPart::Manifest)));
        assert_eq!(parse_backup_name("backup/12.done"), None);
        assert!(backup_name(12, BackupPart::Image) < backup_name(100, BackupPart::Image));
    }
}
