//! Storage devices: one small trait (read_at, write_at, sync, len), a file/block-device implementation and test doubles.
