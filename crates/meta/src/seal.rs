//! The sealed metadata store: every table of a closed pool's store as a compressed,
//! self-checking logical dump (`meta.seal`, written and read by the engine's
//! `meta_seal.rs`). redb pages are uncompressed and leave room in every leaf; the rows
//! themselves, in key order, compress several times smaller.
//!
//! Layout (all integers little-endian; docs/format.md has it byte by byte):
//!
//! ```text
//! header, 64 bytes
//!   0   8  magic "SQZFSEAL"
//!   8   2  format version (1)
//!  10   2  flags (none defined: any bit set is refused)
//!  12   4  tables in the body
//!  16   8  rows, all tables together
//!  24   8  body length, uncompressed
//!  32   8  compressed length (the bytes after the header; the file ends there)
//!  40   8  XXH3-64 of the uncompressed body
//!  48   8  XXH3-64 of the compressed bytes
//!  56   8  XXH3-64 of header bytes 0..56
//! 64..     the body as one zstd frame
//!
//! body: for each table present in the store, in the order of `for_each_table!`
//!   u8 name length, name (UTF-8), u8 form: 0 = rows follow, 1 = derived (below)
//!   form 1: varint rows; nothing else
//!   form 2 (extents, dirents): varint rows, varint key-stream length, a varint length
//!           per value column (6 for extents: seal_extents.rs, 3 for dirents:
//!           seal_dirents.rs), the key stream, the columns
//!   form 0: varint rows, varint key-stream length, varint value-stream length
//!   key stream:   per row, varint bytes shared with the previous key of the table,
//!                 then (variable-width keys only) varint length of the rest, the rest
//!   value stream: per row, (variable-width values only) varint length, the bytes
//! ```
//!
//! `dir_cookies` is the `dirents` rows again in another order (the same kind, inode and
//! name under the entry's cookie): when every one of its rows is exactly what the `dirents`
//! rows imply, it is written as form 1 and rebuilt from them, which saves a fifth of the
//! seal; otherwise its rows are written as they are.
//!
//! Keys and values are redb's own byte forms of the table's types, except that fixed-width
//! keys (the integer keys) are stored byte-reversed: redb keeps integers little-endian,
//! and reversed, consecutive keys share their leading bytes. Rows are in key order, so
//! a table is rebuilt by inserting them in order. Keys and values go in separate streams
//! because keys share prefixes with keys and values resemble values. A varint is LEB128
//! (7 bits a byte, low group first, at most 10 bytes).
//!
//! Sizes, measured on the store of the Linux 6.1 source tree (`mkfs --rootdir --no-seal`,
//! zstd:3, 128 KiB records: 83 731 inodes, 346 576 rows, `meta.redb` 15 540 224 bytes;
//! body 7 792 990 bytes) by `cargo run --release -p squeezefs-meta --example seal_breakdown
//! -- POOL/meta.redb`, sealing time on the shared 2-core machine:
//!
//! | zstd level | 3 | 6 | 9 | 12 | 15 | 17 | 19 |
//! |---|---|---|---|---|---|---|---|
//! | seal bytes | 2 250 064 | 2 105 724 | 2 054 402 | 2 052 528 | 2 048 325 | 2 008 232 | 1 999 178 |
//! | seconds | 0.09 | 0.13 | 0.18 | 0.31 | 0.60 | 1.26 | 1.92 |
//!
//! Level 9 ([`SEAL_LEVEL`]) is as small as 15 at a third of the time; 19 saves 2.7% more
//! for ten times the time. Each step of the format, at level 19: rows as they are
//! 3 029 367 bytes, `dir_cookies` derived 2 524 969, extents in columns 2 176 496, dirents
//! in columns 1 999 178. What is left is mostly the extent rows (1.04 MB compressed, of
//! which 0.66 MB are their xxh3-64 checksums, incompressible), the inode rows (0.48 MB) and
//! the names (0.32 MB).

pub use crate::seal_wire::SealError;
use crate::seal_wire::{put_varint, Reader};
use crate::tables;
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle};
use xxhash_rust::xxh3::xxh3_64;

/// Bytes 0..8 of a sealed store.
pub const MAGIC: [u8; 8] = *b"SQZFSEAL";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;
/// Length of the header.
pub const HEADER_LEN: usize = 64;
/// zstd level of the body, chosen by measurement (module doc).
pub const SEAL_LEVEL: i32 = 9;
/// zstd window of the body: 2^27 bytes, so the whole dump of a large store is one window.
const WINDOW_LOG: u32 = 27;

