//! The embedded memory stores: an in-process table with a key index and its search index,
//! and an SQLite file.

pub mod memory;
pub mod search;
pub mod sqlite;
pub mod sqlite_checkpoint;
pub mod sqlite_vectors;
