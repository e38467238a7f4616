//! An in-process mirror of an SQLite file's vectors, kept in step by the file's change log
//! (the twin's `memlane/_pure/sqlite_mirror.py`).
//!
//! Reading every blob of `memory_vectors` for each search costs a pass over the file (83 ms
//! here at 100,000 vectors of 256 dimensions); a mirror holds one (file, model, dimensions)'s
//! vectors contiguously with each entry's namespace, importance and expiry, so a search is
//! one pass over memory.
//!
//! Invariants:
//! * The mirror equals what `MIRROR_LOAD` reads at the change-log position `gen` it was
//!   brought to. Triggers append an entry's `seq` to `memory_vector_changes` whenever its
//!   vector is written or dropped, or its namespace, importance or expiry change while it has
//!   one, inside the writing transaction, whichever process or implementation writes; so
//!   re-reading the rows logged after `gen` brings the mirror to the file's state. The caller
//!   does it inside the search's read transaction: mirror, search and the rows fetched next
//!   all see one snapshot.
//! * The log is pruned from its old end. A mirror whose position fell out of it, or lies past
//!   its end (another snapshot, or a file restored from a copy), is rebuilt from the table.
//! * Besides its floats, each row keeps an int8 copy (`codes`, scaled by `scales`) and an
//!   upper bound of the copy's error (`errors`, the Euclidean norm of floats minus decoded
//!   codes). A search first scores the int8 copies, a quarter of the memory to read and
//!   integer products; a row's exact score lies within a bound of its int8 score (see
//!   `crate::vectors::Quantized::bound`), so only rows whose upper bound reaches the `limit`-th best lower
//!   bound can be among the best, and only those are scored exactly, in f32, as the scan
//!   scores them. Results are therefore exactly the scan's.
//! * A large mirror's int8 pass is split over the cores (`prescan`; the caller has
//!   released the GIL): each part keeps its own floor, each part's floor is a floor for every
//!   row, and the survivors are rescored in row order, so the answer is the one-thread pass's.
//! * A mirror belongs to one connection, named by the random id the connection keeps in its
//!   temporary schema (`MIRROR_ID`): a connection reads one file for its whole life, so a file
//!   made again at the same path, or another in-memory database, never meets an old mirror.
//!   The process keeps the few used last.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::vectors::{dot, scan_parts, Candidate, Quantized, Top};

mod prescan;

use prescan::Prescan;

/// How many mirrors the process keeps (the twin's `KEPT_MIRRORS`).
pub const KEPT_MIRRORS: usize = 4;

/// (connection id, model, dims).
type Key = (String, String, usize);

/// Most recently used last.
static MIRRORS: Mutex<Vec<(Key, Arc<Mutex<Mirror>>)>> = Mutex::new(Vec::new());

/// The mirror of `model`'s `dims`-dimensional vectors for the connection named `connection`,
/// made empty if the process has none.
pub fn mirror_for(connection: &str, model: &str, dims: usize) -> Arc<Mutex<Mirror>> {
    let key = (connection.to_owned(), model.to_owned(), dims);
    // A panic elsewhere cannot leave the list half-changed: every change is one push or remove.
    let mut mirrors = MIRRORS.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = match mirrors.iter().position(|(k, _)| *k == key) {
        Some(at) => mirrors.remove(at),
        None => (key, Arc::new(Mutex::new(Mirror::new(dims)))),
    };
    let mirror = Arc::clone(&entry.1);
    mirrors.push(entry);
    if mirrors.len() > KEPT_MIRRORS {
        mirrors.remove(0);
    }
    mirror
}

/// A vector's row as the file holds it: seq, float32 little-endian bytes (`None`: no vector
/// of this mirror's model and dims), namespace, importance, expiry.
pub type FileRow = (i64, Option<Vec<u8>>, Option<String>, f64, Option<f64>);

#[derive(Debug, Clone, Copy)]
struct Filters {
    seq: i64,
    namespace: u32,
    importance: f64,
    expires_at: Option<f64>,
}

