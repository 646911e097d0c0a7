//! The device header: the first `HEADER_RESERVED` bytes of every device of a pool.
//!
//! On-disk layout, format version 1, all integers little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0  | 8  | magic `SQZFSDEV` |
//! | 8  | 4  | format version (u32) |
//! | 12 | 4  | sector size in bytes (u32): 512 or 4096 |
//! | 16 | 16 | pool id |
//! | 32 | 4  | device index within the pool (u32) |
//! | 36 | 4  | device count of the pool (u32) |
//! | 40 | 8  | fixed capacity in bytes (u64), 0 = growable file |
//! | 48 | 8  | xxh3-64 of bytes 0..4096 with this field zeroed |
//! | 56 | 4040 | reserved, zero (covered by the checksum) |
//!
//! Data starts at `DATA_START` = 4096, aligned for 512 B and 4 KiB sectors alike.
//! Decoding order: magic (is it ours?), version (can we read the rest?), checksum (is it
//! intact?), field ranges (is it sane?). The version is checked before the checksum because a
//! later version may place the checksum elsewhere.

use crate::{Device, DeviceError, PoolId};
use xxhash_rust::xxh3::xxh3_64;

pub const MAGIC: [u8; 8] = *b"SQZFSDEV";
pub const FORMAT_VERSION: u32 = 1;
/// Bytes reserved for the header at the start of every device.
pub const HEADER_RESERVED: u64 = 4096;
/// First byte the engine may allocate for data.
pub const DATA_START: u64 = HEADER_RESERVED;
/// How many leading bytes `is_nonempty` inspects (mkfs refuses to overwrite them without
/// --force): 1 MiB, as far as blkid looks for the common signatures. btrfs and reiserfs keep
/// their superblock at 64 KiB and mkfs.btrfs zeroes what lies before it, so a 64 KiB probe
/// would let mkfs take a btrfs device without --force.
pub const NONEMPTY_PROBE_BYTES: u64 = 1024 * 1024;

const SECTOR_SIZES: [u32; 2] = [512, 4096];

mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..8;
    pub const VERSION: Range<usize> = 8..12;
    pub const SECTOR: Range<usize> = 12..16;
    pub const POOL_ID: Range<usize> = 16..32;
    pub const INDEX: Range<usize> = 32..36;
    pub const COUNT: Range<usize> = 36..40;
    pub const CAPACITY: Range<usize> = 40..48;
    pub const CHECKSUM: Range<usize> = 48..56;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceHeader {
    pub pool_id: PoolId,
    pub device_index: u32,
    pub device_count: u32,
    pub sector_size: u32,
    /// Fixed capacity in bytes, `None` for a growable device file.
    pub capacity: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    #[error("{device} is not a squeezefs device (no squeezefs header: {found})")]
    NotSqueezefs { device: String, found: String },
    #[error("{device} uses squeezefs device format version {found}; this build reads version {supported}")]
    UnsupportedVersion { device: String, found: u32, supported: u32 },
    #[error("the squeezefs header of {device} is corrupt (checksum {stored:016x} stored, {computed:016x} computed)")]
    Corrupt { device: String, stored: u64, computed: u64 },
    #[error("the squeezefs header of {device} is invalid: {reason}")]
    Invalid { device: String, reason: String },
    #[error("{device} belongs to pool {found}, not to pool {expected}")]
    WrongPool { device: String, expected: PoolId, found: PoolId },
    #[error("{device} is device #{found} of its pool but was given as device #{expected} (devices swapped or listed in another order?)")]
    WrongIndex { device: String, expected: u32, found: u32 },
    #[error(transparent)]
    Device(#[from] DeviceError),
}

impl DeviceHeader {
    /// The header as it lies on disk (always `HEADER_RESERVED` bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_RESERVED as usize];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[field::SECTOR].copy_from_slice(&self.sector_size.to_le_bytes());
        b[field::POOL_ID].copy_from_slice(&self.pool_id.0);
        b[field::INDEX].copy_from_slice(&self.device_index.to_le_bytes());
        b[field::COUNT].copy_from_slice(&self.device_count.to_le_bytes());
        b[field::CAPACITY].copy_from_slice(&self.capacity.unwrap_or(0).to_le_bytes());
        let sum = xxh3_64(&b);
        b[field::CHECKSUM].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decode the first `HEADER_RESERVED` bytes of `device`.
    pub fn decode(device: &str, b: &[u8]) -> Result<DeviceHeader, HeaderError> {
        if b.len() < HEADER_RESERVED as usize {
            return Err(HeaderError::NotSqueezefs {
                device: device.to_string(),
                found: format!("only {} bytes long", b.len()),
            });
        }
        let b = &b[..HEADER_RESERVED as usize];
        if b[field::MAGIC] != MAGIC {
            let found = if b.iter().all(|&x| x == 0) {
                "the header area is all zeros".to_string()
            } else {
                format!("first bytes {}", hex(&b[field::MAGIC]))
            };
            return Err(HeaderError::NotSqueezefs { device: device.to_string(), found });
        }
        let version = le_u32(&b[field::VERSION]);
        if version != FORMAT_VERSION {
            return Err(HeaderError::UnsupportedVersion {
                device: device.to_string(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let stored = le_u64(&b[field::CHECKSUM]);
        let mut zeroed = b.to_vec();
        zeroed[field::CHECKSUM].fill(0);
        let computed = xxh3_64(&zeroed);
        if stored != computed {
            return Err(HeaderError::Corrupt { device: device.to_string(), stored, computed });
        }
        let mut pool = [0u8; 16];
        pool.copy_from_slice(&b[field::POOL_ID]);
        let capacity = match le_u64(&b[field::CAPACITY]) {
            0 => None,
            c => Some(c),
        };
        let h = DeviceHeader {
            pool_id: PoolId(pool),
            device_index: le_u32(&b[field::INDEX]),
            device_count: le_u32(&b[field::COUNT]),
            sector_size: le_u32(&b[field::SECTOR]),
            capacity,
        };
        h.validate(device)?;
        Ok(h)
    }

    /// Field ranges: sector 512/4096, index < count, capacity (if fixed) holds the header
    /// and at least one sector of data.
    pub fn validate(&self, device: &str) -> Result<(), HeaderError> {
        let invalid = |reason: String| HeaderError::Invalid { device: device.to_string(), reason };
        if !SECTOR_SIZES.contains(&self.sector_size) {
            return Err(invalid(format!("sector size {} (accepted: 512 or 4096)", self.sector_size)));
        }
        if self.device_count == 0 || self.device_index >= self.device_count {
            return Err(invalid(format!(
                "device index {} of a pool of {} devices",
                self.device_index, self.device_count
            )));
        }
        if let Some(cap) = self.capacity {
            let min = DATA_START + u64::from(self.sector_size);
            if cap < min {
                return Err(invalid(format!(
                    "capacity {cap} bytes is below the minimum of {min} bytes (header + one sector)"
                )));
            }
        }
        Ok(())
    }

    /// Is this the device `expected_index` of pool `expected_pool`? Names a foreign pool or
    /// a swapped device clearly.
    pub fn check(&self, device: &str, expected_pool: &PoolId, expected_index: u32) -> Result<(), HeaderError> {
        if self.pool_id != *expected_pool {
            return Err(HeaderError::WrongPool {
                device: device.to_string(),
                expected: *expected_pool,
                found: self.pool_id,
            });
        }
        if self.device_index != expected_index {
            return Err(HeaderError::WrongIndex {
                device: device.to_string(),
                expected: expected_index,
                found: self.device_index,
            });
        }
        Ok(())
    }
}

/// Write `h` at offset 0 of `dev` and sync it. Validates the fields first.
pub fn write_header(dev: &dyn Device, h: &DeviceHeader) -> Result<(), HeaderError> {
    h.validate(dev.name())?;
    dev.write_at(&h.encode(), 0)?;
    dev.sync()?;
    Ok(())
}

/// Read and decode the header of `dev`.
pub fn read_header(dev: &dyn Device) -> Result<DeviceHeader, HeaderError> {
    let len = dev.len();
    if len < HEADER_RESERVED {
        return Err(HeaderError::NotSqueezefs {
            device: dev.name().to_string(),
            found: if len == 0 { "the device is empty".to_string() } else { format!("only {len} bytes long") },
        });
    }
    let mut b = vec![0u8; HEADER_RESERVED as usize];
    dev.read_at(&mut b, 0)?;
    DeviceHeader::decode(dev.name(), &b)
}

/// Does `dev` hold anything in its first `NONEMPTY_PROBE_BYTES` (a filesystem, a partition
/// table, an old pool)? mkfs refuses such a device unless forced.
pub fn is_nonempty(dev: &dyn Device) -> Result<bool, DeviceError> {
    let n = dev.len().min(NONEMPTY_PROBE_BYTES);
    let mut b = vec![0u8; n as usize];
    dev.read_at(&mut b, 0)?;
    Ok(b.iter().any(|&x| x != 0))
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("4-byte field"))
}

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8-byte field"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doubles::MemDevice;
    use proptest::prelude::*;

    fn sample() -> DeviceHeader {
        DeviceHeader {
            pool_id: PoolId([
                0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,
            ]),
            device_index: 1,
            device_count: 3,
            sector_size: 512,
            capacity: Some(1 << 30),
        }
    }

    /// Format stability: this image was written by format version 1 and must keep decoding
    /// to the same header. Only the first 56 bytes are non-zero.
    const FROZEN_V1_PREFIX: &str = "53515a465344455601000000000200000123456789abcdeffedcba9876543210\
                                    01000000030000000000004000000000a5eb4a4a163ae5ed";

    fn frozen_image() -> Vec<u8> {
        let hexs: String = FROZEN_V1_PREFIX.split_whitespace().collect();
        let mut b = vec![0u8; HEADER_RESERVED as usize];
        for i in 0..hexs.len() / 2 {
            b[i] = u8::from_str_radix(&hexs[2 * i..2 * i + 2], 16).unwrap();
        }
        b
    }

    #[test]
    fn frozen_v1_image_decodes() {
        let h = DeviceHeader::decode("frozen", &frozen_image()).unwrap();
        assert_eq!(h, sample());
        assert_eq!(sample().encode(), frozen_image());
    }

    #[test]
    fn round_trip_through_a_device() {
        let dev = MemDevice::new("mem0");
        write_header(&dev, &sample()).unwrap();
        assert_eq!(dev.len(), HEADER_RESERVED);
        assert_eq!(read_header(&dev).unwrap(), sample());
    }

    #[test]
    fn empty_device_is_not_squeezefs() {
        let dev = MemDevice::new("mem0");
        let err = read_header(&dev).unwrap_err();
        assert!(err.to_string().contains("not a squeezefs device"), "{err}");
        assert!(err.to_string().contains("empty"), "{err}");
        dev.write_at(&[0u8; 8192], 0).unwrap();
        let err = read_header(&dev).unwrap_err();
        assert!(err.to_string().contains("all zeros"), "{err}");
    }

    #[test]
    fn foreign_data_is_not_squeezefs() {
        let dev = MemDevice::new("mem0");
        let mut b = vec![0u8; 4096];
        b[..4].copy_from_slice(&[0x7f, b'E', b'L', b'F']);
        dev.write_at(&b, 0).unwrap();
        let err = read_header(&dev).unwrap_err();
        assert!(matches!(err, HeaderError::NotSqueezefs { .. }), "{err}");
        assert!(err.to_string().contains("7f454c46"), "{err}");
    }

    #[test]
    fn future_version_is_unsupported_not_corrupt() {
        let mut b = sample().encode();
        b[field::VERSION].copy_from_slice(&2u32.to_le_bytes());
        let err = DeviceHeader::decode("d", &b).unwrap_err();
        assert!(matches!(err, HeaderError::UnsupportedVersion { found: 2, supported: 1, .. }), "{err}");
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let good = sample().encode();
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[byte] ^= 1 << bit;
                let r = DeviceHeader::decode("d", &b);
                assert!(r.is_err(), "flip of bit {bit} in byte {byte} went unnoticed");
            }
        }
    }

    #[test]
    fn check_names_wrong_pool_and_swapped_device() {
        let h = sample();
        h.check("d", &h.pool_id, 1).unwrap();
        let other = PoolId([9; 16]);
        let err = h.check("/dev/x", &other, 1).unwrap_err();
        assert!(matches!(err, HeaderError::WrongPool { .. }));
        assert!(err.to_string().contains("belongs to pool 0123"), "{err}");
        let err = h.check("/dev/x", &h.pool_id, 0).unwrap_err();
        assert!(matches!(err, HeaderError::WrongIndex { expected: 0, found: 1, .. }));
        assert!(err.to_string().contains("swapped"), "{err}");
    }

    #[test]
    fn invalid_fields_are_refused_at_write_and_read() {
        let dev = MemDevice::new("m");
        for bad in [
            DeviceHeader { sector_size: 1024, ..sample() },
            DeviceHeader { sector_size: 0, ..sample() },
            DeviceHeader { device_count: 0, device_index: 0, ..sample() },
            DeviceHeader { device_index: 3, ..sample() },
            DeviceHeader { capacity: Some(4096), ..sample() },
        ] {
            let err = write_header(&dev, &bad).unwrap_err();
            assert!(matches!(err, HeaderError::Invalid { .. }), "{err}");
            // Even with a valid checksum, decoding refuses the fields.
            let err = DeviceHeader::decode("m", &bad.encode()).unwrap_err();
            assert!(matches!(err, HeaderError::Invalid { .. }), "{err}");
        }
    }

    #[test]
    fn short_buffer_is_not_squeezefs() {
        let err = DeviceHeader::decode("d", &[0u8; 100]).unwrap_err();
        assert!(err.to_string().contains("only 100 bytes"), "{err}");
    }

    #[test]
    fn nonempty_probe() {
        let dev = MemDevice::new("m");
        assert!(!is_nonempty(&dev).unwrap());
        dev.write_at(&vec![0u8; 200_000], 0).unwrap();
        assert!(!is_nonempty(&dev).unwrap());
        dev.write_at(&[1], NONEMPTY_PROBE_BYTES).unwrap();
        assert!(!is_nonempty(&dev).unwrap(), "byte past the probe window counts");
        dev.write_at(&[1], NONEMPTY_PROBE_BYTES - 1).unwrap();
        assert!(is_nonempty(&dev).unwrap());
        let small = MemDevice::new("s");
        small.write_at(&[0, 0, 3], 0).unwrap();
        assert!(is_nonempty(&small).unwrap());
    }

    proptest! {
        #[test]
        fn any_valid_header_round_trips(
            pool in any::<[u8; 16]>(),
            count in 1u32..=u32::MAX,
            index_frac in 0.0f64..1.0,
            sector in prop::sample::select(vec![512u32, 4096]),
            cap in prop::option::of(8192u64..=u64::MAX),
        ) {
            let index = ((count as f64) * index_frac) as u32 % count;
            let h = DeviceHeader { pool_id: PoolId(pool), device_index: index, device_count: count, sector_size: sector, capacity: cap };
            let b = h.encode();
            prop_assert_eq!(b.len() as u64, HEADER_RESERVED);
            prop_assert_eq!(DeviceHeader::decode("d", &b).unwrap(), h);
        }

        #[test]
        fn random_garbage_never_panics_and_is_refused(b in prop::collection::vec(any::<u8>(), 0..5000)) {
            prop_assert!(DeviceHeader::decode("d", &b).is_err());
        }
    }
}
