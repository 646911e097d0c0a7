//! Validation of directory entry names and symlink targets (limits of ext4).
use crate::error::{FsError, Result};

pub const NAME_MAX: usize = 255;
/// PATH_MAX including the terminating NUL.
pub const SYMLINK_MAX: usize = 4095;

/// A name that may be created: 1..=255 bytes, no '/' or NUL, not "." or "..".
pub fn check_new(name: &[u8]) -> Result<()> {
    check_lookup(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Exists);
    }
    Ok(())
}

/// A name that may be looked up.
pub fn check_lookup(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() {
        return Err(FsError::NotFound);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Invalid("names cannot contain '/' or NUL"));
    }
    Ok(())
}

pub fn check_symlink_target(target: &[u8]) -> Result<()> {
    if target.is_empty() {
        return Err(FsError::NotFound);
    }
    if target.len() > SYMLINK_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_length_limit_is_255_bytes() {
        assert!(check_new(&[b'a'; 255]).is_ok());
        assert!(matches!(check_new(&[b'a'; 256]), Err(FsError::NameTooLong)));
        assert!(matches!(check_lookup(&[b'a'; 4000]), Err(FsError::NameTooLong)));
    }

    #[test]
    fn dots_and_slashes_are_refused() {
        assert!(matches!(check_new(b"."), Err(FsError::Exists)));
        assert!(matches!(check_new(b".."), Err(FsError::Exists)));
        assert!(matches!(check_new(b"a/b"), Err(FsError::Invalid(_))));
        assert!(matches!(check_new(b""), Err(FsError::NotFound)));
    }

    #[test]
    fn symlink_target_limits() {
        assert!(check_symlink_target(&[b'x'; 4095]).is_ok());
        assert!(matches!(check_symlink_target(&[b'x'; 4096]), Err(FsError::NameTooLong)));
        assert!(matches!(check_symlink_target(b""), Err(FsError::NotFound)));
    }
}
