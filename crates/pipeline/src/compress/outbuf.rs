//! Recycled buffers for compressed records ([`OutPool`], [`OutBytes`]).
//!
//! A worker compresses into its scratch buffer and keeps the result in an exact-class
//! buffer taken from this pool; the result ([`OutBytes`]) lives until the txg storing it
//! has written it and let go of it, and dropping it puts the buffer back. Without the pool
//! every result was a fresh heap allocation whose first touch page-faulted (the engine
//! benchmark's workers faulted in ~32 MB per 127 MB written).
//!
//! States of a buffer: IDLE (in the pool, its pages mapped) → HELD (an `OutBytes`, shared
//! through an `Arc` by a dirty record held packed and the device write) → IDLE on drop, or
//! freed when its class is full.
//! Classes: capacity rounded up to a multiple of `CLASS_BYTES`; a buffer is pooled only if its
//! capacity is exactly its class (so a buffer taken for a class always fits it).
//! Tunables: `CLASS_BYTES` (16 KiB), `OutPool::new(max_bytes)`: idle bytes kept over all
//! classes.

use crate::base::locks::Mutex;
use std::sync::Arc;

/// Capacity granularity of pooled buffers.
pub const CLASS_BYTES: usize = 16 << 10;

/// Class index of a buffer that holds `len` bytes (0 for an empty one).
fn class_of(len: usize) -> usize {
    len.div_ceil(CLASS_BYTES)
}

/// Capacity of the buffers of class `c`.
fn class_capacity(c: usize) -> usize {
    c * CLASS_BYTES
}

pub struct OutPool {
    idle: Mutex<Idle>,
    max_bytes: usize,
}

#[derive(Default)]
struct Idle {
    /// idle buffers per class index
    classes: Vec<Vec<Vec<u8>>>,
    bytes: usize,
}

impl OutPool {
    pub fn new(max_bytes: usize) -> Arc<OutPool> {
        Arc::new(OutPool { idle: Mutex::default(), max_bytes })
    }

    /// A held copy of `src` in a recycled buffer when one of its class is idle.
    pub fn copy_of(self: &Arc<OutPool>, src: &[u8]) -> OutBytes {
        let c = class_of(src.len());
        let reused = {
            let mut idle = self.idle.lock();
            let b = idle.classes.get_mut(c).and_then(Vec::pop);
            if let Some(b) = &b {
                idle.bytes -= b.capacity();
            }
            b
        };
        let mut v = reused.unwrap_or_else(|| Vec::with_capacity(class_capacity(c)));
        v.clear();
        v.extend_from_slice(src);
        OutBytes { v, pool: Some(self.clone()) }
    }

    fn give(&self, v: Vec<u8>) {
        let c = class_of(v.capacity());
        if c == 0 || v.capacity() != class_capacity(c) {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.bytes + v.capacity() > self.max_bytes {
            return;
        }
        if idle.classes.len() <= c {
            idle.classes.resize_with(c + 1, Vec::new);
        }
        idle.bytes += v.capacity();
        idle.classes[c].push(v);
    }

    /// Idle bytes (tests).
    #[cfg(test)]
    fn idle_bytes(&self) -> usize {
        self.idle.lock().bytes
    }
}

/// Compressed bytes in a buffer that goes back to its pool when dropped.
pub struct OutBytes {
    v: Vec<u8>,
    pool: Option<Arc<OutPool>>,
}

impl OutBytes {
    /// Bytes not taken from a pool (tests, one-off results).
    pub fn unpooled(v: Vec<u8>) -> OutBytes {
        OutBytes { v, pool: None }
    }

    /// Memory held (for the dirty accounting).
    pub fn capacity(&self) -> usize {
        self.v.capacity()
    }
}

impl std::ops::Deref for OutBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.v
    }
}

impl std::fmt::Debug for OutBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutBytes({} bytes)", self.v.len())
    }
}

impl Drop for OutBytes {
    fn drop(&mut self) {
        if let Some(p) = self.pool.take() {
            p.give(std::mem::take(&mut self.v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_length() {
        for len in 0..(4 * CLASS_BYTES + 3) {
            let c = class_of(len);
            assert!(class_capacity(c) >= len, "len {len}");
            assert!(c == 0 || class_capacity(c - 1) < len, "len {len}: class not the smallest");
        }
    }

    #[test]
    fn dropped_results_are_reused_and_the_pool_is_bounded() {
        let pool = OutPool::new(3 * CLASS_BYTES);
        let a = pool.copy_of(&[1u8; 100]);
        let ptr = a.as_ptr();
        assert_eq!(&a[..], &[1u8; 100][..]);
        drop(a);
        assert_eq!(pool.idle_bytes(), CLASS_BYTES);
        let b = pool.copy_of(&[2u8; 200]);
        assert_eq!(b.as_ptr(), ptr, "same class: the idle buffer is reused");
        assert_eq!(&b[..], &[2u8; 200][..], "no stale bytes");
        assert_eq!(pool.idle_bytes(), 0);
        // a larger class does not take a smaller buffer
        drop(b);
        let c = pool.copy_of(&vec![3u8; CLASS_BYTES + 1]);
        assert_eq!(c.capacity(), 2 * CLASS_BYTES);
        assert_eq!(pool.idle_bytes(), CLASS_BYTES);
        drop(c);
        assert_eq!(pool.idle_bytes(), 3 * CLASS_BYTES);
        // full: more idle buffers are freed
        drop(pool.copy_of(&[4u8; 10]));
        drop(pool.copy_of(&vec![5u8; 3 * CLASS_BYTES]));
        assert!(pool.idle_bytes() <= 3 * CLASS_BYTES);
    }
}
