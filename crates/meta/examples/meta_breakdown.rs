//! Where a pool's bytes go: per metadata table (rows, key+value bytes, pages, fragmentation)
//! and, from the extent table, inline records against device records and bundled ones, and
//! records shorter than their file's record size (its `recordsizes` row, else the pool's:
//! small files and file tails) with their stored sizes. A device
//! record's footprint is its stored length in pools with `PACKED_BYTES`, its stored length
//! rounded up to the sector in older ones.
//!
//! `cargo run --release -p squeezefs-meta --example meta_breakdown -- POOL/meta.redb`
//! (read-only; the pool must not be mounted).
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle};
use squeezefs_meta::{keys, tables, Bundle, ExtentPtr, StoredRecord, Superblock};
use std::collections::HashMap;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: meta_breakdown POOL/meta.redb")?;
    let file_bytes = std::fs::metadata(&path)?.len();
    let db = redb::ReadOnlyDatabase::open(&path)?;
    let rx = db.begin_read()?;
    let sb = Superblock::decode(rx.open_table(tables::SUPERBLOCK)?.get(0u8)?.ok_or("no superblock")?.value())?;
    let sector = u64::from(sb.sector);
    let packed_bytes = sb.features.incompat & squeezefs_meta::Features::INCOMPAT_PACKED_BYTES != 0;
    let granule = if packed_bytes { 1 } else { sector };
    let recordsize = u64::from(sb.recordsize);

    println!(
        "meta.redb: {file_bytes} bytes (file length); sector {sector}, record size {recordsize}, bundles up to {}, records packed at {granule}-byte granularity",
        sb.bundle_size()
    );
    println!("{:<16} {:>9} {:>12} {:>12} {:>12} {:>12}", "table", "rows", "stored B", "leaf B", "branch B", "fragm. B");
    let mut total = [0u64; 4];
    macro_rules! table {
        ($def:expr) => {{
            let t = rx.open_table($def)?;
            let s = t.stats()?;
            let row = [s.stored_bytes(), s.leaf_pages() * 4096, s.branch_pages() * 4096, s.fragmented_bytes()];
            for (a, b) in total.iter_mut().zip(row) {
                *a += b;
            }
            println!("{:<16} {:>9} {:>12} {:>12} {:>12} {:>12}", $def.name(), t.len()?, row[0], row[1], row[2], row[3]);
        }};
    }
    table!(tables::INODES);
    table!(tables::DIRENTS);
    table!(tables::DIR_COOKIES);
    table!(tables::DIR_NEXT_COOKIE);
    table!(tables::XATTRS);
    table!(tables::SYMLINKS);
    table!(tables::EXTENTS);
    table!(tables::FREE_SPACE);
    let other: TableDefinition<u64, ()> = tables::ORPHANS;
    table!(other);
    // pools made before bundles have no such table
    let mut bundles = (0u64, 0u64, 0u64);
    if rx.list_tables()?.any(|t| t.name() == tables::BUNDLES.name()) {
        table!(tables::BUNDLES);
        for row in rx.open_table(tables::BUNDLES)?.iter()? {
            let b = Bundle::decode(row?.1.value())?;
            bundles.0 += 1;
            bundles.1 += u64::from(b.logical);
            bundles.2 += u64::from(b.ext.psize);
        }
    }
    // pools made before per-file record sizes have no such table
    let mut own_rs: HashMap<u64, u64> = HashMap::new();
    if rx.list_tables()?.any(|t| t.name() == tables::RECORDSIZES.name()) {
        table!(tables::RECORDSIZES);
        for row in rx.open_table(tables::RECORDSIZES)?.iter()? {
            let (k, v) = row?;
            own_rs.insert(k.value(), u64::from(v.value()));
        }
    }
    println!("{:<16} {:>9} {:>12} {:>12} {:>12} {:>12}", "total", "", total[0], total[1], total[2], total[3]);

    // extents: per file, its records; classify
    let ext = rx.open_table(tables::EXTENTS)?;
    let mut per_file: HashMap<u64, Vec<(u64, ExtentPtr)>> = HashMap::new();
    for row in ext.iter()? {
        let (k, v) = row?;
        let (ino, idx) = keys::unpair(k.value()).ok_or("bad extent key")?;
        per_file.entry(ino).or_default().push((idx, ExtentPtr::decode(v.value())?));
    }
    #[derive(Default)]
    struct Class {
        records: u64,
        logical: u64,
        psize: u64,
        alloc: u64,
    }
    let (mut inline, mut full, mut short, mut bundled) =
        (Class::default(), Class::default(), Class::default(), Class::default());
    let mut single_record_files = 0u64;
    // short device records by stored size: < 512 B, < 1 KiB, < 2 KiB, ... , >= 32 KiB
    let mut short_hist = [0u64; 8];
    for (ino, recs) in &per_file {
        let recordsize = own_rs.get(ino).copied().unwrap_or(recordsize);
        if recs.len() == 1 {
            single_record_files += 1;
        }
        for (_, e) in recs {
            let (class, alloc) = match &e.stored {
                StoredRecord::Inline(v) => (&mut inline, v.len() as u64),
                StoredRecord::Bundled(b) => (&mut bundled, u64::from(b.share)),
                StoredRecord::Device(d) => {
                    let alloc = u64::from(d.psize).div_ceil(granule) * granule;
                    if u64::from(e.logical) < recordsize {
                        let bucket = (u64::from(d.psize) / 256).max(1).ilog2() as usize;
                        short_hist[bucket.min(7)] += 1;
                        (&mut short, alloc)
                    } else {
                        (&mut full, alloc)
                    }
                }
            };
            class.records += 1;
            class.logical += u64::from(e.logical);
            class.psize += e.psize();
            class.alloc += alloc;
        }
    }
    println!("\nfiles with extents: {} ({} of one record)", per_file.len(), single_record_files);
    println!("{:<28} {:>9} {:>14} {:>14} {:>14}", "records", "count", "logical B", "stored B", "footprint B");
    for (name, c) in [
        ("inline (in meta.redb)", &inline),
        ("device, whole record", &full),
        ("device, short (tail/small)", &short),
        ("bundled (share of a bundle)", &bundled),
    ] {
        println!("{:<28} {:>9} {:>14} {:>14} {:>14}", name, c.records, c.logical, c.psize, c.alloc);
    }
    if bundles.0 > 0 {
        println!(
            "bundles: {} holding {} records, {} bytes decoded, {} stored ({:.1} records and {:.0} stored bytes each)",
            bundles.0,
            bundled.records,
            bundles.1,
            bundles.2,
            bundled.records as f64 / bundles.0 as f64,
            bundles.2 as f64 / bundles.0 as f64
        );
    }
    let dev_alloc = full.alloc + short.alloc;
    let pad = dev_alloc - full.psize - short.psize;
    println!(
        "device footprint {dev_alloc}: padding {pad} ({:.1}%), short records {} ({:.1}%)",
        100.0 * pad as f64 / dev_alloc.max(1) as f64,
        short.alloc,
        100.0 * short.alloc as f64 / dev_alloc.max(1) as f64
    );
    print!("short device records by stored size:");
    for (i, n) in short_hist.iter().enumerate() {
        let lo = 256u64 << i;
        match i {
            0 => print!("  <512 B: {n}"),
            7 => print!("  >={} KiB: {n}", lo / 1024),
            _ => print!("  {}-{} KiB: {n}", lo as f64 / 1024.0, 2 * lo / 1024),
        }
    }
    println!();
    Ok(())
}
