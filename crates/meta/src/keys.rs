//! Composite table keys.
//!
//! redb compares `&[u8]` keys bytewise, so the integer parts of composite keys are written
//! **big-endian**: byte order then equals numeric order, which is what makes range scans such
//! as "every entry of directory D" or "every record of inode I from index K on" one B-tree
//! range. (Values are little-endian; keys are the one deliberate exception.)

use crate::records::Ino;

/// `(dir, name)` → bytes: dir (u64 BE) ‖ name.
pub fn dir_name(dir: Ino, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&dir.to_be_bytes());
    k.extend_from_slice(name);
    k
}

/// Two big-endian u64: `(a, b)`; used for (dir, cookie) and (ino, record index).
pub fn pair(a: u64, b: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&a.to_be_bytes());
    k[8..].copy_from_slice(&b.to_be_bytes());
    k
}

/// Inverse of [`pair`]; `None` when the key is not 16 bytes.
pub fn unpair(k: &[u8]) -> Option<(u64, u64)> {
    if k.len() != 16 {
        return None;
    }
    let a = u64::from_be_bytes(k[..8].try_into().ok()?);
    let b = u64::from_be_bytes(k[8..].try_into().ok()?);
    Some((a, b))
}

/// Splits a `(ino, name)` key; `None` when shorter than 8 bytes.
pub fn split_ino_name(k: &[u8]) -> Option<(Ino, &[u8])> {
    if k.len() < 8 {
        return None;
    }
    Some((u64::from_be_bytes(k[..8].try_into().ok()?), &k[8..]))
}

/// Every key starting with `ino` lies in `ino_prefix(ino)..ino_prefix_end(ino)` (the end is
/// exclusive and `None` for the last possible inode).
pub fn ino_prefix(ino: Ino) -> [u8; 8] {
    ino.to_be_bytes()
}

pub fn ino_prefix_end(ino: Ino) -> Option<[u8; 8]> {
    ino.checked_add(1).map(|n| n.to_be_bytes())
}

/// `(dev, offset)` of a free range: dev (u32 BE) ‖ offset (u64 BE).
pub fn dev_offset(dev: u32, offset: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&dev.to_be_bytes());
    k[4..].copy_from_slice(&offset.to_be_bytes());
    k
}

pub fn split_dev_offset(k: &[u8]) -> Option<(u32, u64)> {
    if k.len() != 12 {
        return None;
    }
    Some((u32::from_be_bytes(k[..4].try_into().ok()?), u64::from_be_bytes(k[4..].try_into().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pair_order_is_numeric_order(a: u64, b: u64, c: u64, d: u64) {
            prop_assert_eq!(pair(a, b).cmp(&pair(c, d)), (a, b).cmp(&(c, d)));
            prop_assert_eq!(unpair(&pair(a, b)), Some((a, b)));
        }

        #[test]
        fn dir_name_groups_by_dir(a: u64, b: u64, n in proptest::collection::vec(any::<u8>(), 0..20)) {
            let k = dir_name(a, &n);
            prop_assert!(k.as_slice() >= &ino_prefix(a)[..]);
            if let Some(end) = ino_prefix_end(a) {
                prop_assert!(k.as_slice() < &end[..]);
            }
            prop_assert_eq!(split_ino_name(&k), Some((a, n.as_slice())));
            if a < b {
                prop_assert!(k < dir_name(b, &[]));
            }
        }

        #[test]
        fn dev_offset_round_trips(d: u32, o: u64, e: u32, p: u64) {
            prop_assert_eq!(split_dev_offset(&dev_offset(d, o)), Some((d, o)));
            prop_assert_eq!(dev_offset(d, o).cmp(&dev_offset(e, p)), (d, o).cmp(&(e, p)));
        }
    }

    #[test]
    fn last_inode_has_no_prefix_end() {
        assert!(ino_prefix_end(u64::MAX).is_none());
        assert_eq!(ino_prefix_end(1), Some(2u64.to_be_bytes()));
    }
}
