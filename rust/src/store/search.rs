//! An inverted index of searchable entries, ranked by BM25: what `InMemoryStore.search` reads.
//!
//! Twin of `SearchIndex` in `memlane/_pure/search.py`, which reads line for line the same and
//! does the same float operations in the same order, so both give equal scores. The caller
//! splits texts and queries into terms (Python's `search_terms`, the one tokenizer), so both
//! paths index and search exactly the same terms; the one exception is [`ascii_terms`], which
//! gives what that tokenizer gives for an ASCII text (a test holds the two equal), so a saved
//! entry's text need not be split in Python and handed over term by term.
//!
//! Invariants, kept by every operation:
//!
//! * A document is identified by its entry id: `upsert` of an id already indexed replaces
//!   that document, whatever its namespace (entry ids are unique across an `InMemoryStore`).
//! * `ids`, `docs`, `namespaces` and `postings` describe the same documents: each document's
//!   sequence number is in `ids` under its entry id, in `namespaces` under its namespace, and
//!   in the postings of each of its distinct terms with that term's count; a posting list or a
//!   namespace set that empties is removed, so `postings.len()` is the vocabulary.
//! * `total_length` is the sum of every document's length, so corpus statistics (document
//!   count, mean length, a term's document frequency) are read in O(1), never recounted.
//! * Corpus statistics cover every document in the index, expired ones and those of other
//!   namespaces included: what a search filters out still counts as part of the corpus, so a
//!   score does not depend on which namespaces were asked for.
//! * A search reads only the postings of the query's terms: the documents sharing no term with
//!   the query are never touched, however many there are.
//! * Sequence numbers only grow. A document replaced within its namespace keeps its number, as
//!   the table keeps a replaced entry's position; one that moves namespace, or comes back after
//!   being removed, gets a new one. Results tie-break on it, oldest first.
//!
//! Every operation that removes or replaces payloads hands them back, so the caller chooses
//! where they are dropped (the Python glue drops them after releasing its lock, because a
//! Python finaliser may run arbitrary code).

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use rustc_hash::{FxHashMap, FxHashSet};

use super::memory::live;

/// BM25's term-frequency saturation.
pub const BM25_K1: f64 = 1.2;
/// BM25's length normalisation.
pub const BM25_B: f64 = 0.75;

/// One term's BM25 weight in one document (Robertson–Spärck Jones idf, always > 0).
///
/// The operations are those of `memlane.stores.protocol.bm25`, in its order (Python evaluates
/// `B * length / avg` as `(B * length) / avg`), so the reference and both indexes agree to
/// the last bit. `df <= docs` always holds: the document being scored is in the corpus.
pub fn bm25(tf: u32, df: usize, docs: usize, length: usize, avg_length: f64) -> f64 {
    let idf = (1.0 + ((docs - df) as f64 + 0.5) / (df as f64 + 0.5)).ln();
    // Only a corpus whose every document is empty has a mean length of 0, and then no term
    // matches; the guard keeps the formula total, as the reference's does.
    let norm = if avg_length == 0.0 {
        BM25_K1
    } else {
        BM25_K1 * (1.0 - BM25_B + BM25_B * length as f64 / avg_length)
    };
    let tf = f64::from(tf);
    idf * tf * (BM25_K1 + 1.0) / (tf + norm)
}

/// The terms of `text` if it is ASCII, else `None` (the caller splits it in Python).
///
/// Python's tokenizer is `[^\W_]+` over the casefolded text: over ASCII that is the runs of
/// ASCII letters and digits, lowercased, which is what this returns.
pub fn ascii_terms(text: &str) -> Option<Vec<String>> {
    if !text.is_ascii() {
        return None;
    }
    Some(
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|run| !run.is_empty())
            .map(str::to_ascii_lowercase)
            .collect(),
    )
}

#[derive(Debug)]
struct Doc<K, T> {
    entry_id: K,
    namespace: K,
    /// Each distinct term once: the postings `take` removes the document from.
    terms: Vec<String>,
    length: usize,
    importance: f64,
    expires_at: Option<f64>,
    payload: T,
}

/// Best first: score, then importance, both highest first, then the oldest document.
///
/// Scores and importances are never NaN (scores are sums of positive weights, importances
/// are validated to 0.0–1.0), so `partial_cmp` always answers; `Equal` for the impossible
/// case keeps the order total through the sequence number. `partial_cmp`, not `total_cmp`,
/// so that -0.0 and 0.0 tie as they do in the twin's Python comparison.
fn best_first(a: &(f64, f64, u64), b: &(f64, f64, u64)) -> Ordering {
    b.0.partial_cmp(&a.0)
        .unwrap_or(Ordering::Equal)
        .then_with(|| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal))
        .then_with(|| a.2.cmp(&b.2))
}

