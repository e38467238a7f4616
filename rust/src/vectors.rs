//! Exact nearest-vector search: what `InMemoryStore.vector_search` reads, and the scoring the
//! SQLite table applies to the vectors it keeps.
//!
//! Twin of `VectorIndex` in `memlane/_pure/vector_index.py`, which keeps the same invariants.
//! Policy stays in Python: vectors arrive unit length (so a dot product is the cosine), with
//! their model's name, and already checked (finite, non-empty, of one dimension per call).
//!
//! Invariants, kept by every operation:
//!
//! * An entry has at most one vector: `upsert` of an entry id already held replaces its
//!   vector, whatever its model, dimensions or namespace.
//! * Vectors are grouped by (model, dimensions); each group keeps its rows' floats contiguous
//!   (`data[row * dims..][..dims]`) so a search is one pass over one slice. Rows of another
//!   group are never read, so vectors of another model or dimension are never compared.
//! * `slots` maps each entry id to its (group, row), and each row names its entry id: removal
//!   moves the group's last row into the hole (`swap_remove`) and re-points that row's slot.
//!   A group that empties is kept (its key is a model name, a handful per store).
//! * Sequence numbers only grow. A vector replaced within its namespace keeps its number, so
//!   re-embedding does not change tie order; one that moves namespace, or comes back after
//!   being removed, gets a new one. Results tie-break on it, oldest first.
//! * Namespaces are interned to small numbers, so the per-row namespace test of a search is an
//!   integer comparison, not a string hash; the interning table only grows (namespace names
//!   are few).
//!
//! Scores are computed in f32 over eight independent lanes (what lets the compiler use SIMD
//! registers), then widened: they equal the twin's to float32 rounding, and exactly when the
//! products and sums are representable (the differential tests use such values).
//!
//! Every operation that removes or replaces payloads hands them back, so the caller chooses
//! where they are dropped (the Python glue drops them after releasing its lock).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;

use crate::store::memory::live;

/// The dot product of two slices of equal length, in eight f32 lanes.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut lanes = [0.0f32; 8];
    let mut chunks_a = a.chunks_exact(8);
    let mut chunks_b = b.chunks_exact(8);
    for (ca, cb) in (&mut chunks_a).zip(&mut chunks_b) {
        for i in 0..8 {
            lanes[i] += ca[i] * cb[i];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in chunks_a.remainder().iter().zip(chunks_b.remainder()) {
        tail += x * y;
    }
    // Pairwise, in a fixed order the twin repeats.
    let quads = [
        lanes[0] + lanes[4],
        lanes[1] + lanes[5],
        lanes[2] + lanes[6],
        lanes[3] + lanes[7],
    ];
    (quads[0] + quads[2]) + (quads[1] + quads[3]) + tail
}

/// A hit before its payload is looked up: score, importance, sequence number, row.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    pub score: f64,
    pub importance: f64,
    pub seq: u64,
    pub row: usize,
}

/// Best first: score, then importance, both highest first, then the oldest.
///
/// Neither is NaN (vectors are finite, importances validated), so `partial_cmp` answers;
/// `Equal` for the impossible case keeps the order total through the sequence number.
fn best_first(a: &Candidate, b: &Candidate) -> Ordering {
    b.score
        .partial_cmp(&a.score)
        .unwrap_or(Ordering::Equal)
        .then_with(|| {
            b.importance
                .partial_cmp(&a.importance)
                .unwrap_or(Ordering::Equal)
        })
        .then_with(|| a.seq.cmp(&b.seq))
}

/// The best `limit` candidates seen so far: a heap whose top is the worst one kept, so a
/// candidate that cannot enter (most of them, in a large scan) costs one comparison.
#[derive(Debug)]
pub struct Top {
    limit: usize,
    kept: BinaryHeap<Kept>,
}

#[derive(Debug)]
struct Kept(Candidate);

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        best_first(&self.0, &other.0) == Ordering::Equal
    }
}

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    /// Worse is greater: the heap's top is the worst candidate kept.
    fn cmp(&self, other: &Self) -> Ordering {
        best_first(&self.0, &other.0)
    }
}

