//! `LoopDevice`: a real block device for tests — a loop device attached to a backing file
//! with `losetup`, detached when dropped — so the block-device paths (direct writes in whole
//! logical blocks) run against the kernel, not a model of it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device over a file; detached on drop.
#[derive(Debug)]
pub struct LoopDevice {
    path: PathBuf,
}

impl LoopDevice {
    /// Attach `backing` with logical blocks of `block` bytes. `Err` names why not (no
    /// `losetup`, not root, no loop driver in a container): callers skip with it.
    pub fn attach(backing: &Path, block: u64) -> Result<LoopDevice, String> {
        let out = Command::new("losetup")
            .args(["-f", "--show", "-b", &block.to_string()])
            .arg(backing)
            .output()
            .map_err(|e| format!("no losetup ({e})"))?;
        if !out.status.success() {
            return Err(format!("losetup refused ({})", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Ok(LoopDevice { path })
    }

    /// The device node, e.g. `/dev/loop3`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}
