//! Pool identity: 16 random bytes written into every device header of a pool, so a device
//! from another pool (or a stale copy) is recognised at open.

use std::fmt;
use std::io::Read;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PoolId(pub [u8; 16]);

impl PoolId {
    /// A fresh random id from the kernel's CSPRNG; if /dev/urandom is unreadable (very
    /// unusual), falls back to a hash of the time, pid and an address, which is still unique
    /// enough to tell pools apart.
    pub fn random() -> PoolId {
        let mut b = [0u8; 16];
        if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_ok() {
            return PoolId(b);
        }
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let seed = format!("{nanos}:{}:{:p}", std::process::id(), &b);
        let h = xxhash_rust::xxh3::xxh3_128(seed.as_bytes());
        PoolId(h.to_le_bytes())
    }

    /// Parse the 32-hex-digit form printed by `Display`.
    pub fn parse_hex(s: &str) -> Option<PoolId> {
        let s = s.trim();
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(PoolId(b))
    }
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PoolId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_differ_and_hex_round_trips() {
        let a = PoolId::random();
        let b = PoolId::random();
        assert_ne!(a, b);
        let s = a.to_string();
        assert_eq!(s.len(), 32);
        assert_eq!(PoolId::parse_hex(&s), Some(a));
    }

    #[test]
    fn parse_hex_rejects_bad_input() {
        assert_eq!(PoolId::parse_hex(""), None);
        assert_eq!(PoolId::parse_hex("00"), None);
        assert_eq!(PoolId::parse_hex(&"g".repeat(32)), None);
        assert_eq!(PoolId::parse_hex(&"é".repeat(16)), None);
        assert_eq!(
            PoolId::parse_hex("000102030405060708090a0b0c0d0e0f"),
            Some(PoolId([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]))
        );
    }
}
