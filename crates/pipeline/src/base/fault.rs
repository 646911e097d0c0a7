//! Panics caught at the engine's thread and job boundaries, and their test-only injection.
//!
//! A panic is a bug: the engine cannot know what the panicking code left half done, so it
//! stops changing the pool (the pool is SUSPENDED, txg/state.rs: later writes, syncs and fsyncs
//! fail; what the last commit made durable stays) and the caller waiting for the work gets
//! an error instead of waiting forever. Where each boundary is:
//!
//! * the txg driver (txg/state.rs `driver`): its waiters and `close` see the suspension;
//! * a compression job (early.rs `Slot::run`): its result never arrives, so the txg that
//!   waits for it fails (sync/stages.rs);
//! * a decode job (read/path.rs): the read that waits for it fails;
//! * a device write (devq.rs): its requests complete with an error, so their txg fails;
//! * a FUSE request (crates/fuse opcore.rs, through [`crate::Engine::suspend`]).
//!
//! Injection: with the `fault-injection` feature (and in this crate's unit tests), a
//! [`Site`] can be armed to panic once, the next time the engine passes it. Without the
//! feature there is no way to arm one and [`Faults::hit`] does nothing.
use std::any::Any;

/// Where a panic can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// in a compression job, before it compresses
    CompressJob,
    /// in a decode job of a read, before it decodes
    DecodeJob,
    /// in a device writer, before it writes a run of records
    DeviceWrite,
    /// in the txg driver, before it syncs a txg
    TxgDriver,
}

impl Site {
    pub const ALL: [Site; 4] = [Site::CompressJob, Site::DecodeJob, Site::DeviceWrite, Site::TxgDriver];
    /// Their names, for messages.
    pub const NAMES: &'static str = "compress, decode, device-write, txg";

    /// The name tests arm it by.
    pub fn name(self) -> &'static str {
        match self {
            Site::CompressJob => "compress",
            Site::DecodeJob => "decode",
            Site::DeviceWrite => "device-write",
            Site::TxgDriver => "txg",
        }
    }

    #[cfg(any(test, feature = "fault-injection"))]
    fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// The armed sites of one engine.
#[derive(Default, Debug)]
pub struct Faults {
    #[cfg(any(test, feature = "fault-injection"))]
    armed: std::sync::atomic::AtomicU32,
}

impl Faults {
    /// Panic here if `site` is armed (once).
    #[inline]
    pub fn hit(&self, site: Site) {
        #[cfg(any(test, feature = "fault-injection"))]
        if self.armed.fetch_and(!site.bit(), std::sync::atomic::Ordering::SeqCst) & site.bit() != 0 {
            panic!("injected panic ({})", site.name());
        }
        #[cfg(not(any(test, feature = "fault-injection")))]
        let _ = site;
    }

    /// Make the next pass through `site` panic.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn arm(&self, site: Site) {
        self.armed.fetch_or(site.bit(), std::sync::atomic::Ordering::SeqCst);
    }
}

/// What a caught panic said (its `&str` or `String` payload).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_site_panics_once_and_only_there() {
        let f = Faults::default();
        f.hit(Site::CompressJob);
        f.arm(Site::DecodeJob);
        f.hit(Site::CompressJob);
        f.hit(Site::TxgDriver);
        let p = std::panic::catch_unwind(|| f.hit(Site::DecodeJob)).unwrap_err();
        assert_eq!(panic_message(&*p), "injected panic (decode)");
        f.hit(Site::DecodeJob);
        assert_eq!(
            Site::ALL.iter().map(|s| s.name()).collect::<Vec<_>>(),
            ["compress", "decode", "device-write", "txg"]
        );
    }
}