impl Top {
    /// Keeps the best `limit`.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            kept: BinaryHeap::with_capacity(limit.min(4096) + 1),
        }
    }

    /// Considers one candidate.
    pub fn offer(&mut self, candidate: Candidate) {
        if self.kept.len() < self.limit {
            self.kept.push(Kept(candidate));
            return;
        }
        let Some(worst) = self.kept.peek() else {
            return; // limit 0 keeps nothing
        };
        // A lower score can never enter: the common case, decided by one comparison.
        if candidate.score < worst.0.score {
            return;
        }
        if best_first(&candidate, &worst.0) == Ordering::Less {
            self.kept.pop();
            self.kept.push(Kept(candidate));
        }
    }

    /// The kept candidates, best first.
    pub fn into_best_first(self) -> Vec<Candidate> {
        self.kept
            .into_sorted_vec()
            .into_iter()
            .map(|k| k.0)
            .collect()
    }
}

#[derive(Debug)]
struct Row<K, T> {
    entry_id: K,
    namespace: u32,
    digest: String,
    importance: f64,
    expires_at: Option<f64>,
    seq: u64,
    payload: T,
}

#[derive(Debug)]
struct Group<K, T> {
    model: String,
    dims: usize,
    data: Vec<f32>,
    rows: Vec<Row<K, T>>,
}

/// What a vector is attached with, besides the floats.
#[derive(Debug)]
pub struct Meta<K, T> {
    pub namespace: K,
    pub digest: String,
    pub importance: f64,
    pub expires_at: Option<f64>,
    pub payload: T,
}

/// Vectors of entries, grouped by (model, dimensions); see the module's invariants.
///
/// `K` is the type of entry ids and namespaces; `T` is the payload a search returns. Maps
/// keyed by what users write keep the std SipHash hasher, so crafted ids cannot degrade them.
#[derive(Debug)]
pub struct VectorIndex<T, K = String> {
    groups: Vec<Group<K, T>>,
    group_ids: HashMap<(String, usize), usize>,
    /// Entry id -> (group, row).
    slots: HashMap<K, (usize, usize)>,
    namespaces: HashMap<K, u32>,
    next_seq: u64,
}

impl<T, K> Default for VectorIndex<T, K> {
    fn default() -> Self {
        Self {
            groups: Vec::new(),
            group_ids: HashMap::new(),
            slots: HashMap::new(),
            namespaces: HashMap::new(),
            next_seq: 0,
        }
    }
}

