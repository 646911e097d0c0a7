//! The sealed form of a store, table by table: rows, key and value stream bytes, and each
//! stream compressed alone at zstd levels 3 and 19; and the whole seal at several levels
//! (bytes and time: what `SEAL_LEVEL` is chosen from).
//!
//! `cargo run --release -p squeezefs-meta --example seal_breakdown -- POOL/meta.redb`
use redb::ReadableDatabase;

fn varint(b: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let x = b[*pos];
        *pos += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: seal_breakdown POOL/meta.redb")?;
    let db = redb::ReadOnlyDatabase::open(&path)?;
    let rx = db.begin_read()?;
    let (body, _, rows) = squeezefs_meta::seal::dump_body(&rx)?;
    let z = |b: &[u8], l: i32| zstd::bulk::compress(b, l).map(|c| c.len()).unwrap_or(0);
    println!("body {} bytes, {rows} rows", body.len());
    for level in [3, 6, 9, 12, 15, 17, 19] {
        let t = std::time::Instant::now();
        let (file, _) = squeezefs_meta::seal::seal(&rx, level)?;
        println!("  seal at zstd {level:>2}: {} bytes in {:.2} s", file.len(), t.elapsed().as_secs_f64());
    }
    println!(
        "{:<16} {:>8} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "table", "rows", "keys B", "k z3", "k z19", "values B", "v z3", "v z19"
    );
    let mut pos = 0;
    while pos < body.len() {
        let n = body[pos] as usize;
        let name = std::str::from_utf8(&body[pos + 1..pos + 1 + n])?.to_string();
        pos += 1 + n;
        let form = body[pos];
        pos += 1;
        let rows = varint(&body, &mut pos);
        if form == 1 {
            println!("{name:<16} {rows:>8} (derived)");
            continue;
        }
        if form == 2 {
            let names: &[&str] = if name == "extents" {
                &["head", "nums", "sums", "births", "places", "rest"]
            } else {
                &["head", "inodes", "cookies"]
            };
            let lens: Vec<usize> = (0..=names.len()).map(|_| varint(&body, &mut pos) as usize).collect();
            let k = &body[pos..pos + lens[0]];
            println!("{name:<16} {rows:>8} {:>10} {:>9} {:>9} (values in columns:)", lens[0], z(k, 3), z(k, 19));
            pos += lens[0];
            for (col, &l) in names.iter().zip(&lens[1..]) {
                let c = &body[pos..pos + l];
                println!("  {col:<14} {:>8} {:>10} {:>9} {:>9} {l:>10} {:>9} {:>9}", "", "", "", "", z(c, 3), z(c, 19));
                pos += l;
            }
            continue;
        }
        let kl = varint(&body, &mut pos) as usize;
        let vl = varint(&body, &mut pos) as usize;
        let k = &body[pos..pos + kl];
        let v = &body[pos + kl..pos + kl + vl];
        pos += kl + vl;
        println!(
            "{name:<16} {rows:>8} {kl:>10} {:>9} {:>9} {vl:>10} {:>9} {:>9}",
            z(k, 3),
            z(k, 19),
            z(v, 3),
            z(v, 19)
        );
        if let Ok(dir) = std::env::var("SEAL_STREAMS") {
            std::fs::write(format!("{dir}/{name}.k"), k)?;
            std::fs::write(format!("{dir}/{name}.v"), v)?;
        }
    }
    Ok(())
}
