//! The `extents` table of a sealed store in columns (form 2 of `seal.rs`): its values
//! split field by field into six streams, with the fields that follow each other (birth
//! txg, device offset, bundle id and offset) stored as differences from the row before.
//! Like fields together compress far better than whole rows: on the Linux 6.1 tree store
//! the extent values take 1.03 MB at zstd level 9 in columns against 1.47 MB as rows, and
//! 0.66 MB of that are the rows' checksums, which do not compress at all.
//!
//! Only version-2 extent values (docs/format.md) with tags 1 (device), 2 (inline) and 3
//! (bundled) are split; the split is checked by joining it back, byte for byte, so a table
//! holding anything else (older rows, a varint not in its shortest form) is kept as rows.
//!
//! ```text
//! stream  per row
//! head    version, tag, algorithm: 3 bytes as stored
//! nums    level (the stored zigzag varint), logical length: varints
//! sums    the 8-byte xxh3-64
//! births  zigzag(birth − previous row's birth) as a varint (previous: 0 at the start)
//! places  tag 1: device, zigzag(offset − end of the previous tag-1 row), stored length
//!         tag 3: zigzag(bundle − previous tag-3 row's bundle),
//!                zigzag(offset − end of the previous slice when in the same bundle, else 0),
//!                share; all varints (ends: offset + length, offset + logical; 0 at the start)
//! rest    tag 2: varint length, the stored bytes
//! ```
//!
//! Differences are taken modulo 2^64 and zigzag-mapped, so any value round-trips.

use crate::seal_wire::{put_varint, unzigzag, zigzag, Reader, SealError};

/// The six streams, in the order they are written.
pub(crate) const STREAMS: usize = 6;

/// What a row's fields are told apart from.
#[derive(Default)]
struct Prev {
    birth: u64,
    dev_end: u64,
    bundle: u64,
    slice_end: u64,
}

/// The columns of a form-0 value stream of `rows` extent values (varint length, bytes),
/// or `None` when a row cannot be split and joined back to the same bytes.
pub(crate) fn split(values: &[u8], rows: u64) -> Option<[Vec<u8>; STREAMS]> {
    let mut cols: [Vec<u8>; STREAMS] = Default::default();
    let [head, nums, sums, births, places, rest] = &mut cols;
    let mut prev = Prev::default();
    let mut r = Reader::new(values, "value stream");
    for _ in 0..rows {
        let n = r.len().ok()?;
        let v = r.bytes(n).ok()?;
        if v.len() < 3 || v[0] != 2 {
            return None;
        }
        let tag = v[1];
        head.extend_from_slice(&v[..3]);
        let mut f = Reader::new(&v[3..], "extent");
        put_varint(nums, f.varint().ok()?);
        let logical = f.varint().ok()?;
        put_varint(nums, logical);
        sums.extend_from_slice(f.bytes(8).ok()?);
        let birth = f.varint().ok()?;
        put_varint(births, zigzag(birth.wrapping_sub(prev.birth)));
        prev.birth = birth;
        match tag {
            1 => {
                let (dev, off, len) = (f.varint().ok()?, f.varint().ok()?, f.varint().ok()?);
                put_varint(places, dev);
                put_varint(places, zigzag(off.wrapping_sub(prev.dev_end)));
                put_varint(places, len);
                prev.dev_end = off.wrapping_add(len);
            }
            2 => {
                let bytes = &v[3 + f.pos..];
                f.pos = v.len() - 3;
                put_varint(rest, bytes.len() as u64);
                rest.extend_from_slice(bytes);
            }
            3 => {
                let (id, off, share) = (f.varint().ok()?, f.varint().ok()?, f.varint().ok()?);
                let base = if id == prev.bundle { prev.slice_end } else { 0 };
                put_varint(places, zigzag(id.wrapping_sub(prev.bundle)));
                put_varint(places, zigzag(off.wrapping_sub(base)));
                put_varint(places, share);
                prev.bundle = id;
                prev.slice_end = off.wrapping_add(logical);
            }
            _ => return None,
        }
        if !f.done() {
            return None;
        }
    }
    if !r.done() {
        return None;
    }
    let cols_ref: [&[u8]; STREAMS] = [&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5]];
    match join(cols_ref, rows) {
        Ok(back) if back == values => Some(cols),
        _ => None,
    }
}