/// The checked header of a sealed store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealHeader {
    pub version: u16,
    pub flags: u16,
    pub tables: u32,
    pub rows: u64,
    pub body_len: u64,
    pub compressed_len: u64,
    pub body_hash: u64,
    pub compressed_hash: u64,
}

impl SealHeader {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&self.version.to_le_bytes());
        h[10..12].copy_from_slice(&self.flags.to_le_bytes());
        h[12..16].copy_from_slice(&self.tables.to_le_bytes());
        h[16..24].copy_from_slice(&self.rows.to_le_bytes());
        h[24..32].copy_from_slice(&self.body_len.to_le_bytes());
        h[32..40].copy_from_slice(&self.compressed_len.to_le_bytes());
        h[40..48].copy_from_slice(&self.body_hash.to_le_bytes());
        h[48..56].copy_from_slice(&self.compressed_hash.to_le_bytes());
        let sum = xxh3_64(&h[..56]);
        h[56..64].copy_from_slice(&sum.to_le_bytes());
        h
    }

    /// The header at the start of `file`, checked: magic, its own checksum, version, flags,
    /// and the file's length against the compressed length it records.
    pub fn decode(file: &[u8]) -> Result<SealHeader, SealError> {
        if file.len() < HEADER_LEN {
            if file.len() >= 8 && file[..8] != MAGIC {
                return Err(SealError::BadMagic { found: file[..8].try_into().unwrap_or_default() });
            }
            return Err(SealError::Truncated { part: "header", need: HEADER_LEN as u64, have: file.len() as u64 });
        }
        let h = &file[..HEADER_LEN];
        let magic: [u8; 8] = h[0..8].try_into().unwrap_or_default();
        if magic != MAGIC {
            return Err(SealError::BadMagic { found: magic });
        }
        let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap_or_default());
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or_default());
        let stored = u64_at(56);
        let computed = xxh3_64(&h[..56]);
        if stored != computed {
            return Err(SealError::Checksum { part: "header", stored, computed });
        }
        let version = u16_at(8);
        if version != VERSION {
            return Err(SealError::Version { found: version, supported: VERSION });
        }
        let flags = u16_at(10);
        if flags != 0 {
            return Err(SealError::UnknownFlags { flags });
        }
        let hdr = SealHeader {
            version,
            flags,
            tables: u32_at(12),
            rows: u64_at(16),
            body_len: u64_at(24),
            compressed_len: u64_at(32),
            body_hash: u64_at(40),
            compressed_hash: u64_at(48),
        };
        let have = (file.len() - HEADER_LEN) as u64;
        if have < hdr.compressed_len {
            return Err(SealError::Truncated { part: "compressed body", need: hdr.compressed_len, have });
        }
        if have > hdr.compressed_len {
            return Err(SealError::TrailingBytes { extra: have - hdr.compressed_len });
        }
        Ok(hdr)
    }
}

/// Calls `$m!(def)` for every table this build knows.
macro_rules! for_each_table {
    ($m:ident) => {
        $m!(tables::SUPERBLOCK);
        $m!(tables::DEVICES);
        $m!(tables::INODES);
        $m!(tables::DIRENTS);
        $m!(tables::DIR_COOKIES);
        $m!(tables::DIR_NEXT_COOKIE);
        $m!(tables::XATTRS);
        $m!(tables::SYMLINKS);
        $m!(tables::ORPHANS);
        $m!(tables::EXTENTS);
        $m!(tables::FREE_SPACE);
        $m!(tables::BUNDLES);
        $m!(tables::RECORDSIZES);
        $m!(tables::BACKGROUND);
        $m!(tables::REFCOUNTS);
        $m!(tables::AUTO_START);
    };
}

/// The names of every table this build knows, in the order a seal writes them.
pub fn known_tables() -> Vec<&'static str> {
    let mut v = Vec::new();
    macro_rules! name {
        ($def:expr) => {
            v.push($def.name());
        };
    }
    for_each_table!(name);
    v
}

/// The stored form of a key: redb's bytes, reversed for fixed-width (integer) keys.
fn key_form<K: redb::Key>(bytes: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(bytes);
    if K::fixed_width().is_some() {
        out.reverse();
    }
}

/// A row as (key, value) bytes.
type Row = (Vec<u8>, Vec<u8>);

