//! The byte-level pieces of the sealed metadata store's body (seal.rs), shared by the generic
//! table dumps and the column codings of seal_dirents.rs and seal_extents.rs: LEB128
//! varints, zigzag-mapped differences, a bounds-checked cursor, and the error every part of
//! sealing and unsealing returns.

/// What goes wrong sealing or reading a sealed store. The caller names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    #[error("not a sealed metadata store (magic {found:02x?}, expected \"SQZFSEAL\")")]
    BadMagic { found: [u8; 8] },
    #[error("truncated: {have} bytes, the {part} needs {need}")]
    Truncated { part: &'static str, need: u64, have: u64 },
    #[error("{extra} bytes after the end of the sealed store")]
    TrailingBytes { extra: u64 },
    #[error("format version {found}; this build reads version {supported}")]
    Version { found: u16, supported: u16 },
    #[error("unknown flags {flags:#06x}; this build knows none")]
    UnknownFlags { flags: u16 },
    #[error("checksum of the {part} does not match (stored {stored:#018x}, computed {computed:#018x})")]
    Checksum { part: &'static str, stored: u64, computed: u64 },
    #[error("the compressed body does not decompress: {0}")]
    Decompress(#[source] std::io::Error),
    #[error("compressing the body: {0}")]
    Compress(#[source] std::io::Error),
    #[error("corrupt body: {0}")]
    Corrupt(String),
    #[error("table {name:?} is not one this build knows; it cannot be sealed or unsealed")]
    UnknownTable { name: String },
    #[error("the store holds multimap tables, which this build does not seal")]
    MultimapTable,
    #[error("metadata store: {0}")]
    Store(#[from] redb::Error),
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for SealError {
            fn from(e: $t) -> Self {
                SealError::Store(e.into())
            }
        }
    )*};
}
from_redb!(redb::StorageError, redb::TableError, redb::TransactionError, redb::CommitError);

/// A difference taken modulo 2^64, read as signed, mapped to an unsigned number that is
/// small when the difference is small in either direction.
pub(crate) fn zigzag(v: u64) -> u64 {
    let s = v as i64;
    ((s << 1) ^ (s >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub(crate) fn unzigzag(u: u64) -> u64 {
    (u >> 1) ^ (u & 1).wrapping_neg()
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Rows as a table's plain stream holds them: each a varint length, then its bytes.
#[cfg(test)]
pub(crate) fn length_prefixed(rows: &[Vec<u8>]) -> Vec<u8> {
    let mut s = Vec::new();
    for r in rows {
        put_varint(&mut s, r.len() as u64);
        s.extend_from_slice(r);
    }
    s
}

/// A cursor over a body stream; every read is bounds-checked.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pub(crate) pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    pub(crate) fn corrupt(&self, detail: &str) -> SealError {
        SealError::Corrupt(format!("{} at byte {}: {detail}", self.what, self.pos))
    }

    pub(crate) fn varint(&mut self) -> Result<u64, SealError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or_else(|| self.corrupt("varint runs past the end"))?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(self.corrupt("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.corrupt("varint longer than 10 bytes"))
    }

    pub(crate) fn len(&mut self) -> Result<usize, SealError> {
        let v = self.varint()?;
        usize::try_from(v)
            .ok()
            .filter(|&n| n <= self.buf.len() - self.pos)
            .ok_or_else(|| self.corrupt(&format!("length {v} exceeds the {} bytes left", self.buf.len() - self.pos)))
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], SealError> {
        if n > self.buf.len() - self.pos {
            return Err(self.corrupt(&format!("{n} bytes needed, {} left", self.buf.len() - self.pos)));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn done(&self) -> bool {
        self.pos == self.buf.len()
    }
}