/// The form-0 value stream (varint length, bytes per row) of `rows` extent values from
/// their columns.
pub(crate) fn join(cols: [&[u8]; STREAMS], rows: u64) -> Result<Vec<u8>, SealError> {
    let names = ["extent head stream", "extent number stream", "extent checksum stream", "extent birth stream"];
    let [head, nums, sums, births] = [0, 1, 2, 3].map(|i| Reader::new(cols[i], names[i]));
    let (mut head, mut nums, mut sums, mut births) = (head, nums, sums, births);
    let mut places = Reader::new(cols[4], "extent place stream");
    let mut rest = Reader::new(cols[5], "extent inline stream");
    let mut prev = Prev::default();
    let mut out = Vec::new();
    let mut v = Vec::new();
    for _ in 0..rows {
        v.clear();
        let h = head.bytes(3)?;
        v.extend_from_slice(h);
        put_varint(&mut v, nums.varint()?);
        let logical = nums.varint()?;
        put_varint(&mut v, logical);
        v.extend_from_slice(sums.bytes(8)?);
        let birth = prev.birth.wrapping_add(unzigzag(births.varint()?));
        put_varint(&mut v, birth);
        prev.birth = birth;
        match h[1] {
            1 => {
                let dev = places.varint()?;
                let off = prev.dev_end.wrapping_add(unzigzag(places.varint()?));
                let len = places.varint()?;
                for x in [dev, off, len] {
                    put_varint(&mut v, x);
                }
                prev.dev_end = off.wrapping_add(len);
            }
            2 => {
                let n = rest.len()?;
                v.extend_from_slice(rest.bytes(n)?);
            }
            3 => {
                let id = prev.bundle.wrapping_add(unzigzag(places.varint()?));
                let base = if id == prev.bundle { prev.slice_end } else { 0 };
                let off = base.wrapping_add(unzigzag(places.varint()?));
                let share = places.varint()?;
                for x in [id, off, share] {
                    put_varint(&mut v, x);
                }
                prev.bundle = id;
                prev.slice_end = off.wrapping_add(logical);
            }
            t => return Err(head.corrupt(&format!("extent tag {t}; the columns hold tags 1, 2 and 3"))),
        }
        put_varint(&mut out, v.len() as u64);
        out.extend_from_slice(&v);
    }
    for s in [&head, &nums, &sums, &births, &places, &rest] {
        if !s.done() {
            return Err(s.corrupt("bytes left after the last row"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seal_wire::length_prefixed as stream;
    use proptest::prelude::*;

    fn row(tag: u8, logical: u64, birth: u64, tail: &[u64], inline: &[u8]) -> Vec<u8> {
        let mut v = vec![2, tag, 4];
        put_varint(&mut v, 6);
        put_varint(&mut v, logical);
        v.extend_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
        put_varint(&mut v, birth);
        for &x in tail {
            put_varint(&mut v, x);
        }
        v.extend_from_slice(inline);
        v
    }

    #[test]
    fn every_tag_splits_and_joins_back() {
        let rows = vec![
            row(1, 131072, 5, &[0, 4096, 40000], &[]),
            row(1, 131072, 5, &[0, 44096, 39000], &[]),
            row(3, 700, 6, &[17, 0, 300], &[]),
            row(3, 900, 6, &[17, 700, 390], &[]),
            row(3, 50, 4, &[16, 12, 1], &[]),
            row(2, 30, 9, &[], b"inline bytes"),
            row(1, u64::MAX, u64::MAX, &[u64::MAX, u64::MAX, 1], &[]),
            row(3, 1, 0, &[0, u64::MAX, 0], &[]),
        ];
        let s = stream(&rows);
        let cols = split(&s, rows.len() as u64).expect("split");
        let back = join([&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5]], rows.len() as u64).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn rows_it_cannot_reproduce_are_not_split() {
        // version 1, an unknown tag, bytes after a device row, a varint not in shortest form
        for bad in [
            vec![1u8; 43],
            row(4, 1, 1, &[1, 2, 3], &[]),
            row(1, 1, 1, &[1, 2, 3], b"x"),
            [&row(1, 1, 1, &[1, 2], &[])[..], &[0x83, 0x00]].concat(),
        ] {
            let s = stream(&[row(1, 10, 1, &[0, 4096, 10], &[]), bad]);
            assert!(split(&s, 2).is_none());
        }
    }

    #[test]
    fn damaged_columns_are_errors() {
        let rows = vec![row(1, 10, 1, &[0, 4096, 10], &[]), row(2, 3, 1, &[], b"abc")];
        let s = stream(&rows);
        let cols = split(&s, 2).unwrap();
        let c = |i: usize| cols[i].as_slice();
        assert!(join([c(0), c(1), c(2), c(3), c(4), c(5)], 3).is_err(), "a row too many");
        assert!(join([c(0), c(1), c(2), c(3), c(4), c(5)], 1).is_err(), "a row too few");
        assert!(join([c(0), c(1), &c(2)[..7], c(3), c(4), c(5)], 2).is_err(), "a short checksum");
    }

    proptest! {
        #[test]
        fn any_rows_round_trip_or_are_refused(rows in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..48), 0..20)) {
            let s = stream(&rows);
            if let Some(cols) = split(&s, rows.len() as u64) {
                let back = join([&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5]], rows.len() as u64).unwrap();
                prop_assert_eq!(back, s);
            }
        }
    }
}