/// Form byte: the table's rows follow.
const FORM_ROWS: u8 = 0;
/// Form byte: the table is rebuilt from another one (`dir_cookies` from `dirents`).
const FORM_DERIVED: u8 = 1;
/// Form byte: the key stream, then the values in columns (seal_extents.rs, seal_dirents.rs).
const FORM_COLUMNS: u8 = 2;

/// The `dir_cookies` row (key, value) a `dirents` row implies (docs/format.md: a dirent
/// value is version, kind, inode, cookie; the cookie row's is version, kind, inode, name),
/// or `None` for a row this build cannot split.
fn cookie_row(dirent_key: &[u8], dirent_value: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (dir, name) = crate::keys::split_ino_name(dirent_key)?;
    let (head, cookie) = match dirent_value.first()? {
        1 if dirent_value.len() == 18 => {
            (&dirent_value[..10], u64::from_le_bytes(dirent_value[10..18].try_into().ok()?))
        }
        2 if dirent_value.len() > 2 => {
            let mut r = Reader::new(&dirent_value[2..], "dirent");
            r.varint().ok()?;
            let at = 2 + r.pos;
            let cookie = r.varint().ok()?;
            if !r.done() {
                return None;
            }
            (&dirent_value[..at], cookie)
        }
        _ => return None,
    };
    let mut value = Vec::with_capacity(head.len() + name.len());
    value.extend_from_slice(head);
    value.extend_from_slice(name);
    Some((crate::keys::pair(dir, cookie).to_vec(), value))
}

/// Every `dir_cookies` row the `dirents` rows of `t` imply, in key order; `None` when one
/// cannot be split.
fn derived_cookies(t: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<Option<Vec<Row>>, SealError> {
    let mut rows = Vec::new();
    for row in t.iter()? {
        let (k, v) = row?;
        match cookie_row(k.value(), v.value()) {
            Some(r) => rows.push(r),
            None => return Ok(None),
        }
    }
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(rows))
}

/// Whether the store's `dir_cookies` table is exactly what its `dirents` table implies.
fn cookies_derivable(rx: &redb::ReadTransaction, present: &[String]) -> Result<bool, SealError> {
    if !present.iter().any(|n| n == tables::DIRENTS.name()) {
        return Ok(false);
    }
    let Some(derived) = derived_cookies(&rx.open_table(tables::DIRENTS)?)? else {
        return Ok(false);
    };
    let t = rx.open_table(tables::DIR_COOKIES)?;
    if t.len()? != derived.len() as u64 {
        return Ok(false);
    }
    for (row, (dk, dv)) in t.iter()?.zip(&derived) {
        let (k, v) = row?;
        if k.value() != dk.as_slice() || v.value() != dv.as_slice() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Append one table's directory entry and streams to `body`; its row count.
fn dump_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    rx: &redb::ReadTransaction,
    def: TableDefinition<K, V>,
    body: &mut Vec<u8>,
) -> Result<u64, SealError> {
    let t = rx.open_table(def)?;
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let (mut prev, mut cur) = (Vec::new(), Vec::new());
    let mut rows = 0u64;
    for row in t.iter()? {
        let (k, v) = row?;
        key_form::<K>(K::as_bytes(&k.value()).as_ref(), &mut cur);
        let shared = prev.iter().zip(&cur).take_while(|(a, b)| a == b).count();
        put_varint(&mut keys, shared as u64);
        if K::fixed_width().is_none() {
            put_varint(&mut keys, (cur.len() - shared) as u64);
        }
        keys.extend_from_slice(&cur[shared..]);
        std::mem::swap(&mut prev, &mut cur);
        let vv = v.value();
        let vb = V::as_bytes(&vv);
        let vb = vb.as_ref();
        if V::fixed_width().is_none() {
            put_varint(&mut values, vb.len() as u64);
        }
        values.extend_from_slice(vb);
        rows += 1;
    }
    let cols: Option<Vec<Vec<u8>>> = match def.name() {
        n if n == tables::EXTENTS.name() => crate::seal_extents::split(&values, rows).map(Vec::from),
        n if n == tables::DIRENTS.name() => crate::seal_dirents::split(&values, rows).map(Vec::from),
        _ => None,
    };
    if let Some(cols) = cols {
        let mut streams = vec![keys.as_slice()];
        streams.extend(cols.iter().map(Vec::as_slice));
        write_entry(body, def.name(), FORM_COLUMNS, rows, &streams);
        return Ok(rows);
    }
    write_entry(body, def.name(), FORM_ROWS, rows, &[&keys, &values]);
    Ok(rows)
}

/// Append a table's entry: name, form, rows, the stream lengths, the streams.
fn write_entry(body: &mut Vec<u8>, name: &str, form: u8, rows: u64, streams: &[&[u8]]) {
    body.push(name.len() as u8);
    body.extend_from_slice(name.as_bytes());
    body.push(form);
    put_varint(body, rows);
    for s in streams {
        put_varint(body, s.len() as u64);
    }
    for s in streams {
        body.extend_from_slice(s);
    }
}

/// Insert one table's rows, read from its streams, into `tx`.
fn load_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    tx: &redb::WriteTransaction,
    def: TableDefinition<K, V>,
    rows: u64,
    keys: &[u8],
    values: &[u8],
) -> Result<(), SealError> {
    let mut t = tx.open_table(def)?;
    let (mut kr, mut vr) = (Reader::new(keys, "key stream"), Reader::new(values, "value stream"));
    let mut key: Vec<u8> = Vec::new();
    let mut redb_key: Vec<u8> = Vec::new();
    for _ in 0..rows {
        let shared = usize::try_from(kr.varint()?).unwrap_or(usize::MAX);
        if shared > key.len() {
            return Err(kr.corrupt(&format!("{shared} bytes shared with a {}-byte key", key.len())));
        }
        let rest = match K::fixed_width() {
            Some(w) => w.checked_sub(shared).ok_or_else(|| kr.corrupt("more shared bytes than the key's width"))?,
            None => kr.len()?,
        };
        key.truncate(shared);
        key.extend_from_slice(kr.bytes(rest)?);
        let value = match V::fixed_width() {
            Some(w) => vr.bytes(w)?,
            None => {
                let n = vr.len()?;
                vr.bytes(n)?
            }
        };
        redb_key.clear();
        redb_key.extend_from_slice(&key);
        if K::fixed_width().is_some() {
            redb_key.reverse();
        }
        t.insert(K::from_bytes(&redb_key), V::from_bytes(value))?;
    }
    if !kr.done() || !vr.done() {
        return Err(SealError::Corrupt(format!("table {}: bytes left after its {rows} rows", def.name())));
    }
    Ok(())
}