/// One (file, model, dimensions)'s vectors and their rows' filters; see the module.
#[derive(Debug)]
pub struct Mirror {
    dims: usize,
    /// The change-log position the contents match; `None` until loaded.
    pub gen: Option<i64>,
    data: Vec<f32>,
    codes: Vec<i8>,
    scales: Vec<f64>,
    /// Per row: (error bound, norm) of its int8 copy.
    errors: Vec<(f64, f64)>,
    rows: Vec<Filters>,
    slots: HashMap<i64, usize>,
    namespaces: HashMap<String, u32>,
}

impl Mirror {
    fn new(dims: usize) -> Self {
        Self {
            dims,
            gen: None,
            data: Vec::new(),
            codes: Vec::new(),
            scales: Vec::new(),
            errors: Vec::new(),
            rows: Vec::new(),
            slots: HashMap::new(),
            namespaces: HashMap::new(),
        }
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Replaces the contents with `rows`; now at `gen`.
    pub fn load(&mut self, rows: impl IntoIterator<Item = FileRow>, gen: i64) {
        self.data.clear();
        self.codes.clear();
        self.scales.clear();
        self.errors.clear();
        self.rows.clear();
        self.slots.clear();
        self.apply(rows, gen);
    }

    /// Brings each changed seq to its row, dropping it where the row has no vector of this
    /// mirror's length; now at `gen`.
    pub fn apply(&mut self, rows: impl IntoIterator<Item = FileRow>, gen: i64) {
        for (seq, blob, namespace, importance, expires_at) in rows {
            let at = self.slots.get(&seq).copied();
            match (blob, namespace) {
                (Some(blob), Some(namespace)) if blob.len() == 4 * self.dims => {
                    let next = u32::try_from(self.namespaces.len()).unwrap_or(u32::MAX);
                    let filters = Filters {
                        seq,
                        namespace: *self.namespaces.entry(namespace).or_insert(next),
                        importance,
                        expires_at,
                    };
                    let at = at.unwrap_or_else(|| {
                        self.rows.push(filters);
                        self.data.resize(self.data.len() + self.dims, 0.0);
                        self.codes.resize(self.codes.len() + self.dims, 0);
                        self.scales.push(1.0);
                        self.errors.push((0.0, 0.0));
                        self.slots.insert(seq, self.rows.len() - 1);
                        self.rows.len() - 1
                    });
                    self.rows[at] = filters;
                    let floats = &mut self.data[at * self.dims..(at + 1) * self.dims];
                    for (f, bytes) in floats.iter_mut().zip(blob.chunks_exact(4)) {
                        *f = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                    }
                    let copy = Quantized::new(floats);
                    self.codes[at * self.dims..(at + 1) * self.dims].copy_from_slice(&copy.codes);
                    self.scales[at] = copy.scale;
                    self.errors[at] = (copy.error, copy.norm);
                }
                _ => {
                    if let Some(at) = at {
                        self.remove(at);
                    }
                }
            }
        }
        self.gen = Some(gen);
    }

    /// Removes row `at`, moving the last row into its place.
    fn remove(&mut self, at: usize) {
        let last = self.rows.len() - 1;
        let dims = self.dims;
        if at != last {
            self.data
                .copy_within(last * dims..(last + 1) * dims, at * dims);
            self.codes
                .copy_within(last * dims..(last + 1) * dims, at * dims);
            self.slots.insert(self.rows[last].seq, at);
        }
        self.slots.remove(&self.rows[at].seq);
        self.rows.swap_remove(at);
        self.scales.swap_remove(at);
        self.errors.swap_remove(at);
        self.data.truncate(last * dims);
        self.codes.truncate(last * dims);
    }

    /// (seq, dot product with `query`) of the rows of `namespaces` unexpired at `now` with
    /// `importance >= min_importance`: best first, then importance, then the oldest (lowest
    /// seq); at most `limit`.
    pub fn search(
        &self,
        namespaces: &[String],
        query: &[f32],
        limit: usize,
        min_importance: f64,
        now: f64,
    ) -> Vec<(i64, f64)> {
        self.search_in_parts(
            namespaces,
            query,
            limit,
            min_importance,
            now,
            scan_parts(self.rows.len(), self.dims),
        )
    }

    /// `search` with its int8 pass split over `parts` threads (1: on the caller's).
    fn search_in_parts(
        &self,
        namespaces: &[String],
        query: &[f32],
        limit: usize,
        min_importance: f64,
        now: f64,
        parts: usize,
    ) -> Vec<(i64, f64)> {
        let wanted: Vec<u32> = namespaces
            .iter()
            .filter_map(|n| self.namespaces.get(n).copied())
            .collect();
        if wanted.is_empty() || query.len() != self.dims || limit == 0 {
            return Vec::new();
        }
        let dims = self.dims;
        let q = Quantized::new(query);
        let wide: Vec<i16> = q.codes.iter().map(|&c| i16::from(c)).collect();
        let prescan = Prescan {
            mirror: self,
            wanted: &wanted,
            wide: &wide,
            query_norm: Quantized::padded_norm(query),
            query: &q,
            limit,
            min_importance,
            now,
        };
        let (maybe, floor) = prescan.run_in_parts(parts);
        // Rows are offered in row order whatever the split, and `Top` orders them totally
        // (score, importance, seq): the answer does not depend on `parts`.
        let mut top = Top::new(limit);
        for (at, upper) in maybe {
            if upper < floor {
                continue;
            }
            let row = &self.rows[at];
            top.offer(Candidate {
                score: f64::from(dot(&self.data[at * dims..(at + 1) * dims], query)),
                importance: row.importance,
                // AUTOINCREMENT rowids are positive: the cast keeps their order.
                seq: row.seq as u64,
                row: at,
            });
        }
        top.into_best_first()
            .into_iter()
            .map(|best| (self.rows[best.row].seq, best.score))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn row(seq: i64, values: &[f32], namespace: &str, importance: f64) -> FileRow {
        (
            seq,
            Some(blob(values)),
            Some(namespace.to_owned()),
            importance,
            None,
        )
    }

    #[test]
    fn changes_replace_drop_and_move_rows() {
        let mut mirror = Mirror::new(2);
        mirror.load(
            vec![
                row(1, &[1.0, 0.0], "a", 0.5),
                row(2, &[0.0, 1.0], "a", 0.5),
                row(3, &[0.6, 0.8], "b", 0.5),
            ],
            3,
        );
        let a = ["a".to_owned()];
        assert_eq!(mirror.search(&a, &[1.0, 0.0], 10, 0.0, 0.0)[0].0, 1);
        // seq 1 dropped (its last row moves into the hole), seq 2 rescored, seq 3 moved to "a".
        mirror.apply(
            vec![
                (1, None, None, 0.0, None),
                row(2, &[0.8, 0.6], "a", 0.5),
                row(3, &[0.6, 0.8], "a", 0.9),
            ],
            6,
        );
        assert_eq!(mirror.len(), 2);
        assert_eq!(mirror.gen, Some(6));
        let found = mirror.search(&a, &[1.0, 0.0], 10, 0.0, 0.0);
        assert_eq!(found.iter().map(|h| h.0).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(mirror.search(&a, &[1.0, 0.0], 10, 0.7, 0.0).len(), 1);
    }

    #[test]
    fn expiry_ties_and_foreign_lengths() {
        let mut mirror = Mirror::new(2);
        mirror.load(
            vec![
                (
                    5,
                    Some(blob(&[1.0, 0.0])),
                    Some("a".to_owned()),
                    0.5,
                    Some(10.0),
                ),
                row(4, &[1.0, 0.0], "a", 0.5),
                row(3, &[1.0, 0.0], "a", 0.7),
                (2, Some(blob(&[1.0])), Some("a".to_owned()), 0.9, None),
            ],
            1,
        );
        let a = ["a".to_owned()];
        let seqs = |now| {
            mirror
                .search(&a, &[1.0, 0.0], 10, 0.0, now)
                .iter()
                .map(|h| h.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(seqs(9.0), vec![3, 4, 5]);
        assert_eq!(seqs(10.0), vec![3, 4]);
    }

    #[test]
    fn the_process_keeps_the_mirrors_used_last() {
        let first = mirror_for("kept-test-0", "m", 2);
        for i in 1..=KEPT_MIRRORS {
            mirror_for(&format!("kept-test-{i}"), "m", 2);
        }
        // Evicted: the process no longer holds it (other tests only push more mirrors).
        assert_eq!(Arc::strong_count(&first), 1);
    }

    /// A splitmix64 stream: the test needs varied vectors, not statistical quality.
    struct Stream(u64);

    impl Stream {
        fn next(&mut self) -> f32 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            #[allow(clippy::cast_precision_loss)] // a fraction in [-1, 1) is all we need
            let unit = (z >> 11) as f32 / (1u64 << 52) as f32 - 1.0;
            unit
        }

        fn vector(&mut self, dims: usize) -> Vec<f32> {
            let v: Vec<f32> = (0..dims).map(|_| self.next()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter().map(|x| x / norm).collect()
        }
    }

    #[test]
    fn the_int8_pass_keeps_exactly_the_scans_answer_on_any_number_of_threads() {
        for (round, dims) in [(1u64, 256usize), (2, 7), (3, 64), (4, 1)] {
            let mut stream = Stream(round);
            // Clustered rows (small perturbations of a few centres), exact duplicates for
            // ties, and rows in another namespace, expired or unimportant.
            let centres: Vec<Vec<f32>> = (0..3).map(|_| stream.vector(dims)).collect();
            let mut rows = Vec::new();
            let mut kept: Vec<(i64, Vec<f32>, f64)> = Vec::new();
            for seq in 1..=600i64 {
                let base = &centres[usize::try_from(seq).unwrap() % 3];
                let noise = stream.vector(dims);
                let v: Vec<f32> = if seq % 7 == 0 {
                    base.clone()
                } else {
                    base.iter().zip(&noise).map(|(b, n)| b + 0.05 * n).collect()
                };
                let namespace = if seq % 11 == 0 { "b" } else { "a" };
                let importance = f64::from(u8::try_from(seq % 4).unwrap()) / 4.0;
                let expires = (seq % 13 == 0).then_some(5.0);
                rows.push((
                    seq,
                    Some(blob(&v)),
                    Some(namespace.to_owned()),
                    importance,
                    expires,
                ));
                if namespace == "a" && importance >= 0.25 && expires.is_none() {
                    kept.push((seq, v, importance));
                }
            }
            let mut mirror = Mirror::new(dims);
            mirror.load(rows, 1);
            let a = ["a".to_owned()];
            for limit in [1usize, 3, 10, 50] {
                for _ in 0..20 {
                    let query = if stream.next() > 0.5 {
                        centres[0].clone()
                    } else {
                        stream.vector(dims)
                    };
                    let mut top = Top::new(limit);
                    for (at, (seq, v, importance)) in kept.iter().enumerate() {
                        top.offer(Candidate {
                            score: f64::from(dot(v, &query)),
                            importance: *importance,
                            seq: u64::try_from(*seq).unwrap(),
                            row: at,
                        });
                    }
                    let expected: Vec<(i64, f64)> = top
                        .into_best_first()
                        .into_iter()
                        .map(|c| (kept[c.row].0, c.score))
                        .collect();
                    assert_eq!(mirror.search(&a, &query, limit, 0.25, 10.0), expected);
                    // Split over threads (more parts than cores too): the same answer.
                    for parts in [2usize, 3, 7, 250] {
                        let split = mirror.search_in_parts(&a, &query, limit, 0.25, 10.0, parts);
                        assert_eq!(split, expected, "{parts} parts");
                    }
                }
            }
        }
    }
}
