//! Inode flags (`lsattr`, `chattr`): the `c` (FS_COMPR_FL) and `m` (FS_NOCOMP_FL) flags
//! mapped onto the `compression` property, as btrfs maps them.
//!
//! The kernel hands FS_IOC_GETFLAGS/SETFLAGS of regular files and directories to a FUSE
//! filesystem as FUSE_IOCTL (fs/fuse/ioctl.c `fuse_fileattr_get`/`_set`, Linux ≥ 5.13): it
//! opens the inode (FUSE_OPEN/OPENDIR), sends the ioctl with a 4-byte flags word, and
//! releases it. Before a SETFLAGS the VFS reads the old attributes with FS_IOC_FSGETXATTR
//! (`vfs_fileattr_set`), so that one is answered too (no xflags: none of them apply).
//!
//! Mapping:
//! * GETFLAGS: `c` when the inode has its own `compression` naming a codec, `m` when its own
//!   `compression` is `none`; nothing else is ever set.
//! * SETFLAGS acts on *changes* against what GETFLAGS reports now: `+c` sets `compression` to
//!   the mount's spec (or `zstd:3` when the mount compresses nothing), `+m` sets it to
//!   `none`, removing `c` or `m` drops the local value (the inode inherits again). A flags
//!   word equal to the current one changes nothing: chattr writes back every flag it read,
//!   so `chattr +i` on a file whose `compression` is `zstd:9` sends `c` again, and treating
//!   that as "+c" would replace `zstd:9` by the default (a bug btrfs had).
//! * `c` and `m` together are EINVAL; any other flag is EOPNOTSUPP (as btrfs answers flags
//!   it does not know); only the owner or CAP_FOWNER may set flags (the kernel checks too).
use crate::error::{FsError, Result};
use crate::props::{Prop, Source, Value};
use crate::rules::creds::{Cap, Creds};
use crate::{rules::perm, Fs};
use squeezefs_codec::{Algorithm, Codec, Spec};
use squeezefs_pipeline::Ino;

pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
pub const FS_COMPR_FL: u32 = 0x0000_0004;
pub const FS_NOCOMP_FL: u32 = 0x0000_0400;
/// `struct fsxattr`: xflags, extsize, nextents, projid, cowextsize (u32 each), 8 pad bytes.
const FSXATTR_LEN: usize = 28;

/// The spec `chattr +c` sets when the mount compresses nothing (btrfs falls back to zlib;
/// zstd:3 is squeezefs's usual choice).
const PLUS_C_DEFAULT: Spec = Spec::Fixed(Codec { alg: Algorithm::Zstd, level: 3 });

/// A reply of exactly `size` bytes (the kernel sizes the reply buffer from the ioctl number).
fn sized(mut v: Vec<u8>, size: u32) -> Vec<u8> {
    v.resize(size as usize, 0);
    v
}

/// The flags word of an ioctl's input (native byte order, as the kernel copies it).
fn flags_in(input: &[u8]) -> Result<u32> {
    let b: [u8; 4] = input.get(..4).and_then(|b| b.try_into().ok()).ok_or(FsError::Invalid("flags word missing"))?;
    Ok(u32::from_ne_bytes(b))
}

impl Fs {
    /// An ioctl the kernel passed on for `ino` (FUSE_IOCTL); returns the reply data
    /// (`out_size` bytes). Other commands are ENOTTY.
    pub fn ioctl(&self, c: &Creds, ino: Ino, cmd: u32, input: &[u8], out_size: u32) -> Result<Vec<u8>> {
        match cmd {
            FS_IOC_GETFLAGS => Ok(sized(self.get_flags(ino)?.to_ne_bytes().to_vec(), out_size)),
            FS_IOC_SETFLAGS => self.set_flags(c, ino, flags_in(input)?).map(|()| Vec::new()),
            FS_IOC_FSGETXATTR => {
                self.stat(ino)?;
                Ok(sized(vec![0; FSXATTR_LEN], out_size))
            }
            FS_IOC_FSSETXATTR => {
                self.stat(ino)?;
                // accepted only when it asks for nothing: no xflags, extent sizes or project
                if input.len() < 20 || input[..20].iter().any(|&b| b != 0) {
                    return Err(FsError::NotSupported("extended inode flags, extent sizes and project ids"));
                }
                Ok(Vec::new())
            }
            _ => Err(FsError::NoTty),
        }
    }

    /// The `c`/`m` flags of `ino` (module comment).
    pub fn get_flags(&self, ino: Ino) -> Result<u32> {
        self.stat(ino)?;
        Ok(match self.effective(ino)?.get(Prop::Compression) {
            (Value::Spec(Spec::Off), Source::Local) => FS_NOCOMP_FL,
            (_, Source::Local) => FS_COMPR_FL,
            _ => 0,
        })
    }

    /// FS_IOC_SETFLAGS (module comment).
    pub fn set_flags(&self, c: &Creds, ino: Ino, flags: u32) -> Result<()> {
        let a = self.stat(ino)?;
        if !perm::is_owner(&a, c) && !c.capable(Cap::Fowner) {
            return Err(FsError::Perm);
        }
        if flags & !(FS_COMPR_FL | FS_NOCOMP_FL) != 0 {
            return Err(FsError::NotSupported("inode flags other than c (compress) and m (no compression)"));
        }
        if flags & FS_COMPR_FL != 0 && flags & FS_NOCOMP_FL != 0 {
            return Err(FsError::Invalid("the c and m flags together"));
        }
        let old = self.get_flags(ino)?;
        if flags == old {
            return Ok(());
        }
        let value = if flags & FS_COMPR_FL != 0 {
            let spec = self.compression().map(|m| m.spec).filter(|s| *s != Spec::Off).unwrap_or(PLUS_C_DEFAULT);
            Some(Value::Spec(spec))
        } else if flags & FS_NOCOMP_FL != 0 {
            Some(Value::Spec(Spec::Off))
        } else {
            None
        };
        self.set_property(None, ino, Prop::Compression, value, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ioctl numbers are the kernel's _IOR/_IOW encodings (asm-generic/ioctl.h): direction
    /// in bits 30–31 (2 read, 1 write), size in 16–29, type in 8–15, number in 0–7.
    #[test]
    fn ioctl_numbers_match_the_kernel_encoding() {
        let ioc = |dir: u32, ty: u8, nr: u32, size: u32| (dir << 30) | (size << 16) | ((ty as u32) << 8) | nr;
        let long = std::mem::size_of::<libc::c_long>() as u32;
        assert_eq!(FS_IOC_GETFLAGS, ioc(2, b'f', 1, long));
        assert_eq!(FS_IOC_SETFLAGS, ioc(1, b'f', 2, long));
        assert_eq!(FS_IOC_FSGETXATTR, ioc(2, b'X', 31, FSXATTR_LEN as u32));
        assert_eq!(FS_IOC_FSSETXATTR, ioc(1, b'X', 32, FSXATTR_LEN as u32));
        // include/uapi/linux/fs.h: FS_COMPR_FL 0x00000004, FS_NOCOMP_FL 0x00000400
        assert_eq!((FS_COMPR_FL, FS_NOCOMP_FL), (1 << 2, 1 << 10));
    }
}
