//! Inputs for the crate's unit tests.

/// `len` bytes of xorshift64 noise from `seed` (incompressible to every codec here).
pub(crate) fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