/// The key stream and `N` value columns of a form-2 entry: N+1 lengths, then the streams.
fn columns<'a, const N: usize>(r: &mut Reader<'a>) -> Result<(&'a [u8], [&'a [u8]; N]), SealError> {
    let klen = r.len()?;
    let mut lens = [0usize; N];
    for l in &mut lens {
        *l = r.len()?;
    }
    let keys = r.bytes(klen)?;
    let mut cols: [&[u8]; N] = [&[]; N];
    for (c, &l) in cols.iter_mut().zip(&lens) {
        *c = r.bytes(l)?;
    }
    Ok((keys, cols))
}

/// Rebuild the derived table `name` (only `dir_cookies`, from the `dirents` rows already
/// loaded into `tx`), which must come to `rows` rows.
fn load_derived(tx: &redb::WriteTransaction, name: &str, rows: u64, seen: &[&str]) -> Result<(), SealError> {
    if name != tables::DIR_COOKIES.name() || !seen.contains(&tables::DIRENTS.name()) {
        return Err(SealError::Corrupt(format!(
            "table {name} is marked derived, but nothing it derives from precedes it"
        )));
    }
    let derived = derived_cookies(&tx.open_table(tables::DIRENTS)?)?
        .ok_or_else(|| SealError::Corrupt("a dirents row does not imply a dir_cookies row".into()))?;
    if derived.len() as u64 != rows {
        return Err(SealError::Corrupt(format!(
            "dir_cookies: {} rows derived from dirents, {rows} expected",
            derived.len()
        )));
    }
    let mut t = tx.open_table(tables::DIR_COOKIES)?;
    for (k, v) in &derived {
        t.insert(k.as_slice(), v.as_slice())?;
    }
    Ok(())
}

/// What a seal holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealSummary {
    pub tables: u32,
    pub rows: u64,
    pub body_len: u64,
    pub compressed_len: u64,
}

/// The uncompressed body of every table `rx` holds; refused when it holds a table this
/// build does not know (its rows could not be put back).
pub fn dump_body(rx: &redb::ReadTransaction) -> Result<(Vec<u8>, u32, u64), SealError> {
    let mut body = Vec::new();
    let (tables, rows) = dump_entries(rx, |entry| {
        body.extend_from_slice(&entry);
        Ok(())
    })?;
    Ok((body, tables, rows))
}

