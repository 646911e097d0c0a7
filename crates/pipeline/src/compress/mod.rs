//! How one record is compressed and at which level: the codecs and the queue of
//! compression attempts waiting for a worker (queue.rs), the compression policy and the
//! compression of one record (policy.rs), the per-record level decision fed back by what
//! compression gave (levels.rs), the QoS trees' state it paces (qos.rs) and the recycled
//! buffers compressed records live in (outbuf.rs).
//!
//! Layer 1: imports only base/. Called by the open txg (txg/), the write stages (write/),
//! the sync stages (sync/), rewrite/ and the engine state (engine/).

pub(crate) mod levels;
pub(crate) mod outbuf;
pub(crate) mod policy;
pub(crate) mod qos;
pub(crate) mod queue;
