//! Where each auto range starts on the next mount (table `auto_start`, squeezefs_meta
//! auto_start.rs; docs/design.md §9 "Resume"): the rows read at pool open and written by the
//! txg commit. A row is keyed by its range's spec text; a row that does not decode (a key
//! that is no auto spec, a damaged value, an algorithm this build does not know) is skipped
//! with a warning: its range starts at the nominal rung, and the pool opens all the same.

use crate::base::error::{Corruption, Result};
use redb::ReadableTable;
use squeezefs_codec::{Algorithm, Codec, Spec};
use squeezefs_meta::{tables, AutoStart, Features, Superblock};

/// The stored start of every auto range that has one; none when the table is absent or
/// cannot be read (logged).
pub fn load(rx: &redb::ReadTransaction) -> Vec<(Spec, Codec)> {
    let t = match crate::store::snapshot::open_if_present(rx, tables::AUTO_START) {
        Ok(Some(t)) => t,
        Ok(None) => return Vec::new(),
        Err(e) => {
            log::warn!("auto: the auto_start table cannot be read ({e}); every auto range starts at its nominal rung");
            return Vec::new();
        }
    };
    let rows = match t.iter() {
        Ok(rows) => rows,
        Err(e) => {
            log::warn!("auto: the auto_start table cannot be read ({e}); every auto range starts at its nominal rung");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for row in rows {
        let (k, v) = match row {
            Ok(r) => r,
            Err(e) => {
                log::warn!("auto: an auto_start row cannot be read ({e}); skipped");
                continue;
            }
        };
        match decode_row(k.value(), v.value()) {
            Ok(r) => out.push(r),
            Err(why) => log::warn!("auto: auto_start row {:?} skipped: {why}", String::from_utf8_lossy(k.value())),
        }
    }
    out
}

/// One row as (range, codec), or why it is not one.
fn decode_row(key: &[u8], value: &[u8]) -> std::result::Result<(Spec, Codec), String> {
    let text = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
    let spec: Spec = text.parse().map_err(|e| format!("the key is no spec ({e})"))?;
    if !matches!(spec, Spec::Auto { .. }) {
        return Err("the key is no auto range".into());
    }
    let a = AutoStart::decode(value).map_err(|e| e.to_string())?;
    let alg = Algorithm::from_id(a.alg).ok_or_else(|| format!("algorithm id {} unknown to this build", a.alg))?;
    Ok((spec, Codec { alg, level: a.level }))
}

/// The key of `spec`'s row: its canonical text.
pub fn key(spec: &Spec) -> Vec<u8> {
    spec.to_string().into_bytes()
}

/// Write `rows` into the commit's transaction `tx`, with the compat feature that says the
/// table may exist (set by the pool's first row).
pub fn write(tx: &redb::WriteTransaction, rows: &[(Spec, Codec)]) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    {
        let mut t = tx.open_table(tables::AUTO_START)?;
        for (spec, c) in rows {
            let v = AutoStart { alg: c.alg.id(), level: c.level }.encode();
            t.insert(&key(spec)[..], &v[..])?;
        }
    }
    let mut sbt = tx.open_table(tables::SUPERBLOCK)?;
    let mut sb = {
        let v = sbt.get(0u8)?.ok_or(Corruption::SuperblockMissing)?;
        Superblock::decode(v.value())?
    };
    if sb.features.compat & Features::COMPAT_AUTO_START == 0 {
        sb.features.compat |= Features::COMPAT_AUTO_START;
        sbt.insert(0u8, &sb.encode()[..])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::decode_row;
    use squeezefs_codec::{Algorithm, Codec};

    #[test]
    fn a_row_decodes_only_with_an_auto_key_and_a_known_codec() {
        let v = [1u8, 4, 1, 0, 0, 0];
        let (spec, c) = decode_row(b"auto", &v).unwrap();
        assert_eq!((spec.to_string(), c), ("auto".to_string(), Codec { alg: Algorithm::Zstd, level: 1 }));
        assert!(decode_row(b"zstd:3", &v).is_err(), "not an auto range");
        assert!(decode_row(b"no such spec", &v).is_err());
        assert!(decode_row(&[0xff, 0xfe], &v).is_err());
        assert!(decode_row(b"auto", &v[..5]).is_err());
        assert!(decode_row(b"auto", &[1, 5, 0, 0, 0, 0]).is_ok(), "lzo");
    }
}
