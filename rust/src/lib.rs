//! memlane's Rust core: exact token counting, the conversation budget ledger, the embedded
//! memory stores and their exact vector index, and a turn's JSON text. Plain Rust modules; the PyO3 glue lives only
//! in `py/` (behind the `python` feature) so `cargo test` runs without an interpreter.

mod batch;
pub mod budget;
pub mod json_text;
pub mod store;
pub mod tokens;
pub mod vectors;

#[cfg(feature = "python")]
mod py;

/// The crate version, exported to Python so the package and the extension never disagree.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