/// Every table `rx` holds as body entries, handed to `emit` one table at a time in body
/// order; the number of tables and rows.
fn dump_entries(
    rx: &redb::ReadTransaction,
    mut emit: impl FnMut(Vec<u8>) -> Result<(), SealError>,
) -> Result<(u32, u64), SealError> {
    if rx.list_multimap_tables()?.next().is_some() {
        return Err(SealError::MultimapTable);
    }
    let present: Vec<String> = rx.list_tables()?.map(|t| t.name().to_string()).collect();
    let known = known_tables();
    if let Some(n) = present.iter().find(|n| !known.contains(&n.as_str())) {
        return Err(SealError::UnknownTable { name: n.clone() });
    }
    let (mut count, mut rows) = (0u32, 0u64);
    macro_rules! dump {
        ($def:expr) => {
            if present.iter().any(|n| n == $def.name()) {
                let mut entry = Vec::new();
                if $def.name() == tables::DIR_COOKIES.name() && cookies_derivable(rx, &present)? {
                    let n = rx.open_table(tables::DIR_COOKIES)?.len()?;
                    write_entry(&mut entry, $def.name(), FORM_DERIVED, n, &[]);
                    rows += n;
                } else {
                    rows += dump_table(rx, $def, &mut entry)?;
                }
                emit(entry)?;
                count += 1;
            }
        };
    }
    for_each_table!(dump);
    Ok((count, rows))
}

/// The sealed form (header and compressed body) of every table `rx` holds, compressed at
/// zstd `level`.
///
/// The body is compressed on a second thread, a table at a time, while the next tables
/// are read: at level 9 compressing takes about 1.4 times as long as reading, and the two
/// overlap instead of adding up.
pub fn seal(rx: &redb::ReadTransaction, level: i32) -> Result<(Vec<u8>, SealSummary), SealError> {
    // a bound of two entries keeps at most two tables' dumps waiting for the compressor
    let (to_compressor, entries) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
    let (dumped, compressed) = std::thread::scope(|s| {
        let compressor = s.spawn(move || compress_entries(entries, level));
        let dumped = dump_entries(rx, |entry| {
            // a closed channel means the compressor failed: its error is the one reported
            to_compressor.send(entry).map_err(|_| SealError::Compress(std::io::Error::other("compressor stopped")))
        });
        drop(to_compressor);
        let compressed = compressor.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (dumped, compressed)
    });
    let CompressedBody { mut file, body_len, body_hash } = compressed.map_err(SealError::Compress)?;
    let (tables, rows) = dumped?;
    let compressed = &file[HEADER_LEN..];
    let hdr = SealHeader {
        version: VERSION,
        flags: 0,
        tables,
        rows,
        body_len,
        compressed_len: compressed.len() as u64,
        body_hash,
        compressed_hash: xxh3_64(compressed),
    };
    file[..HEADER_LEN].copy_from_slice(&hdr.encode());
    let summary = SealSummary { tables, rows, body_len, compressed_len: hdr.compressed_len };
    Ok((file, summary))
}

/// A body compressed as it arrived, behind room for the header.
struct CompressedBody {
    /// `HEADER_LEN` bytes to be overwritten, then the zstd frame
    file: Vec<u8>,
    body_len: u64,
    body_hash: u64,
}

/// Compress the body entries arriving on `entries` into one zstd frame at `level`, until
/// the sender hangs up.
fn compress_entries(entries: std::sync::mpsc::Receiver<Vec<u8>>, level: i32) -> std::io::Result<CompressedBody> {
    use std::io::Write;
    use zstd::stream::raw::CParameter;
    let mut z = zstd::stream::write::Encoder::new(vec![0u8; HEADER_LEN], level)?;
    z.set_parameter(CParameter::WindowLog(WINDOW_LOG))?;
    z.set_parameter(CParameter::EnableLongDistanceMatching(true))?;
    let (mut hash, mut body_len) = (xxhash_rust::xxh3::Xxh3::new(), 0u64);
    for entry in entries {
        hash.update(&entry);
        body_len += entry.len() as u64;
        z.write_all(&entry)?;
    }
    Ok(CompressedBody { file: z.finish()?, body_len, body_hash: hash.digest() })
}

