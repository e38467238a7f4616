//! The embedded memory stores: an in-process table with a key index, and an SQLite file.

pub mod memory;
pub mod sqlite;
