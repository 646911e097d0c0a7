//! Devices and their space: the free-range allocator per device (alloc.rs), the pool's
//! devices with their two space images and the placement decisions made over them
//! (placement.rs), and the per-device write queues with their writer threads (devq.rs).
//!
//! Layer 2: imports base/, compress/ (the buffers a queued write holds) and store/ (the
//! metadata reserve counts against the host filesystem's free space). Early placement
//! (txg/), the sync stages and the commit take and free space here.

pub(crate) mod alloc;
pub(crate) mod devq;
pub(crate) mod placement;