impl<T, K: Hash + Eq + Clone> VectorIndex<T, K> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries have a vector.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no entry has a vector.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn namespace_id(&mut self, namespace: K) -> u32 {
        let next = self.namespaces.len() as u32;
        *self.namespaces.entry(namespace).or_insert(next)
    }

    fn group_id(&mut self, model: &str, dims: usize) -> usize {
        if let Some(&id) = self.group_ids.get(&(model.to_owned(), dims)) {
            return id;
        }
        let id = self.groups.len();
        self.groups.push(Group {
            model: model.to_owned(),
            dims,
            data: Vec::new(),
            rows: Vec::new(),
        });
        self.group_ids.insert((model.to_owned(), dims), id);
        id
    }

    /// Removes the row at `(group, row)`, moving the group's last row into its place.
    fn take(&mut self, group: usize, row: usize) -> Row<K, T> {
        let g = &mut self.groups[group];
        let dims = g.dims;
        let last = g.rows.len() - 1;
        if row != last {
            g.data
                .copy_within(last * dims..(last + 1) * dims, row * dims);
            let moved = &g.rows[last].entry_id;
            *self.slots.get_mut(moved).expect("every row has a slot") = (group, row);
        }
        g.data.truncate(last * dims);
        let taken = g.rows.swap_remove(row);
        self.slots.remove(&taken.entry_id);
        taken
    }

    /// Attaches `vector` of `model` to `entry_id`, replacing any vector it had; the payload
    /// it displaced.
    pub fn upsert(
        &mut self,
        entry_id: K,
        model: &str,
        vector: &[f32],
        meta: Meta<K, T>,
    ) -> Option<T> {
        let namespace = self.namespace_id(meta.namespace);
        let old = self
            .slots
            .get(&entry_id)
            .copied()
            .map(|(g, r)| self.take(g, r));
        let seq = match &old {
            Some(row) if row.namespace == namespace => row.seq,
            _ => {
                self.next_seq += 1;
                self.next_seq
            }
        };
        let group = self.group_id(model, vector.len());
        let g = &mut self.groups[group];
        g.data.extend_from_slice(vector);
        g.rows.push(Row {
            entry_id: entry_id.clone(),
            namespace,
            digest: meta.digest,
            importance: meta.importance,
            expires_at: meta.expires_at,
            seq,
            payload: meta.payload,
        });
        self.slots.insert(entry_id, (group, g.rows.len() - 1));
        old.map(|row| row.payload)
    }

    /// After the entry was saved again: keeps its vector, with the new importance, expiry and
    /// payload, if it stays in `namespace` with the text of `digest`; else drops it. `Err`
    /// hands `payload` back unused (the entry had no vector); `Ok` hands back what was
    /// displaced and whether the vector was kept.
    pub fn refresh(&mut self, entry_id: &K, meta: Meta<K, T>) -> Result<(T, bool), T> {
        let Some(&(group, row)) = self.slots.get(entry_id) else {
            return Err(meta.payload);
        };
        let same_namespace = self.namespaces.get(&meta.namespace).copied();
        let r = &mut self.groups[group].rows[row];
        if same_namespace == Some(r.namespace) && r.digest == meta.digest {
            r.importance = meta.importance;
            r.expires_at = meta.expires_at;
            return Ok((std::mem::replace(&mut r.payload, meta.payload), true));
        }
        Ok((self.take(group, row).payload, false))
    }

    /// Drops the vector of `entry_id`; its payload, if it had one.
    pub fn remove(&mut self, entry_id: &K) -> Option<T> {
        let (group, row) = self.slots.get(entry_id).copied()?;
        Some(self.take(group, row).payload)
    }

    /// Removes every row `drop` selects; their payloads.
    fn remove_where(&mut self, drop: impl Fn(&Row<K, T>) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        for group in 0..self.groups.len() {
            let mut row = 0;
            while row < self.groups[group].rows.len() {
                if drop(&self.groups[group].rows[row]) {
                    // The last row moved into `row`: look at it next.
                    removed.push(self.take(group, row).payload);
                } else {
                    row += 1;
                }
            }
        }
        removed
    }

    /// Drops the vectors of a namespace's entries; their payloads.
    pub fn clear(&mut self, namespace: &K) -> Vec<T> {
        let Some(&ns) = self.namespaces.get(namespace) else {
            return Vec::new();
        };
        self.remove_where(|r| r.namespace == ns)
    }

    /// Drops the vectors of entries expired at `now`; their payloads.
    pub fn cleanup_expired(&mut self, now: f64) -> Vec<T> {
        self.remove_where(|r| !live(r.expires_at, now))
    }

    /// The model of `entry_id`'s vector, if it has one.
    pub fn model_of(&self, entry_id: &K) -> Option<&str> {
        let &(group, _) = self.slots.get(entry_id)?;
        Some(&self.groups[group].model)
    }

    /// The entries of `namespaces` live at `now` with `importance >= min_importance` and a
    /// vector of `model` with `query.len()` dimensions, by dot product with `query`: best
    /// first (then importance, then the oldest), at most `limit`.
    pub fn search(
        &self,
        namespaces: &[K],
        model: &str,
        query: &[f32],
        limit: usize,
        min_importance: f64,
        now: f64,
    ) -> Vec<(&T, f64)> {
        let Some(&group) = self.group_ids.get(&(model.to_owned(), query.len())) else {
            return Vec::new();
        };
        let wanted: Vec<u32> = namespaces
            .iter()
            .filter_map(|n| self.namespaces.get(n).copied())
            .collect();
        if wanted.is_empty() || query.is_empty() {
            return Vec::new();
        }
        let g = &self.groups[group];
        let mut top = Top::new(limit);
        for (i, (row, floats)) in g.rows.iter().zip(g.data.chunks_exact(g.dims)).enumerate() {
            if row.importance >= min_importance
                && wanted.contains(&row.namespace)
                && live(row.expires_at, now)
            {
                top.offer(Candidate {
                    score: f64::from(dot(floats, query)),
                    importance: row.importance,
                    seq: row.seq,
                    row: i,
                });
            }
        }
        top.into_best_first()
            .into_iter()
            .map(|c| (&g.rows[c.row].payload, c.score))
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values: the scores must be equal to the last bit
mod tests {
    use super::*;

    fn meta(ns: &str, digest: &str, importance: f64, payload: u32) -> Meta<String, u32> {
        Meta {
            namespace: ns.to_owned(),
            digest: digest.to_owned(),
            importance,
            expires_at: None,
            payload,
        }
    }

    fn ids(hits: &[(&u32, f64)]) -> Vec<u32> {
        hits.iter().map(|(p, _)| **p).collect()
    }

    #[test]
    fn dot_matches_a_plain_sum_on_exact_values() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 / 8.0).collect();
        let b: Vec<f32> = (0..19).map(|i| (19 - i) as f32 / 4.0).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot(&a, &b), plain);
    }

    #[test]
    fn models_and_dimensions_are_never_compared() {
        let mut index = VectorIndex::new();
        index.upsert("a".to_owned(), "m1", &[1.0, 0.0], meta("ns", "d", 0.5, 1));
        index.upsert("b".to_owned(), "m2", &[1.0, 0.0], meta("ns", "d", 0.5, 2));
        index.upsert(
            "c".to_owned(),
            "m1",
            &[1.0, 0.0, 0.0],
            meta("ns", "d", 0.5, 3),
        );
        let ns = ["ns".to_owned()];
        assert_eq!(
            ids(&index.search(&ns, "m1", &[1.0, 0.0], 10, 0.0, 0.0)),
            [1]
        );
        assert_eq!(
            ids(&index.search(&ns, "m2", &[1.0, 0.0], 10, 0.0, 0.0)),
            [2]
        );
        assert_eq!(
            ids(&index.search(&ns, "m1", &[0.0, 0.0, 1.0], 10, 0.0, 0.0)),
            [3]
        );
    }

    #[test]
    fn removal_keeps_rows_and_slots_in_step() {
        let mut index = VectorIndex::new();
        for i in 0..5u32 {
            let v = [i as f32, 1.0];
            index.upsert(format!("e{i}"), "m", &v, meta("ns", "d", 0.5, i));
        }
        assert_eq!(index.remove(&"e1".to_owned()), Some(1));
        assert_eq!(index.remove(&"e1".to_owned()), None);
        // e4 moved into e1's row: its vector moved with it.
        let ns = ["ns".to_owned()];
        let hits = index.search(&ns, "m", &[1.0, 0.0], 10, 0.0, 0.0);
        assert_eq!(ids(&hits), [4, 3, 2, 0]);
        assert_eq!(hits[0].1, 4.0);
        assert_eq!(index.len(), 4);
    }

    #[test]
    fn refresh_keeps_a_vector_only_for_the_same_text_and_namespace() {
        let mut index = VectorIndex::new();
        index.upsert("a".to_owned(), "m", &[1.0], meta("ns", "d1", 0.5, 1));
        assert_eq!(
            index.refresh(&"a".to_owned(), meta("ns", "d1", 0.9, 2)),
            Ok((1, true))
        );
        assert_eq!(
            index.refresh(&"a".to_owned(), meta("ns", "d2", 0.9, 3)),
            Ok((2, false))
        );
        assert!(index.is_empty());
        assert_eq!(
            index.refresh(&"a".to_owned(), meta("ns", "d2", 0.9, 4)),
            Err(4)
        );
    }

    #[test]
    fn ties_go_to_importance_then_the_oldest_and_replacing_keeps_age() {
        let mut index = VectorIndex::new();
        index.upsert("a".to_owned(), "m", &[1.0], meta("ns", "d", 0.5, 1));
        index.upsert("b".to_owned(), "m", &[1.0], meta("ns", "d", 0.5, 2));
        index.upsert("c".to_owned(), "m", &[1.0], meta("ns", "d", 0.7, 3));
        index.upsert("a".to_owned(), "m", &[1.0], meta("ns", "d", 0.5, 4));
        let ns = ["ns".to_owned()];
        assert_eq!(
            ids(&index.search(&ns, "m", &[1.0], 10, 0.0, 0.0)),
            [3, 4, 2]
        );
        assert_eq!(ids(&index.search(&ns, "m", &[1.0], 2, 0.6, 0.0)), [3]);
    }

    #[test]
    fn clear_and_expiry_drop_rows() {
        let mut index = VectorIndex::new();
        index.upsert("a".to_owned(), "m", &[1.0], meta("x", "d", 0.5, 1));
        let mut m = meta("y", "d", 0.5, 2);
        m.expires_at = Some(10.0);
        index.upsert("b".to_owned(), "m", &[1.0], m);
        index.upsert("c".to_owned(), "m", &[1.0], meta("y", "d", 0.5, 3));
        let y = ["y".to_owned()];
        assert_eq!(ids(&index.search(&y, "m", &[1.0], 10, 0.0, 20.0)), [3]);
        assert_eq!(index.cleanup_expired(20.0), [2]);
        assert_eq!(index.clear(&"y".to_owned()), [3]);
        assert_eq!(index.len(), 1);
        assert_eq!(index.model_of(&"a".to_owned()), Some("m"));
    }
}
