//! Segment objects: immutable objects `segments/NNNNNNNNNNNNNNNN` (16 hex digits) under
//! the prefix, each the byte-packed concatenation of the writes of one or more syncs, up to
//! the segment size. Their integrity is checked per block of [`BLOCK`] bytes with xxh3-64
//! (the checksums are kept in the map, not in the object), so a ranged GET of the blocks
//! under a record is checked on its own.

use xxhash_rust::xxh3::xxh3_64;

/// Bytes per checksummed block: the unit of ranged GETs and of the read cache.
pub const BLOCK: u64 = 64 << 10;

/// Version of [`SegmentRow`]'s encoding.
pub const SEGMENT_ROW_VERSION: u8 = 1;

/// Folder of the segment objects under the prefix.
pub const SEGMENT_DIR: &str = "segments";

pub fn segment_name(id: u64) -> String {
    format!("{SEGMENT_DIR}/{id:016x}")
}

/// The segment number of an object name under the prefix, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix(SEGMENT_DIR)?.strip_prefix('/')?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// What the map knows about one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentRow {
    pub size: u64,
    /// bytes some extent still references
    pub live: u64,
    /// xxh3-64 of each [`BLOCK`] (the last one may be shorter)
    pub checksums: Vec<u64>,
}

impl SegmentRow {
    /// The row of a new segment holding `data`, nothing live yet (the commit's ops add it).
    pub fn of(data: &[u8]) -> SegmentRow {
        SegmentRow { size: data.len() as u64, live: 0, checksums: data.chunks(BLOCK as usize).map(xxh3_64).collect() }
    }

    /// Byte layout (little-endian): version u8 = 1, size u64, live u64, block size u32,
    /// block count u32, then one u64 checksum per block.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(25 + 8 * self.checksums.len());
        v.push(SEGMENT_ROW_VERSION);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.live.to_le_bytes());
        v.extend_from_slice(&(BLOCK as u32).to_le_bytes());
        v.extend_from_slice(&(self.checksums.len() as u32).to_le_bytes());
        for c in &self.checksums {
            v.extend_from_slice(&c.to_le_bytes());
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<SegmentRow, String> {
        if b.len() < 25 {
            return Err(format!("row of {} bytes, shorter than its 25-byte head", b.len()));
        }
        if b[0] != SEGMENT_ROW_VERSION {
            return Err(format!("row version {} (this build reads {SEGMENT_ROW_VERSION})", b[0]));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let (size, live, block, count) = (u64_at(1), u64_at(9), u32_at(17), u32_at(21) as usize);
        if u64::from(block) != BLOCK {
            return Err(format!("block size {block} (this build uses {BLOCK})"));
        }
        if b.len() != 25 + 8 * count || count as u64 != size.div_ceil(BLOCK) {
            return Err(format!("{count} checksums for {size} bytes in a row of {} bytes", b.len()));
        }
        Ok(SegmentRow { size, live, checksums: (0..count).map(|i| u64_at(25 + 8 * i)).collect() })
    }

    /// Bytes of block `i`.
    pub fn block_len(&self, i: u64) -> u64 {
        (self.size - i * BLOCK).min(BLOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_names_parse() {
        let data: Vec<u8> = (0..(BLOCK * 2 + 5)).map(|i| (i % 251) as u8).collect();
        let mut row = SegmentRow::of(&data);
        row.live = 77;
        assert_eq!(row.checksums.len(), 3);
        assert_eq!(row.block_len(2), 5);
        assert_eq!(SegmentRow::decode(&row.encode()).unwrap(), row);
        let mut bad = row.encode();
        bad.pop();
        assert!(SegmentRow::decode(&bad).is_err());
        assert_eq!(parse_segment_name(&segment_name(0xabc)), Some(0xabc));
        assert_eq!(parse_segment_name("segments/xyz"), None);
        assert_eq!(parse_segment_name("meta/0000000000000001"), None);
    }
}
