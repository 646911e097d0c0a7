//! Thin fuser adapter over squeezefs-fs: calls into the core and maps errors to errno.