/// Searchable documents with term postings: a search costs the postings of its terms.
///
/// `K` is the type of entry ids and namespaces; `T` is the payload. Maps keyed by what users
/// write (entry ids, namespaces, terms) keep the std SipHash hasher, so crafted inputs cannot
/// degrade them to scans; maps keyed by the index's own sequence numbers use the fast Fx hash.
#[derive(Debug)]
pub struct SearchIndex<T, K = String> {
    /// Documents by sequence number.
    docs: FxHashMap<u64, Doc<K, T>>,
    /// Entry id -> sequence number of its document.
    ids: HashMap<K, u64>,
    /// Namespace -> sequence numbers of its documents, so `clear` reads only that namespace.
    namespaces: HashMap<K, FxHashSet<u64>>,
    /// Term -> (sequence number -> occurrences of the term in that document).
    postings: HashMap<String, FxHashMap<u64, u32>>,
    total_length: usize,
    next_seq: u64,
    /// Postings read by every search so far: what tests assert a search's cost with.
    visited: u64,
}

impl<T, K> Default for SearchIndex<T, K> {
    fn default() -> Self {
        Self {
            docs: FxHashMap::default(),
            ids: HashMap::new(),
            namespaces: HashMap::new(),
            postings: HashMap::new(),
            total_length: 0,
            next_seq: 0,
            visited: 0,
        }
    }
}

