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
//! * Besides its floats, each row keeps an int8 copy (`codes`) with its scale, the norm of the
//!   copy and a bound of its error (`Quantized`). A search first scores the int8 copies (a
//!   quarter of the memory to read, integer products) and scores exactly, in f32, only the
//!   rows whose error-bounded estimate can reach the `limit`-th best lower bound: the rows it
//!   skips provably score below the answer's last, so the answer is the full scan's (the twin
//!   scans everything and agrees). A 100,000 x 256 group is 100 MB of floats; its codes are
//!   25 MB. On the baseline x86-64 target (no SSE4.1, so no 32-bit SIMD multiply) one thread
//!   of the int8 pass is compute-bound and measured from as fast as to 10% faster than the f32
//!   scan here; reading a quarter of the memory is what lets a large group's pass split over
//!   cores (`scan_parts`) without the threads queueing on memory bandwidth.
//! * A row's filter fields (namespace, importance, expiry, sequence number, quantisation) sit
//!   in a compact `Hot` array beside the codes, so the pre-scan reads no `Row` (ids, digests,
//!   payloads) at all.
//!
//! Scores are computed in f32 over eight independent lanes (what lets the compiler use SIMD
//! registers), then widened: they equal the twin's to float32 rounding, and exactly when the
//! products and sums are representable (the differential tests use such values).
//!
//! Every operation that removes or replaces payloads hands them back, so the caller chooses
//! where they are dropped (the Python glue drops them after releasing its lock).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;
use std::ops::Range;
use std::sync::OnceLock;

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

/// A vector's int8 copy: `codes[i] * scale` approximates `floats[i]`; `error` bounds the
/// norm of the difference and `norm` is the copy's own norm (both rounded up).
#[derive(Debug)]
pub struct Quantized {
    pub codes: Vec<i8>,
    pub scale: f64,
    pub error: f64,
    pub norm: f64,
}

impl Quantized {
    /// The copy of `floats`, scaled so its largest magnitude maps to 127.
    pub fn new(floats: &[f32]) -> Self {
        let top = floats
            .iter()
            .fold(0.0f64, |m, &f| m.max(f64::from(f).abs()));
        let scale = if top > 0.0 { top / 127.0 } else { 1.0 };
        let mut codes = Vec::with_capacity(floats.len());
        let (mut error, mut norm) = (0.0f64, 0.0f64);
        for &f in floats {
            // |f| / scale <= 127 by construction: the cast never saturates.
            #[allow(clippy::cast_possible_truncation)]
            let code = (f64::from(f) / scale).round().clamp(-127.0, 127.0) as i8;
            let decoded = f64::from(code) * scale;
            error += (f64::from(f) - decoded).powi(2);
            norm += decoded * decoded;
            codes.push(code);
        }
        Self {
            codes,
            scale,
            error: error.sqrt() * (1.0 + 1e-9) + 1e-12,
            norm: norm.sqrt() * (1.0 + 1e-9),
        }
    }

    /// The norm of `floats` in f64, rounded up as [`Quantized::bound`] assumes of a query's.
    pub fn padded_norm(floats: &[f32]) -> f64 {
        floats
            .iter()
            .map(|&f| f64::from(f) * f64::from(f))
            .sum::<f64>()
            .sqrt()
            * (1.0 + 1e-9)
    }

    /// How far the f32 dot product of a row x with this query q can lie from the int8
    /// estimate, with x̂, q̂ the decoded copies and e_x = x - x̂, e_q = q - q̂:
    /// x·q - x̂·q̂ = e_x·q + x̂·e_q, so |x·q - x̂·q̂| <= |e_x| |q| + |x̂| |e_q| (Cauchy-Schwarz).
    /// The last terms cover the f32 rounding of the exact score (at most about
    /// dims * 2^-24 * |x| |q|) and of the f64 estimate.
    pub fn bound(&self, error: f64, norm: f64, query_norm: f64, dims: usize) -> f64 {
        #[allow(clippy::cast_precision_loss)] // dims is small
        let rounding = (dims as f64 + 8.0) * f64::from(f32::EPSILON);
        error * query_norm + norm * self.error + rounding * (norm + error) * query_norm + 1e-9
    }
}

