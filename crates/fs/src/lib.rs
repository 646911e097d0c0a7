//! POSIX semantics over the engine, returning typed errors; tested without mounting.