impl<T, K: Hash + Eq + Clone> SearchIndex<T, K> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Removes the document numbered `seq` from every map; the document.
    fn take(&mut self, seq: u64) -> Doc<K, T> {
        let doc = self
            .docs
            .remove(&seq)
            .expect("caller names a live document");
        self.ids.remove(&doc.entry_id);
        let members = self
            .namespaces
            .get_mut(&doc.namespace)
            .expect("a document's namespace is indexed");
        members.remove(&seq);
        if members.is_empty() {
            self.namespaces.remove(&doc.namespace);
        }
        for term in &doc.terms {
            let posting = self
                .postings
                .get_mut(term)
                .expect("a document's terms have postings");
            posting.remove(&seq);
            if posting.is_empty() {
                self.postings.remove(term);
            }
        }
        self.total_length -= doc.length;
        doc
    }

    /// Indexes a document, replacing the one with the same `entry_id`; the replaced payload.
    ///
    /// `terms` are the document's terms in text order, repeats included (they are its term
    /// counts and its length); an empty list is a document no query finds, which still counts
    /// in the corpus, as the reference counts an entry whose text has no terms.
    pub fn upsert(
        &mut self,
        entry_id: K,
        namespace: K,
        terms: Vec<String>,
        importance: f64,
        expires_at: Option<f64>,
        payload: T,
    ) -> Option<T> {
        let (seq, replaced) = match self.ids.get(&entry_id).copied() {
            Some(seq) if self.docs[&seq].namespace == namespace => {
                (seq, Some(self.take(seq).payload))
            }
            Some(seq) => {
                let replaced = self.take(seq).payload;
                self.next_seq += 1;
                (self.next_seq, Some(replaced))
            }
            None => {
                self.next_seq += 1;
                (self.next_seq, None)
            }
        };
        let length = terms.len();
        // Sorted, equal terms are neighbours: each run is a distinct term and its count, with
        // no map built for a document's few terms.
        let mut terms = terms;
        terms.sort_unstable();
        let mut distinct: Vec<String> = Vec::with_capacity(terms.len());
        let mut counts: Vec<u32> = Vec::with_capacity(terms.len());
        for term in terms {
            match (distinct.last(), counts.last_mut()) {
                (Some(last), Some(count)) if *last == term => *count += 1,
                _ => {
                    distinct.push(term);
                    counts.push(1);
                }
            }
        }
        for (term, &count) in distinct.iter().zip(&counts) {
            // A term already in the vocabulary is not cloned: most of a corpus's are.
            if let Some(posting) = self.postings.get_mut(term) {
                posting.insert(seq, count);
            } else {
                let mut posting = FxHashMap::default();
                posting.insert(seq, count);
                self.postings.insert(term.clone(), posting);
            }
        }
        self.total_length += length;
        self.ids.insert(entry_id.clone(), seq);
        self.namespaces
            .entry(namespace.clone())
            .or_default()
            .insert(seq);
        self.docs.insert(
            seq,
            Doc {
                entry_id,
                namespace,
                terms: distinct,
                length,
                importance,
                expires_at,
                payload,
            },
        );
        replaced
    }

    /// Removes the document of `entry_id`; its payload if there was one.
    pub fn remove(&mut self, entry_id: &K) -> Option<T> {
        let seq = *self.ids.get(entry_id)?;
        Some(self.take(seq).payload)
    }

    /// Removes every document of a namespace (expired ones too); their payloads.
    pub fn clear(&mut self, namespace: &K) -> Vec<T> {
        let doomed: Vec<u64> = self
            .namespaces
            .get(namespace)
            .map(|members| members.iter().copied().collect())
            .unwrap_or_default();
        doomed
            .into_iter()
            .map(|seq| self.take(seq).payload)
            .collect()
    }

    /// Removes documents expired at `now` everywhere; their payloads.
    pub fn cleanup_expired(&mut self, now: f64) -> Vec<T> {
        let doomed: Vec<u64> = self
            .docs
            .iter()
            .filter(|(_, doc)| !live(doc.expires_at, now))
            .map(|(&seq, _)| seq)
            .collect();
        doomed
            .into_iter()
            .map(|seq| self.take(seq).payload)
            .collect()
    }

    /// The best `limit` documents for `terms`, with their scores, best first.
    ///
    /// A candidate lies in one of `namespaces`, is unexpired at `now`, has `importance >=
    /// min_importance` and holds at least one of `terms`. Its score is the sum, over the
    /// distinct `terms` in the order given, of each one's BM25 weight in it (terms it lacks
    /// add nothing); the sum runs in that order so that it rounds as the reference's does.
    /// Order: score, then importance, both highest first, then the oldest document.
    pub fn search(
        &mut self,
        namespaces: &[K],
        terms: &[String],
        limit: usize,
        min_importance: f64,
        now: f64,
    ) -> Vec<(&T, f64)> {
        if self.docs.is_empty() || limit == 0 {
            return Vec::new();
        }
        let wanted: HashSet<&K> = namespaces.iter().collect();
        let docs = self.docs.len();
        let avg_length = self.total_length as f64 / docs as f64;
        let mut seen: HashSet<&str> = HashSet::new();
        let mut scores: FxHashMap<u64, f64> = FxHashMap::default();
        for term in terms {
            if !seen.insert(term.as_str()) {
                continue;
            }
            let Some(posting) = self.postings.get(term) else {
                continue;
            };
            let df = posting.len();
            self.visited += posting.len() as u64;
            for (&seq, &tf) in posting {
                let doc = &self.docs[&seq];
                if !wanted.contains(&doc.namespace)
                    || !live(doc.expires_at, now)
                    || doc.importance < min_importance
                {
                    continue;
                }
                *scores.entry(seq).or_insert(0.0) += bm25(tf, df, docs, doc.length, avg_length);
            }
        }
        let mut ranked: Vec<(f64, f64, u64)> = scores
            .into_iter()
            .map(|(seq, score)| (score, self.docs[&seq].importance, seq))
            .collect();
        // Only the best `limit` are ordered: a common term can match most of the corpus.
        if ranked.len() > limit {
            ranked.select_nth_unstable_by(limit - 1, best_first);
            ranked.truncate(limit);
        }
        ranked.sort_unstable_by(best_first);
        ranked
            .into_iter()
            .map(|(score, _, seq)| (&self.docs[&seq].payload, score))
            .collect()
    }

    /// Postings read by every search so far (a search's cost, for tests).
    pub fn visited(&self) -> u64 {
        self.visited
    }

    /// Number of documents, expired ones included.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether the index holds no document.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }
}

#[cfg(test)]
// Scores are compared bit for bit: equal operations in equal order must round equally.
#[allow(clippy::float_cmp)]
mod tests {
    use super::*;

    type Index = SearchIndex<&'static str>;

    fn s(x: &str) -> String {
        x.to_owned()
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(s).collect()
    }

    fn put(i: &mut Index, ns: &str, id: &str, text: &str, p: &'static str) -> Option<&'static str> {
        i.upsert(s(id), s(ns), words(text), 0.5, None, p)
    }

    fn find(i: &mut Index, nss: &[&str], query: &str) -> Vec<&'static str> {
        let nss: Vec<String> = nss.iter().map(|n| s(n)).collect();
        i.search(&nss, &words(query), 10, 0.0, 0.0)
            .into_iter()
            .map(|(p, _)| *p)
            .collect()
    }