/// The exact integer dot product of two int8 slices of equal length.
///
/// Blocks of 2^20: in a block each of the 32 lanes adds at most 2^15 products of at most
/// 127^2 < 2^14, so i32 lanes are exact, and are widened to i64 before they are added. A
/// vector of any realistic length is one block.
pub fn int_dot(a: &[i8], b: &[i8]) -> i64 {
    debug_assert_eq!(a.len(), b.len());
    a.chunks(1 << 20)
        .zip(b.chunks(1 << 20))
        .map(|(block_a, block_b)| block_dot(block_a, block_b))
        .sum()
}

/// One block of `int_dot`, in 32 independent i32 lanes: the shape the compiler vectorises (an
/// iterator `sum` of the same products was several times slower here).
#[inline]
fn block_dot(a: &[i8], b: &[i8]) -> i64 {
    let mut lanes = [0i32; 32];
    let mut chunks_a = a.chunks_exact(32);
    let mut chunks_b = b.chunks_exact(32);
    for (ca, cb) in (&mut chunks_a).zip(&mut chunks_b) {
        for i in 0..32 {
            lanes[i] += i32::from(ca[i]) * i32::from(cb[i]);
        }
    }
    let tail: i64 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(&x, &y)| i64::from(x) * i64::from(y))
        .sum();
    lanes.iter().map(|&lane| i64::from(lane)).sum::<i64>() + tail
}

/// Pass 1 of a search, over the int8 copies of one group's rows.
struct Prescan<'a> {
    hot: &'a [Hot],
    codes: &'a [i8],
    query: &'a Quantized,
    query_norm: f64,
    dims: usize,
    wanted: &'a [u32],
    limit: usize,
    min_importance: f64,
    now: f64,
}

impl Prescan<'_> {
    /// The rows that may be in the answer, with the upper bounds of their scores, and the
    /// floor: the `limit`-th best lower bound. A row whose upper bound is below the floor
    /// scores below at least `limit` rows, so it cannot be in the answer. Reads the rows of
    /// `part` only.
    fn run(&self, part: Range<usize>) -> (Vec<(usize, f64)>, f64) {
        let mut found = Candidates::new(self.limit);
        let q = self.query;
        let codes = &self.codes[part.start * self.dims..part.end * self.dims];
        for (at, (hot, codes)) in
            (part.start..).zip(self.hot[part].iter().zip(codes.chunks_exact(self.dims)))
        {
            if hot.importance < self.min_importance
                || !self.wanted.contains(&hot.namespace)
                || !live(hot.expires_at, self.now)
            {
                continue;
            }
            #[allow(clippy::cast_precision_loss)] // |sum| <= dims * 127^2 < 2^53: exact
            let estimate = int_dot(codes, &q.codes) as f64 * hot.scale * q.scale;
            let bound = q.bound(hot.error, hot.norm, self.query_norm, self.dims);
            found.offer(at, estimate, bound);
        }
        found.finish()
    }
}

/// The rows an int8 pass keeps, and its floor: rows are offered in order with their
/// estimated score and its error bound; a row whose upper bound is below the floor (the
/// `limit`-th best lower bound so far) scores below at least `limit` rows, so it cannot be in
/// the answer and is not kept. Shared by the in-memory index and the SQLite mirror.
pub(crate) struct Candidates {
    /// The `limit` best lower bounds so far (a min-heap).
    lows: BinaryHeap<Reverse<Ordered>>,
    floor: f64,
    maybe: Vec<(usize, f64)>,
    limit: usize,
}

