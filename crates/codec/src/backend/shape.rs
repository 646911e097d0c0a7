//! The shape a compression context is built for (its largest source and the source length its
//! search is sized for), shared by the backends that size their tables by it and the
//! workspace pool that keys its contexts by it.

/// What a compression context is built for: sources of up to `block` bytes, searched as
/// sources of `search` bytes (`search ≤ block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    pub block: usize,
    pub search: usize,
}

impl Shape {
    /// A context for records of up to `block` bytes.
    pub(crate) fn record(block: usize) -> Shape {
        Shape { block, search: block }
    }
}