/// The checked, decompressed body of the sealed store `file`, and its header.
pub fn open_body(file: &[u8]) -> Result<(SealHeader, Vec<u8>), SealError> {
    use zstd::stream::raw::DParameter;
    let hdr = SealHeader::decode(file)?;
    let compressed = &file[HEADER_LEN..];
    let computed = xxh3_64(compressed);
    if computed != hdr.compressed_hash {
        return Err(SealError::Checksum { part: "compressed body", stored: hdr.compressed_hash, computed });
    }
    let cap = usize::try_from(hdr.body_len)
        .map_err(|_| SealError::Corrupt(format!("body length {} does not fit in memory", hdr.body_len)))?;
    let mut d = zstd::bulk::Decompressor::new().map_err(SealError::Decompress)?;
    d.set_parameter(DParameter::WindowLogMax(WINDOW_LOG)).map_err(SealError::Decompress)?;
    let body = d.decompress(compressed, cap).map_err(SealError::Decompress)?;
    if body.len() as u64 != hdr.body_len {
        return Err(SealError::Corrupt(format!("body is {} bytes, the header says {}", body.len(), hdr.body_len)));
    }
    let computed = xxh3_64(&body);
    if computed != hdr.body_hash {
        return Err(SealError::Checksum { part: "body", stored: hdr.body_hash, computed });
    }
    Ok((hdr, body))
}

