//! Measured inputs of the controllers, as pure accumulators the pipeline feeds: the device
//! and level meters (meters.rs), the CPU squeezefs gets and spends outside the codec
//! (cpu.rs), and the moving averages both use (ewma.rs).
//!
//! Imports only device_choice.rs; auto/ and qos/ read what it measures.

pub mod cpu;
pub mod ewma;
pub(crate) mod meters;