impl Candidates {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            lows: BinaryHeap::with_capacity(limit.min(4096) + 1),
            floor: f64::NEG_INFINITY,
            maybe: Vec::new(),
            limit,
        }
    }

    /// Offers row `at`, whose score lies within `bound` of `estimate`.
    #[inline]
    pub(crate) fn offer(&mut self, at: usize, estimate: f64, bound: f64) {
        let upper = estimate + bound;
        if upper < self.floor {
            return;
        }
        self.maybe.push((at, upper));
        self.lows.push(Reverse(Ordered(estimate - bound)));
        if self.lows.len() > self.limit {
            self.lows.pop();
        }
        if self.lows.len() == self.limit {
            self.floor = self.lows.peek().map_or(self.floor, |low| low.0 .0);
        }
    }

    /// The rows kept, in the order offered, with their upper bounds; and the floor.
    pub(crate) fn finish(self) -> (Vec<(usize, f64)>, f64) {
        (self.maybe, self.floor)
    }
}

/// `run` over rows `0..rows`, split into `parts` ranges scanned on as many threads. Each
/// part's floor is the `limit`-th best lower bound of its own rows, at most the `limit`-th
/// best of all rows, so the highest of them is still a floor for every row; the parts' rows
/// are joined in row order, so what follows does not depend on the split.
pub(crate) fn in_parts<F>(rows: usize, parts: usize, run: F) -> (Vec<(usize, f64)>, f64)
where
    F: Fn(Range<usize>) -> (Vec<(usize, f64)>, f64) + Sync,
{
    if parts <= 1 || rows == 0 {
        return run(0..rows);
    }
    let step = rows.div_ceil(parts);
    let run = &run;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..rows)
            .step_by(step)
            .map(|start| scope.spawn(move || run(start..(start + step).min(rows))))
            .collect();
        let mut maybe = Vec::new();
        let mut floor = f64::NEG_INFINITY;
        for handle in handles {
            let (part, part_floor) = match handle.join() {
                Ok(found) => found,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            floor = floor.max(part_floor);
            maybe.extend(part);
        }
        (maybe, floor)
    })
}

/// Rows x dims an int8 pass thread should have to itself: below that, starting a thread
/// costs more than it saves (2^21 codes take a core about half a millisecond or more here;
/// a thread starts in tens of microseconds).
const CODES_PER_THREAD: usize = 1 << 21;

/// How many threads scan `rows` x `dims` (an index group or a SQLite mirror): one per
/// `CODES_PER_THREAD`, at most one per core, and at most 8.
pub(crate) fn scan_parts(rows: usize, dims: usize) -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from));
    (rows.saturating_mul(dims) / CODES_PER_THREAD).clamp(1, cores.clamp(1, 8))
}

/// An f64 ordered totally, for the heap of lower bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ordered(f64);

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
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
    digest: String,
    payload: T,
}

/// What a search reads of each row besides its vector.
#[derive(Debug, Clone, Copy)]
struct Hot {
    namespace: u32,
    importance: f64,
    expires_at: Option<f64>,
    seq: u64,
    /// The int8 copy's scale, error bound and norm (see `Quantized`).
    scale: f64,
    error: f64,
    norm: f64,
}