    #[test]
    fn ascii_terms_are_lowercased_runs_of_letters_and_digits() {
        assert_eq!(
            ascii_terms("user_timezone: Australia/Adelaide 42x"),
            Some(vec![
                s("user"),
                s("timezone"),
                s("australia"),
                s("adelaide"),
                s("42x")
            ])
        );
        assert_eq!(ascii_terms("  _-_ "), Some(vec![]));
        assert_eq!(ascii_terms(""), Some(vec![]));
        assert_eq!(ascii_terms("café"), None);
    }

    #[test]
    fn repeated_terms_count_once_per_distinct_term() {
        let mut i = Index::new();
        put(&mut i, "n", "a", "w x w w", "A");
        put(&mut i, "n", "b", "x", "B");
        assert_eq!(
            i.postings["w"].values().copied().collect::<Vec<_>>(),
            vec![3]
        );
        assert_eq!(i.postings["x"].len(), 2);
        assert_eq!(i.total_length, 5);
        assert_eq!(find(&mut i, &["n"], "w"), vec!["A"]);
        i.remove(&s("a"));
        assert!(!i.postings.contains_key("w"));
        assert_eq!(i.total_length, 1);
    }

    #[test]
    fn bm25_matches_the_formula() {
        // One document of one term: idf = ln(1 + 0.5 / 1.5), norm = k1, tf = 1.
        let want = (4.0f64 / 3.0).ln() * 2.2 / 2.2;
        assert!((bm25(1, 1, 1, 1, 1.0) - want).abs() < 1e-15);
        // Rarer terms weigh more, repeated ones more too, long documents less.
        assert!(bm25(1, 1, 10, 5, 5.0) > bm25(1, 5, 10, 5, 5.0));
        assert!(bm25(3, 1, 10, 5, 5.0) > bm25(1, 1, 10, 5, 5.0));
        assert!(bm25(1, 1, 10, 20, 5.0) < bm25(1, 1, 10, 5, 5.0));
        assert_eq!(bm25(1, 1, 1, 0, 0.0), (4.0f64 / 3.0).ln() * 2.2 / 2.2);
    }

    #[test]
    fn finds_by_any_term_best_first() {
        let mut i = Index::new();
        put(&mut i, "a", "1", "apple only", "one");
        put(&mut i, "a", "2", "apple banana cherry", "two");
        put(&mut i, "a", "3", "apple banana", "three");
        put(&mut i, "a", "4", "noise", "four");
        assert_eq!(
            find(&mut i, &["a"], "apple banana cherry"),
            vec!["two", "three", "one"]
        );
        assert_eq!(find(&mut i, &["a"], "durian"), Vec::<&str>::new());
        assert_eq!(find(&mut i, &["a"], ""), Vec::<&str>::new());
    }

    #[test]
    fn ties_go_to_importance_then_age() {
        let mut i = Index::new();
        i.upsert(s("1"), s("a"), words("same"), 0.3, None, "low");
        i.upsert(s("2"), s("a"), words("same"), 0.9, None, "high");
        i.upsert(s("3"), s("a"), words("same"), 0.3, None, "low-later");
        assert_eq!(
            find(&mut i, &["a"], "same"),
            vec!["high", "low", "low-later"]
        );
        // Replaced in place, a document keeps its age; moved, it becomes the newest.
        i.upsert(s("1"), s("a"), words("same"), 0.3, None, "low-again");
        assert_eq!(
            find(&mut i, &["a", "b"], "same"),
            vec!["high", "low-again", "low-later"]
        );
        i.upsert(s("1"), s("b"), words("same"), 0.3, None, "moved");
        assert_eq!(
            find(&mut i, &["a", "b"], "same"),
            vec!["high", "low-later", "moved"]
        );
    }

