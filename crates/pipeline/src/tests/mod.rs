//! Tests of the engine as a whole that need crate-private hooks: panics injected at each
//! engine boundary (fault.rs). Test-only; imports lib.rs and nothing imports it.

mod fault;