/// Insert every row of the sealed store `file` into `tx` (a transaction on an empty
/// store), table by table in key order. `tx` is not committed here.
pub fn unseal_into(file: &[u8], tx: &redb::WriteTransaction) -> Result<SealSummary, SealError> {
    let (hdr, body) = open_body(file)?;
    let mut r = Reader::new(&body, "body");
    let known = known_tables();
    let (mut tables, mut rows) = (0u32, 0u64);
    let mut seen: Vec<&str> = Vec::new();
    while !r.done() {
        let n = usize::from(r.bytes(1)?[0]);
        let name = std::str::from_utf8(r.bytes(n)?).map_err(|_| r.corrupt("table name is not UTF-8"))?;
        let Some(&name) = known.iter().find(|k| **k == name) else {
            return Err(SealError::UnknownTable { name: name.to_string() });
        };
        if seen.contains(&name) {
            return Err(r.corrupt(&format!("table {name} appears twice")));
        }
        seen.push(name);
        let form = r.bytes(1)?[0];
        let table_rows = r.varint()?;
        if form == FORM_DERIVED {
            load_derived(tx, name, table_rows, &seen)?;
            tables += 1;
            rows = rows.saturating_add(table_rows);
            continue;
        }
        let joined;
        let (keys, values) = match form {
            FORM_ROWS => {
                let klen = r.len()?;
                let vlen = r.len()?;
                (r.bytes(klen)?, r.bytes(vlen)?)
            }
            FORM_COLUMNS if name == tables::EXTENTS.name() => {
                let (keys, cols) = columns::<{ crate::seal_extents::STREAMS }>(&mut r)?;
                joined = crate::seal_extents::join(cols, table_rows)?;
                (keys, joined.as_slice())
            }
            FORM_COLUMNS if name == tables::DIRENTS.name() => {
                let (keys, cols) = columns::<{ crate::seal_dirents::STREAMS }>(&mut r)?;
                joined = crate::seal_dirents::join(cols, table_rows)?;
                (keys, joined.as_slice())
            }
            _ => {
                return Err(r.corrupt(&format!(
                    "table {name} has form {form}; this build knows 0, 1 for dir_cookies, and 2 for extents and dirents"
                )))
            }
        };
        macro_rules! load {
            ($def:expr) => {
                if $def.name() == name {
                    load_table(tx, $def, table_rows, keys, values)?;
                }
            };
        }
        for_each_table!(load);
        tables += 1;
        rows = rows.saturating_add(table_rows);
    }
    if tables != hdr.tables || rows != hdr.rows {
        return Err(SealError::Corrupt(format!(
            "body holds {tables} tables and {rows} rows, the header says {} and {}",
            hdr.tables, hdr.rows
        )));
    }
    Ok(SealSummary { tables, rows, body_len: hdr.body_len, compressed_len: hdr.compressed_len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use redb::ReadableDatabase;

    fn mem_db() -> redb::Database {
        redb::Builder::new().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap()
    }

    /// Every row of every table, in redb's byte forms, by table name.
    fn rows_of(db: &redb::Database) -> Vec<(String, Vec<Row>)> {
        let rx = db.begin_read().unwrap();
        let mut out = Vec::new();
        fn rows<K: redb::Key + 'static, V: redb::Value + 'static>(
            rx: &redb::ReadTransaction,
            def: TableDefinition<K, V>,
        ) -> Vec<(Vec<u8>, Vec<u8>)> {
            let t = rx.open_table(def).unwrap();
            t.iter()
                .unwrap()
                .map(|r| {
                    let (k, v) = r.unwrap();
                    let (kv, vv) = (k.value(), v.value());
                    let row = (K::as_bytes(&kv).as_ref().to_vec(), V::as_bytes(&vv).as_ref().to_vec());
                    row
                })
                .collect()
        }
        let present: Vec<String> = rx.list_tables().unwrap().map(|t| t.name().to_string()).collect();
        macro_rules! grab {
            ($def:expr) => {
                if present.iter().any(|n| n == $def.name()) {
                    out.push(($def.name().to_string(), rows(&rx, $def)));
                }
            };
        }
        for_each_table!(grab);
        out
    }

    fn round_trip(db: &redb::Database) -> (Vec<u8>, redb::Database) {
        let (file, _) = seal(&db.begin_read().unwrap(), 3).unwrap();
        let back = mem_db();
        let tx = back.begin_write().unwrap();
        unseal_into(&file, &tx).unwrap();
        tx.commit().unwrap();
        (file, back)
    }

    fn sample() -> redb::Database {
        let db = mem_db();
        let tx = db.begin_write().unwrap();
        tx.open_table(tables::SUPERBLOCK).unwrap().insert(0u8, &b"sb"[..]).unwrap();
        {
            let mut t = tx.open_table(tables::INODES).unwrap();
            for ino in [1u64, 2, 255, 256, 257, 1 << 40, u64::MAX] {
                t.insert(ino, &ino.to_le_bytes()[..3]).unwrap();
            }
        }
        {
            let mut t = tx.open_table(tables::DIRENTS).unwrap();
            for name in ["", "a", "ab", "abc", "b", "zzzzzzzz"] {
                t.insert(name.as_bytes(), name.as_bytes()).unwrap();
            }
        }
        tx.open_table(tables::ORPHANS).unwrap().insert(9u64, ()).unwrap();
        tx.open_table(tables::FREE_SPACE).unwrap().insert(&b"\0\0\0\x01"[..], 77u64).unwrap();
        tx.open_table(tables::RECORDSIZES).unwrap().insert(5u64, 16384u32).unwrap();
        // present and empty: comes back present and empty
        tx.open_table(tables::BACKGROUND).unwrap();
        tx.open_table(tables::AUTO_START).unwrap().insert(&b"auto"[..], &[1u8, 4, 1, 0, 0, 0][..]).unwrap();
        tx.commit().unwrap();
        db
    }

    #[test]
    fn seal_unseal_round_trip_keeps_every_table_and_row() {
        let db = sample();
        let (_, back) = round_trip(&db);
        assert_eq!(rows_of(&back), rows_of(&db));
        assert!(rows_of(&back).iter().any(|(n, r)| n == "background" && r.is_empty()));
        assert!(rows_of(&back).iter().any(|(n, r)| n == "auto_start" && r.len() == 1));
    }

    #[test]
    fn a_flipped_byte_anywhere_is_an_error_not_a_panic() {
        let db = sample();
        let (file, _) = round_trip(&db);
        for i in 0..file.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = file.clone();
                bad[i] ^= bit;
                let back = mem_db();
                let tx = back.begin_write().unwrap();
                assert!(unseal_into(&bad, &tx).is_err(), "flipping bit {bit:#x} of byte {i} went unnoticed");
            }
        }
    }

    #[test]
    fn truncated_and_extended_files_are_refused_by_name() {
        let (file, _) = round_trip(&sample());
        let back = mem_db();
        let tx = back.begin_write().unwrap();
        for n in [0, 7, 8, 63, 64, file.len() - 1] {
            let e = unseal_into(&file[..n], &tx).unwrap_err();
            assert!(matches!(e, SealError::Truncated { .. }), "{n} bytes: {e}");
        }
        let mut longer = file.clone();
        longer.push(0);
        assert!(matches!(unseal_into(&longer, &tx), Err(SealError::TrailingBytes { extra: 1 })));
    }

    #[test]
    fn a_newer_version_is_refused_with_both_versions_named() {
        let (file, _) = round_trip(&sample());
        let mut hdr = SealHeader::decode(&file).unwrap();
        hdr.version = 2;
        let mut newer = hdr.encode().to_vec();
        newer.extend_from_slice(&file[HEADER_LEN..]);
        let back = mem_db();
        let tx = back.begin_write().unwrap();
        let e = unseal_into(&newer, &tx).unwrap_err();
        assert!(matches!(e, SealError::Version { found: 2, supported: 1 }), "{e}");
        assert_eq!(e.to_string(), "format version 2; this build reads version 1");
    }

    #[test]
    fn a_store_with_a_table_this_build_does_not_know_is_not_sealed() {
        let db = sample();
        let tx = db.begin_write().unwrap();
        let other: TableDefinition<u64, u64> = TableDefinition::new("from_the_future");
        tx.open_table(other).unwrap().insert(1u64, 2u64).unwrap();
        tx.commit().unwrap();
        let e = seal(&db.begin_read().unwrap(), 3).unwrap_err();
        assert!(matches!(&e, SealError::UnknownTable { name } if name == "from_the_future"), "{e}");
    }

    /// A store whose `dir_cookies` rows are what its `dirents` rows imply, in both row
    /// versions: derived (no rows in the seal) and rebuilt equal; one row off: kept as is.
    #[test]
    fn dir_cookies_are_derived_from_dirents_only_when_they_match_exactly() {
        let db = mem_db();
        let tx = db.begin_write().unwrap();
        {
            let mut d = tx.open_table(tables::DIRENTS).unwrap();
            let mut c = tx.open_table(tables::DIR_COOKIES).unwrap();
            for (i, name) in ["b", "a", "zz", "long name here", "c"].iter().enumerate() {
                let (dir, ino, cookie) = (1 + (i as u64 % 2), 100 + i as u64, 1000 - 7 * i as u64);
                let mut dv = vec![2u8, 1];
                put_varint(&mut dv, ino);
                let mut cv = dv.clone();
                put_varint(&mut dv, cookie);
                cv.extend_from_slice(name.as_bytes());
                if i == 4 {
                    // version 1 rows
                    dv = [&[1u8, 1][..], &ino.to_le_bytes(), &cookie.to_le_bytes()].concat();
                    cv = [&[1u8, 1][..], &ino.to_le_bytes(), name.as_bytes()].concat();
                }
                d.insert(crate::keys::dir_name(dir, name.as_bytes()).as_slice(), dv.as_slice()).unwrap();
                c.insert(crate::keys::pair(dir, cookie).as_slice(), cv.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
        let derived_len = dump_body(&db.begin_read().unwrap()).unwrap().0.len();
        let (_, back) = round_trip(&db);
        assert_eq!(rows_of(&back), rows_of(&db));
        // one cookie row that is not what its dirent implies
        let tx = db.begin_write().unwrap();
        tx.open_table(tables::DIR_COOKIES)
            .unwrap()
            .insert(&crate::keys::pair(1, 1000)[..], &b"\x02\x01\x64other"[..])
            .unwrap();
        tx.commit().unwrap();
        let verbatim_len = dump_body(&db.begin_read().unwrap()).unwrap().0.len();
        assert!(verbatim_len > derived_len + 40, "{derived_len} derived, {verbatim_len} verbatim");
        let (_, back) = round_trip(&db);
        assert_eq!(rows_of(&back), rows_of(&db));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn any_rows_survive_a_round_trip(
            inodes in proptest::collection::btree_map(any::<u64>(), proptest::collection::vec(any::<u8>(), 0..40), 0..60),
            dirents in proptest::collection::btree_map(proptest::collection::vec(any::<u8>(), 0..24), proptest::collection::vec(any::<u8>(), 0..12), 0..60),
            free in proptest::collection::btree_map(proptest::collection::vec(any::<u8>(), 12), any::<u64>(), 0..30),
            cookies in proptest::collection::btree_map(any::<u64>(), any::<u64>(), 0..30),
        ) {
            let db = mem_db();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(tables::INODES).unwrap();
                for (k, v) in &inodes { t.insert(*k, v.as_slice()).unwrap(); }
                let mut t = tx.open_table(tables::DIRENTS).unwrap();
                for (k, v) in &dirents { t.insert(k.as_slice(), v.as_slice()).unwrap(); }
                let mut t = tx.open_table(tables::FREE_SPACE).unwrap();
                for (k, v) in &free { t.insert(k.as_slice(), *v).unwrap(); }
                let mut t = tx.open_table(tables::DIR_NEXT_COOKIE).unwrap();
                for (k, v) in &cookies { t.insert(*k, *v).unwrap(); }
            }
            tx.commit().unwrap();
            let (_, back) = round_trip(&db);
            prop_assert_eq!(rows_of(&back), rows_of(&db));
        }
    }
}
