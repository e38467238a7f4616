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
//! * Mirrors are shared by the process's connections to one file, keyed by its path and the
//!   random epoch the schema wrote into it (a file recreated at the same path, or an
//!   in-memory database, has its own); the process keeps the few used last.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::vectors::{dot, Candidate, Top};

/// How many mirrors the process keeps (the twin's `KEPT_MIRRORS`).
pub const KEPT_MIRRORS: usize = 4;

/// (path, epoch, model, dims).
type Key = (String, String, String, usize);

/// Most recently used last.
static MIRRORS: Mutex<Vec<(Key, Arc<Mutex<Mirror>>)>> = Mutex::new(Vec::new());

/// The process's mirror of `model`'s `dims`-dimensional vectors in the file at `path` with
/// `epoch`, made empty if the process has none.
pub fn mirror_for(path: &str, epoch: &str, model: &str, dims: usize) -> Arc<Mutex<Mirror>> {
    let key = (path.to_owned(), epoch.to_owned(), model.to_owned(), dims);
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
                        self.slots.insert(seq, self.rows.len() - 1);
                        self.rows.len() - 1
                    });
                    self.rows[at] = filters;
                    let floats = &mut self.data[at * self.dims..(at + 1) * self.dims];
                    for (f, bytes) in floats.iter_mut().zip(blob.chunks_exact(4)) {
                        *f = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                    }
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
            self.slots.insert(self.rows[last].seq, at);
        }
        self.slots.remove(&self.rows[at].seq);
        self.rows.swap_remove(at);
        self.data.truncate(last * dims);
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
        let wanted: Vec<u32> = namespaces
            .iter()
            .filter_map(|n| self.namespaces.get(n).copied())
            .collect();
        if wanted.is_empty() || query.len() != self.dims {
            return Vec::new();
        }
        let mut top = Top::new(limit);
        for (at, (row, floats)) in self
            .rows
            .iter()
            .zip(self.data.chunks_exact(self.dims))
            .enumerate()
        {
            if row.importance < min_importance
                || row.expires_at.is_some_and(|e| e <= now)
                || !wanted.contains(&row.namespace)
            {
                continue;
            }
            top.offer(Candidate {
                score: f64::from(dot(floats, query)),
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
        let first = mirror_for("kept-test", "e0", "m", 2);
        for i in 1..=KEPT_MIRRORS {
            mirror_for("kept-test", &format!("e{i}"), "m", 2);
        }
        // Evicted: the process no longer holds it (other tests only push more mirrors).
        assert_eq!(Arc::strong_count(&first), 1);
    }
}