    #[test]
    fn filters_namespace_expiry_and_importance_but_counts_the_whole_corpus() {
        let mut i = Index::new();
        i.upsert(s("1"), s("a"), words("x y"), 0.5, Some(10.0), "expiring");
        i.upsert(s("2"), s("b"), words("x"), 0.2, None, "unimportant");
        i.upsert(s("3"), s("a"), words("x z"), 0.5, Some(f64::NAN), "nan");
        let a = vec![s("a")];
        let both = vec![s("a"), s("b")];
        let x = words("x");
        let hits = |i: &mut Index, nss: &[String], min: f64, now: f64| -> Vec<&'static str> {
            i.search(nss, &x, 10, min, now)
                .into_iter()
                .map(|(p, _)| *p)
                .collect()
        };
        assert_eq!(hits(&mut i, &a, 0.0, 5.0), vec!["expiring"]);
        assert_eq!(hits(&mut i, &a, 0.0, 10.0), Vec::<&str>::new());
        assert_eq!(hits(&mut i, &both, 0.3, 5.0), vec!["expiring"]);
        assert_eq!(hits(&mut i, &both, 0.2, 10.0), vec!["unimportant"]);
        // Three documents hold "x": its weight sees all three, though one is searched.
        let score = i.search(&both, &x, 10, 0.2, 10.0)[0].1;
        assert_eq!(score, bm25(1, 3, 3, 1, 5.0 / 3.0));
        let mut gone = i.cleanup_expired(10.0);
        gone.sort_unstable();
        assert_eq!(gone, vec!["expiring", "nan"]);
        assert_eq!(i.len(), 1);
        let score = i.search(&both, &x, 10, 0.0, 10.0)[0].1;
        assert_eq!(score, bm25(1, 1, 1, 1, 1.0));
    }

    #[test]
    fn limit_keeps_the_best() {
        let mut i = Index::new();
        let names = ["p0", "p1", "p2", "p3", "p4", "p5"];
        for (n, name) in names.iter().enumerate() {
            i.upsert(
                n.to_string(),
                s("a"),
                words("w"),
                n as f64 / 10.0,
                None,
                name,
            );
        }
        let hits: Vec<&str> = i
            .search(&[s("a")], &words("w"), 2, 0.0, 0.0)
            .into_iter()
            .map(|(p, _)| *p)
            .collect();
        assert_eq!(hits, vec!["p5", "p4"]);
        assert!(i.search(&[s("a")], &words("w"), 0, 0.0, 0.0).is_empty());
    }

    #[test]
    fn duplicate_query_terms_count_once() {
        let mut i = Index::new();
        put(&mut i, "a", "1", "x y", "one");
        put(&mut i, "a", "2", "y", "two");
        let a = [s("a")];
        let once = i.search(&a, &words("x"), 10, 0.0, 0.0)[0].1;
        let twice = i.search(&a, &words("x x"), 10, 0.0, 0.0)[0].1;
        assert_eq!(once, twice);
    }

    #[test]
    fn remove_clear_and_replace_leave_no_trace() {
        let mut i = Index::new();
        assert_eq!(put(&mut i, "a", "1", "x y y", "one"), None);
        put(&mut i, "a", "2", "y", "two");
        put(&mut i, "b", "3", "z", "three");
        assert_eq!(put(&mut i, "a", "1", "w", "uno"), Some("one"));
        assert_eq!(find(&mut i, &["a"], "x"), Vec::<&str>::new());
        assert_eq!(find(&mut i, &["a"], "w"), vec!["uno"]);
        assert_eq!(i.remove(&s("2")), Some("two"));
        assert_eq!(i.remove(&s("2")), None);
        assert_eq!(i.clear(&s("b")), vec!["three"]);
        assert_eq!(i.clear(&s("b")), Vec::<&str>::new());
        assert_eq!(i.len(), 1);
        assert_eq!(i.total_length, 1);
        assert_eq!(i.postings.keys().collect::<Vec<_>>(), vec!["w"]);
        assert_eq!(i.namespaces.len(), 1);
        assert_eq!(i.remove(&s("1")), Some("uno"));
        assert!(i.is_empty());
        assert!(i.postings.is_empty() && i.namespaces.is_empty() && i.ids.is_empty());
        assert_eq!(i.total_length, 0);
    }

    #[test]
    fn a_search_reads_only_its_terms_postings() {
        let mut i = Index::new();
        for n in 0..10_000 {
            i.upsert(
                n.to_string(),
                s("a"),
                words("common filler"),
                0.5,
                None,
                "c",
            );
        }
        i.upsert(s("r1"), s("a"), words("rare common"), 0.5, None, "r1");
        i.upsert(s("r2"), s("b"), words("rare"), 0.5, None, "r2");
        let before = i.visited();
        let found = i.search(&[s("a")], &words("rare absent"), 10, 0.0, 0.0);
        assert_eq!(found.len(), 1);
        assert_eq!(i.visited() - before, 2);
    }
}
