//! Typed errors of the fs core. Every variant maps to exactly one errno (`FsError::errno`),
//! chosen to match what ext4 returns for the same situation.
use squeezefs_pipeline::EngineError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("file name longer than 255 bytes")]
    NameTooLong,
    #[error("too many levels of symbolic links")]
    Loop,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("read-only file system")]
    ReadOnly,
    #[error("no space left on device")]
    NoSpace,
    #[error("no such extended attribute")]
    NoXattr,
    #[error("result does not fit the caller's buffer")]
    Range,
    #[error("extended attribute value larger than 64 KiB")]
    TooBig,
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("bad file handle")]
    BadHandle,
    #[error("no data or hole past this offset")]
    NoSuchOffset,
    #[error("file too large")]
    FileTooBig,
    #[error("too many links")]
    TooManyLinks,
    #[error("no such device")]
    NoDevice,
    #[error("device or resource busy")]
    Busy,
    #[error("{0}")]
    Property(#[from] crate::props::PropError),
    /// A regular file's `recordsize` cannot change while it holds data.
    #[error(
        "the file holds data ({size} bytes in records of {recordsize} bytes): a file's record size is fixed \
         once it has data; set recordsize on the directory before creating files there, or copy the file \
         into a directory with the record size wanted"
    )]
    RecordsizeFixed { size: u64, recordsize: u64 },
    #[error("inappropriate ioctl for device")]
    NoTty,
    #[error("checksum mismatch: inode {ino} at offset {offset}")]
    Corrupt { ino: squeezefs_pipeline::Ino, offset: u64 },
    #[error("engine: {0}")]
    Engine(EngineError),
}

impl From<EngineError> for FsError {
    fn from(e: EngineError) -> FsError {
        match e {
            EngineError::NoInode(_) | EngineError::NoEntry => FsError::NotFound,
            EngineError::Exists => FsError::Exists,
            EngineError::NoSpace | EngineError::NoMetaSpace { .. } => FsError::NoSpace,
            EngineError::ReadOnly => FsError::ReadOnly,
            EngineError::Checksum { ino, offset } => FsError::Corrupt { ino, offset },
            EngineError::Invalid(squeezefs_pipeline::InvalidArg::RecordSizeOfFileWithData {
                size, recordsize, ..
            }) => FsError::RecordsizeFixed { size, recordsize },
            EngineError::Invalid(squeezefs_pipeline::InvalidArg::OverlappingCopy { .. }) => {
                FsError::Invalid("copy_file_range: overlapping ranges of one file")
            }
            other => FsError::Engine(other),
        }
    }
}

impl FsError {
    /// The errno reported to the kernel (positive).
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::Access => libc::EACCES,
            FsError::Perm => libc::EPERM,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Loop => libc::ELOOP,
            FsError::Invalid(_) | FsError::Property(_) | FsError::RecordsizeFixed { .. } => libc::EINVAL,
            FsError::NoTty => libc::ENOTTY,
            FsError::ReadOnly => libc::EROFS,
            FsError::NoSpace => libc::ENOSPC,
            FsError::NoXattr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::TooBig => libc::E2BIG,
            FsError::NotSupported(_) => libc::EOPNOTSUPP,
            FsError::BadHandle => libc::EBADF,
            FsError::NoSuchOffset => libc::ENXIO,
            FsError::FileTooBig => libc::EFBIG,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::NoDevice => libc::ENODEV,
            FsError::Busy => libc::EBUSY,
            FsError::Corrupt { .. } | FsError::Engine(_) => libc::EIO,
        }
    }
}

pub type Result<T> = std::result::Result<T, FsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_posix_errnos() {
        assert_eq!(FsError::from(EngineError::NoEntry).errno(), libc::ENOENT);
        assert_eq!(FsError::from(EngineError::Exists).errno(), libc::EEXIST);
        assert_eq!(FsError::from(EngineError::NoSpace).errno(), libc::ENOSPC);
        let meta_full = EngineError::NoMetaSpace { dir: "/pool".into(), reserve: 1 << 20 };
        assert_eq!(FsError::from(meta_full).errno(), libc::ENOSPC);
        assert_eq!(FsError::from(EngineError::ReadOnly).errno(), libc::EROFS);
        assert_eq!(FsError::from(EngineError::Checksum { ino: 5, offset: 0 }).errno(), libc::EIO);
        assert_eq!(FsError::from(EngineError::Aborted).errno(), libc::EIO);
    }
}