#[derive(Debug)]
struct Group<K, T> {
    model: String,
    dims: usize,
    data: Vec<f32>,
    codes: Vec<i8>,
    hot: Vec<Hot>,
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
            codes: Vec::new(),
            hot: Vec::new(),
            rows: Vec::new(),
        });
        self.group_ids.insert((model.to_owned(), dims), id);
        id
    }

    /// Removes the row at `(group, row)`, moving the group's last row into its place; the
    /// row and its filter fields.
    fn take(&mut self, group: usize, row: usize) -> (Row<K, T>, Hot) {
        let g = &mut self.groups[group];
        let dims = g.dims;
        let last = g.rows.len() - 1;
        if row != last {
            g.data
                .copy_within(last * dims..(last + 1) * dims, row * dims);
            g.codes
                .copy_within(last * dims..(last + 1) * dims, row * dims);
            let moved = &g.rows[last].entry_id;
            *self.slots.get_mut(moved).expect("every row has a slot") = (group, row);
        }
        g.data.truncate(last * dims);
        g.codes.truncate(last * dims);
        let taken = g.rows.swap_remove(row);
        let hot = g.hot.swap_remove(row);
        self.slots.remove(&taken.entry_id);
        (taken, hot)
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
            Some((_, hot)) if hot.namespace == namespace => hot.seq,
            _ => {
                self.next_seq += 1;
                self.next_seq
            }
        };
        let group = self.group_id(model, vector.len());
        let copy = Quantized::new(vector);
        let g = &mut self.groups[group];
        g.data.extend_from_slice(vector);
        g.codes.extend_from_slice(&copy.codes);
        g.hot.push(Hot {
            namespace,
            importance: meta.importance,
            expires_at: meta.expires_at,
            seq,
            scale: copy.scale,
            error: copy.error,
            norm: copy.norm,
        });
        g.rows.push(Row {
            entry_id: entry_id.clone(),
            digest: meta.digest,
            payload: meta.payload,
        });
        self.slots.insert(entry_id, (group, g.rows.len() - 1));
        old.map(|(row, _)| row.payload)
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
        let g = &mut self.groups[group];
        let (r, hot) = (&mut g.rows[row], &mut g.hot[row]);
        if same_namespace == Some(hot.namespace) && r.digest == meta.digest {
            hot.importance = meta.importance;
            hot.expires_at = meta.expires_at;
            return Ok((std::mem::replace(&mut r.payload, meta.payload), true));
        }
        Ok((self.take(group, row).0.payload, false))
    }

    /// Drops the vector of `entry_id`; its payload, if it had one.
    pub fn remove(&mut self, entry_id: &K) -> Option<T> {
        let (group, row) = self.slots.get(entry_id).copied()?;
        Some(self.take(group, row).0.payload)
    }

    /// Removes every row `drop` selects; their payloads.
    fn remove_where(&mut self, drop: impl Fn(&Hot) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        for group in 0..self.groups.len() {
            let mut row = 0;
            while row < self.groups[group].rows.len() {
                if drop(&self.groups[group].hot[row]) {
                    // The last row moved into `row`: look at it next.
                    removed.push(self.take(group, row).0.payload);
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
        self.search_in_parts(namespaces, model, query, limit, min_importance, now, None)
    }

    /// `search`, its int8 pass split over `parts` threads (the answer is the same for any;
    /// `None`: as many as the group's size calls for).
    #[allow(clippy::too_many_arguments)] // search's arguments and the thread count
    fn search_in_parts(
        &self,
        namespaces: &[K],
        model: &str,
        query: &[f32],
        limit: usize,
        min_importance: f64,
        now: f64,
        parts: Option<usize>,
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
        if limit == 0 {
            return Vec::new();
        }
        let g = &self.groups[group];
        let dims = g.dims;
        let q = Quantized::new(query);
        let query_norm = Quantized::padded_norm(query);
        let parts = parts.unwrap_or_else(|| scan_parts(g.rows.len(), dims));
        let prescan = Prescan {
            hot: &g.hot,
            codes: &g.codes,
            query: &q,
            query_norm,
            dims,
            wanted: &wanted,
            limit,
            min_importance,
            now,
        };
        let (maybe, floor) = in_parts(g.hot.len(), parts, |part| prescan.run(part));
        // Pass 2: the exact f32 scores of the rows that can still reach the answer.
        let mut top = Top::new(limit);
        for (at, upper) in maybe {
            if upper < floor {
                continue;
            }
            let hot = &g.hot[at];
            top.offer(Candidate {
                score: f64::from(dot(&g.data[at * dims..(at + 1) * dims], query)),
                importance: hot.importance,
                seq: hot.seq,
                row: at,
            });
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

    /// A deterministic stream of fractions in [-1, 1) (splitmix64).
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
    fn the_int8_pass_keeps_exactly_the_full_scans_answer_on_any_number_of_threads() {
        for (round, dims) in [(1u64, 256usize), (2, 7), (3, 64), (4, 1)] {
            let mut stream = Stream(round);
            // Clustered rows (small perturbations of a few centres), exact duplicates for
            // ties, and rows in another namespace, expired or unimportant: the cases where a
            // bound too tight would drop a row of the answer.
            let centres: Vec<Vec<f32>> = (0..3).map(|_| stream.vector(dims)).collect();
            let mut index = VectorIndex::new();
            let mut kept: Vec<(u32, Vec<f32>, f64)> = Vec::new();
            for i in 0..600u32 {
                let base = &centres[i as usize % 3];
                let noise = stream.vector(dims);
                let v: Vec<f32> = if i % 7 == 0 {
                    base.clone()
                } else {
                    base.iter().zip(&noise).map(|(b, n)| b + 0.05 * n).collect()
                };
                let namespace = if i % 11 == 0 { "b" } else { "a" };
                let importance = f64::from(i % 4) / 4.0;
                let mut m = meta(namespace, "d", importance, i);
                m.expires_at = (i % 13 == 0).then_some(5.0);
                index.upsert(format!("e{i}"), "m", &v, m);
                if namespace == "a" && importance >= 0.25 && i % 13 != 0 {
                    kept.push((i, v, importance));
                }
            }
            let a = ["a".to_owned()];
            for limit in [1usize, 3, 10, 50] {
                for _ in 0..20 {
                    let query = if stream.next() > 0.5 {
                        centres[0].clone()
                    } else {
                        stream.vector(dims)
                    };
                    // The full scan: every kept row scored exactly, in insertion order.
                    let mut top = Top::new(limit);
                    for (at, (_, v, importance)) in kept.iter().enumerate() {
                        top.offer(Candidate {
                            score: f64::from(dot(v, &query)),
                            importance: *importance,
                            seq: at as u64,
                            row: at,
                        });
                    }
                    let expected: Vec<(u32, f64)> = top
                        .into_best_first()
                        .into_iter()
                        .map(|c| (kept[c.row].0, c.score))
                        .collect();
                    // One thread, and the rows split over several (down to four rows a
                    // part): each part's floor holds only for its own rows.
                    for parts in [1, 2, 7, 150] {
                        let found: Vec<(u32, f64)> = index
                            .search_in_parts(&a, "m", &query, limit, 0.25, 10.0, Some(parts))
                            .into_iter()
                            .map(|(p, score)| (*p, score))
                            .collect();
                        assert_eq!(found, expected);
                    }
                }
            }
        }
    }

    #[test]
    fn large_groups_are_scanned_by_several_threads() {
        assert_eq!(scan_parts(0, 256), 1);
        assert_eq!(scan_parts(1000, 256), 1);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(scan_parts(100_000, 256), 12.min(cores.clamp(1, 8)));
    }

    #[test]
    fn int_dot_is_exact_across_lanes_blocks_and_tails() {
        for len in [0usize, 1, 31, 32, 33, 4095, 4096, 4097, 9000] {
            let a: Vec<i8> = (0..len)
                .map(|i| if i % 3 == 0 { -127 } else { 127 })
                .collect();
            let b: Vec<i8> = (0..len)
                .map(|i| if i % 5 == 0 { 127 } else { -127 })
                .collect();
            let plain: i64 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| i64::from(x) * i64::from(y))
                .sum();
            assert_eq!(int_dot(&a, &b), plain);
            assert_eq!(int_dot(&a, &a), 127 * 127 * i64::try_from(len).unwrap());
        }
    }

    #[test]
    fn the_int8_copy_bounds_its_error() {
        let mut stream = Stream(9);
        for dims in [1usize, 5, 256] {
            let x = stream.vector(dims);
            let q = stream.vector(dims);
            let (cx, cq) = (Quantized::new(&x), Quantized::new(&q));
            #[allow(clippy::cast_precision_loss)] // small exact integers
            let estimate = int_dot(&cx.codes, &cq.codes) as f64 * cx.scale * cq.scale;
            let exact = f64::from(dot(&x, &q));
            assert!((exact - estimate).abs() <= cq.bound(cx.error, cx.norm, 1.0 + 1e-6, dims));
            // A row scored against itself: the copy is close, not equal.
            assert!(cx.error > 0.0 || dims == 1);
        }
    }
}
