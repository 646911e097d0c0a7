//! Scrub: read every stored record of the pool from its device (bypassing caches) and
//! verify its xxh3 checksum; report damage by file path and offset. A bundled record is
//! checked twice: its bundle's stored bytes (read and decoded once for all its members),
//! then its own slice of the decoded bundle. A device record several extents share
//! (copies, store/refcounts.rs) is read and verified once; each of its files gets its
//! result.

use crate::base::error::Result;
use crate::base::units::record_start_byte;
use crate::engine::inner::Inner;
use redb::ReadableTable;
use serde::Serialize;
use squeezefs_meta::{keys, tables, ExtentPtr, Ino, StoredRecord, ROOT_INO};
use std::collections::HashMap;
use xxhash_rust::xxh3::xxh3_64;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Damage {
    pub ino: Ino,
    /// path from the pool root, if the inode is reachable
    pub path: Option<String>,
    /// byte offset of the damaged record in the file
    pub offset: u64,
    pub logical_len: u32,
    /// device index and byte offset on it (`None` for inline records)
    pub device: Option<u32>,
    pub device_offset: Option<u64>,
    pub problem: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ScrubReport {
    /// extents checked (a shared record counts once per file pointing to it)
    pub records: u64,
    /// stored bytes read (a shared record counts once)
    pub stored_bytes: u64,
    /// extents whose record was shared with an extent checked just before (not read again)
    pub shared: u64,
    pub damaged: Vec<Damage>,
}

impl ScrubReport {
    pub fn is_clean(&self) -> bool {
        self.damaged.is_empty()
    }
}

pub fn scrub(inner: &Inner, progress: &dyn Fn(u64, u64)) -> Result<ScrubReport> {
    let rx = inner.db.begin_read()?;
    // files' own record sizes (a row out of range is fsck's to report; the pool's is used)
    let mut sizes: HashMap<Ino, u64> = HashMap::new();
    if let Some(t) = crate::store::snapshot::open_if_present(&rx, tables::RECORDSIZES)? {
        for row in t.iter()? {
            let (k, v) = row?;
            let bytes = u64::from(v.value());
            if crate::base::options::recordsize_supported(bytes) {
                sizes.insert(k.value(), bytes);
            }
        }
    }
    let rs_of = |ino: Ino| sizes.get(&ino).copied().unwrap_or(inner.recordsize);
    let t = rx.open_table(tables::EXTENTS)?;
    let mut all: Vec<(Ino, u64, ExtentPtr)> = Vec::new();
    let mut total = 0u64;
    let mut report = ScrubReport::default();
    for row in t.iter()? {
        let (k, v) = row?;
        let Some((ino, idx)) = keys::unpair(k.value()) else { continue };
        // a pointer that does not decode is damage of its file, not the end of the scrub
        match ExtentPtr::decode(v.value()) {
            Ok(e) => {
                total += e.psize();
                all.push((ino, idx, e));
            }
            Err(err) => {
                let offset = record_start_byte(idx, rs_of(ino));
                log::error!("scrub: inode {ino} offset {offset}: extent pointer: {err}");
                report.records += 1;
                report.damaged.push(Damage {
                    ino,
                    path: None,
                    offset,
                    logical_len: 0,
                    device: None,
                    device_offset: None,
                    problem: format!("extent pointer: {err}"),
                });
            }
        }
    }
    let bundles = crate::txg::bundle::all(&rx)?;
    drop(t);
    drop(rx);
    // device order makes the reads sequential; a bundle's records follow each other
    all.sort_by_key(|(_, _, e)| match e.stored {
        StoredRecord::Device(d) => (d.dev, d.offset, 0),
        StoredRecord::Inline(_) => (u32::MAX, 0, 0),
        StoredRecord::Bundled(s) => match bundles.get(&s.bundle) {
            Some(Ok(b)) => (b.ext.dev, b.ext.offset, 1 + u64::from(s.offset)),
            _ => (u32::MAX, u64::MAX, 0),
        },
    });
    // extents of one shared record are adjacent now: the bytes go to the total once
    let mut prev_addr = None;
    for (_, _, e) in &all {
        if let StoredRecord::Device(d) = e.stored {
            if prev_addr == Some((d.dev, d.offset, e.hash)) {
                total -= e.psize();
            }
            prev_addr = Some((d.dev, d.offset, e.hash));
        }
    }
    // the bundle decoded last: its id and its bytes, or what is wrong with it
    let mut current: Option<(u64, std::result::Result<Vec<u8>, String>)> = None;
    // the device record checked last: its address and checksum, and what was wrong with it
    let mut last_read: Option<((u32, u64, u64), Option<String>)> = None;
    let mut done = 0u64;
    progress(0, total);
    for (ino, idx, e) in all {
        report.records += 1;
        let rs = rs_of(ino);
        if let StoredRecord::Device(d) = e.stored {
            if let Some((_, p)) = last_read.as_ref().filter(|(a, _)| *a == (d.dev, d.offset, e.hash)) {
                report.shared += 1;
                if let Some(problem) = p.clone() {
                    let offset = record_start_byte(idx, rs);
                    log::error!("scrub: inode {ino} offset {offset}: {problem} (a record shared with another file)");
                    report.damaged.push(Damage {
                        ino,
                        path: None,
                        offset,
                        logical_len: e.logical,
                        device: Some(d.dev),
                        device_offset: Some(d.offset),
                        problem,
                    });
                }
                continue;
            }
        }
        report.stored_bytes += e.psize();
        let offset = record_start_byte(idx, rs);
        let (device, device_offset, problem) = match &e.stored {
            StoredRecord::Inline(v) => (None, None, check(v, e.hash)),
            StoredRecord::Device(d) => {
                let p = match inner.space.devs().get(d.dev as usize) {
                    None => Some(format!("points to device {} of {}", d.dev, inner.space.devs().len())),
                    // a corrupt size is not allocated: no record stores more than it holds
                    Some(_) if e.psize() > rs || u64::from(e.logical) > rs => Some(format!(
                        "stored size {} / logical size {} exceed the record size {rs}",
                        e.psize(),
                        e.logical,
                    )),
                    Some(dev) => {
                        let mut buf = vec![0u8; d.psize as usize];
                        match dev.dev.read_at(&mut buf, d.offset) {
                            Ok(()) => check(&buf, e.hash),
                            Err(err) => Some(format!("read failed: {err}")),
                        }
                    }
                };
                last_read = Some(((d.dev, d.offset, e.hash), p.clone()));
                (Some(d.dev), Some(d.offset), p)
            }
            StoredRecord::Bundled(s) => match bundles.get(&s.bundle) {
                None => (None, None, Some(format!("lies in bundle {}, which does not exist", s.bundle))),
                Some(Err(err)) => (None, None, Some(format!("bundle {}: {err}", s.bundle))),
                Some(Ok(b)) => {
                    if current.as_ref().map(|c| c.0) != Some(s.bundle) {
                        current = Some((s.bundle, read_bundle(inner, b)));
                    }
                    let problem = match current.as_ref().map(|c| &c.1) {
                        Some(Ok(bytes)) => {
                            let (a, z) = (s.offset as usize, s.offset as usize + e.logical as usize);
                            match bytes.get(a..z) {
                                Some(part) => check(part, e.hash),
                                None => Some(format!(
                                    "bytes {a}..{z} of bundle {}, which decodes to {}",
                                    s.bundle,
                                    bytes.len()
                                )),
                            }
                        }
                        Some(Err(p)) => Some(format!("bundle {}: {p}", s.bundle)),
                        None => None,
                    };
                    (Some(b.ext.dev), Some(b.ext.offset), problem)
                }
            },
        };
        if let Some(problem) = problem {
            log::error!("scrub: inode {ino} offset {offset}: {problem}");
            report.damaged.push(Damage {
                ino,
                path: None,
                offset,
                logical_len: e.logical,
                device,
                device_offset,
                problem,
            });
        }
        done += e.psize();
        progress(done, total);
    }
    if !report.damaged.is_empty() {
        let paths = paths_of(inner, report.damaged.iter().map(|d| d.ino).collect())?;
        for d in &mut report.damaged {
            d.path = paths.get(&d.ino).cloned();
        }
    }
    Ok(report)
}

/// A bundle's decoded bytes, read from its device and verified, or what is wrong.
fn read_bundle(inner: &Inner, b: &squeezefs_meta::Bundle) -> std::result::Result<Vec<u8>, String> {
    let d = b.ext;
    let devs = inner.space.devs();
    let dev = devs.get(d.dev as usize).ok_or_else(|| format!("on device {} of {}", d.dev, devs.len()))?;
    if u64::from(d.psize) > inner.bundle_size || u64::from(b.logical) > inner.bundle_size {
        return Err(format!(
            "stored size {} / decoded size {} exceed the pool's bundle size {}",
            d.psize, b.logical, inner.bundle_size
        ));
    }
    let mut buf = vec![0u8; d.psize as usize];
    dev.dev.read_at(&mut buf, d.offset).map_err(|err| format!("read failed: {err}"))?;
    if let Some(p) = check(&buf, b.hash) {
        return Err(p);
    }
    let alg = squeezefs_codec::Algorithm::from_id(b.alg).ok_or_else(|| format!("unknown algorithm id {}", b.alg))?;
    if alg == squeezefs_codec::Algorithm::None {
        return if buf.len() == b.logical as usize { Ok(buf) } else { Err("raw bundle of the wrong length".into()) };
    }
    let mut out = vec![0u8; b.logical as usize];
    let n = inner.workspaces().decompress(alg, &buf, &mut out).map_err(|err| format!("does not decode: {err}"))?;
    if n != out.len() {
        return Err(format!("decodes to {n} bytes, {} expected", out.len()));
    }
    Ok(out)
}

fn check(stored: &[u8], hash: u64) -> Option<String> {
    let h = xxh3_64(stored);
    (h != hash).then(|| format!("checksum mismatch: stored {hash:016x}, computed {h:016x}"))
}

/// Paths of `inos` from the root, by one scan of the directory table.
pub fn paths_of(inner: &Inner, inos: Vec<Ino>) -> Result<HashMap<Ino, String>> {
    let rx = inner.db.begin_read()?;
    let t = rx.open_table(tables::DIRENTS)?;
    let mut parent: HashMap<Ino, (Ino, Vec<u8>)> = HashMap::new();
    for row in t.iter()? {
        let (k, v) = row?;
        let Some((dir, name)) = keys::split_ino_name(k.value()) else { continue };
        // the paths only label the damage found: an undecodable entry leaves its file unnamed
        let Ok((ino, _, _)) = squeezefs_meta::encode::decode_dirent(v.value()) else { continue };
        parent.entry(ino).or_insert((dir, name.to_vec()));
    }
    let mut out = HashMap::new();
    for ino in inos {
        let mut parts = Vec::new();
        let mut cur = ino;
        let mut ok = false;
        for _ in 0..4096 {
            if cur == ROOT_INO {
                ok = true;
                break;
            }
            let Some((p, name)) = parent.get(&cur) else { break };
            parts.push(String::from_utf8_lossy(name).into_owned());
            cur = *p;
        }
        if ok {
            parts.reverse();
            out.insert(ino, format!("/{}", parts.join("/")));
        }
    }
    Ok(out)
}
