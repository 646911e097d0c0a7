//! Errors of the metadata layer.

/// What can go wrong decoding or storing metadata.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    /// The embedded store (redb) failed.
    #[error("metadata store: {0}")]
    Store(#[from] redb::Error),
    /// A stored value does not decode: names the record kind and what is wrong.
    #[error("corrupt {what} record: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// A record was written by a newer format version than this build understands.
    #[error("{what} record has version {found}; this build reads versions up to {supported}")]
    Version { what: &'static str, found: u8, supported: u8 },
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for MetaError {
            fn from(e: $t) -> Self {
                MetaError::Store(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);
