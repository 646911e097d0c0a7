//! The `dirents` table of a sealed store in columns (form 2 of `seal.rs`): its values
//! (version, kind, target inode, cookie) split into three streams, inode and cookie as
//! differences from the row before. In key order, the entries of a directory follow each
//! other by name, and a tree copied in name order got its inodes and cookies in that order
//! too, so the differences are mostly small: on the Linux 6.1 tree store the values take
//! 16 KB at zstd level 9 in columns against 189 KB as rows.
//!
//! Only version-2 dirent values (docs/format.md) are split, and the split is checked by
//! joining it back byte for byte; a table holding anything else is kept as rows.
//!
//! ```text
//! stream   per row
//! head     version, kind: 2 bytes as stored
//! inodes   zigzag(inode − previous row's inode) as a varint (previous: 0 at the start)
//! cookies  zigzag(cookie − previous row's cookie) as a varint (previous: 0 at the start)
//! ```

use crate::seal_wire::{put_varint, unzigzag, zigzag, Reader, SealError};

/// The three streams, in the order they are written.
pub(crate) const STREAMS: usize = 3;

/// The columns of a form-0 value stream of `rows` dirent values (varint length, bytes),
/// or `None` when a row cannot be split and joined back to the same bytes.
pub(crate) fn split(values: &[u8], rows: u64) -> Option<[Vec<u8>; STREAMS]> {
    let mut cols: [Vec<u8>; STREAMS] = Default::default();
    let [head, inodes, cookies] = &mut cols;
    let (mut prev_ino, mut prev_cookie) = (0u64, 0u64);
    let mut r = Reader::new(values, "value stream");
    for _ in 0..rows {
        let n = r.len().ok()?;
        let v = r.bytes(n).ok()?;
        if v.len() < 2 || v[0] != 2 {
            return None;
        }
        head.extend_from_slice(&v[..2]);
        let mut f = Reader::new(&v[2..], "dirent");
        let (ino, cookie) = (f.varint().ok()?, f.varint().ok()?);
        if !f.done() {
            return None;
        }
        put_varint(inodes, zigzag(ino.wrapping_sub(prev_ino)));
        put_varint(cookies, zigzag(cookie.wrapping_sub(prev_cookie)));
        (prev_ino, prev_cookie) = (ino, cookie);
    }
    if !r.done() {
        return None;
    }
    match join([&cols[0], &cols[1], &cols[2]], rows) {
        Ok(back) if back == values => Some(cols),
        _ => None,
    }
}

/// The form-0 value stream of `rows` dirent values from their columns.
pub(crate) fn join(cols: [&[u8]; STREAMS], rows: u64) -> Result<Vec<u8>, SealError> {
    let mut head = Reader::new(cols[0], "dirent head stream");
    let mut inodes = Reader::new(cols[1], "dirent inode stream");
    let mut cookies = Reader::new(cols[2], "dirent cookie stream");
    let (mut prev_ino, mut prev_cookie) = (0u64, 0u64);
    let mut out = Vec::new();
    let mut v = Vec::new();
    for _ in 0..rows {
        v.clear();
        v.extend_from_slice(head.bytes(2)?);
        let ino = prev_ino.wrapping_add(unzigzag(inodes.varint()?));
        let cookie = prev_cookie.wrapping_add(unzigzag(cookies.varint()?));
        put_varint(&mut v, ino);
        put_varint(&mut v, cookie);
        (prev_ino, prev_cookie) = (ino, cookie);
        put_varint(&mut out, v.len() as u64);
        out.extend_from_slice(&v);
    }
    for s in [&head, &inodes, &cookies] {
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

    fn row(kind: u8, ino: u64, cookie: u64) -> Vec<u8> {
        let mut v = vec![2, kind];
        put_varint(&mut v, ino);
        put_varint(&mut v, cookie);
        v
    }

    #[test]
    fn rows_split_and_join_back_and_others_are_not_split() {
        let rows = vec![row(1, 5, 3), row(2, 6, 4), row(1, 2, 9), row(1, u64::MAX, 0), row(7, 0, u64::MAX)];
        let s = stream(&rows);
        let cols = split(&s, 5).expect("split");
        assert_eq!(join([&cols[0], &cols[1], &cols[2]], 5).unwrap(), s);
        assert!(join([&cols[0], &cols[1], &cols[2]], 6).is_err());
        for bad in [vec![1u8; 18], [&row(1, 1, 1)[..], b"x"].concat(), vec![2, 1, 0x81, 0x00, 1]] {
            assert!(split(&stream(&[row(1, 1, 1), bad]), 2).is_none());
        }
    }

    proptest! {
        #[test]
        fn any_rows_round_trip_or_are_refused(rows in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..20)) {
            let s = stream(&rows);
            if let Some(cols) = split(&s, rows.len() as u64) {
                prop_assert_eq!(join([&cols[0], &cols[1], &cols[2]], rows.len() as u64).unwrap(), s);
            }
        }
    }
}
