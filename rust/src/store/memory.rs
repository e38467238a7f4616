//! Entries per namespace, in process memory, with a key index.
//!
//! Twin of `MemoryTable` in `memlane/_pure/store.py`, whose module docstring states the rules
//! both follow:
//!
//! * `save` with an `entry_id` already in the namespace replaces it in place (its position is
//!   kept); an `entry_id` held by another namespace moves to the end of this one.
//! * A key is unique within a namespace: saving an entry whose key another entry holds removes
//!   that other entry in the same step.
//! * `load` returns unexpired entries in insertion order; expired entries still hold their key
//!   until `cleanup_expired` or an overwrite removes them.
//! * A namespace exists while it holds an entry; `namespaces` lists them in creation order, so
//!   one that empties and fills again moves to the end.
//!
//! Every operation that removes or replaces payloads hands them back, so the caller chooses
//! where they are dropped (the Python glue drops them after releasing its lock, because a
//! Python finaliser may run arbitrary code).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Whether an entry expiring at `expires_at` (Unix seconds) is still live at `now`.
/// NaN compares false, so a NaN expiry is always expired, as in the twin.
pub(crate) fn live(expires_at: Option<f64>, now: f64) -> bool {
    expires_at.is_none_or(|at| at > now)
}

#[derive(Debug)]
struct Slot<K, T> {
    entry_id: K,
    key: Option<K>,
    expires_at: Option<f64>,
    payload: T,
}

#[derive(Debug)]
struct Namespace<K, T> {
    /// This namespace's position in `MemoryTable::order`.
    created: u64,
    /// Insertion order: sequence numbers only grow, and a BTreeMap deletes in O(log n).
    slots: BTreeMap<u64, Slot<K, T>>,
    ids: HashMap<K, u64>,
    /// Key -> sequence number of the one entry holding it.
    keys: HashMap<K, u64>,
}

impl<K, T> Namespace<K, T> {
    fn new(created: u64) -> Self {
        Self {
            created,
            slots: BTreeMap::new(),
            ids: HashMap::new(),
            keys: HashMap::new(),
        }
    }
}

/// Entries per namespace with a key index: `load_by_key` is a hash lookup, not a scan.
///
/// `K` is the type of namespaces, entry ids and keys; `T` is the payload. The std SipHash
/// hasher is kept on purpose: keys come from users, and a fast unkeyed hash would let crafted
/// keys degrade lookups to scans.
#[derive(Debug)]
pub struct MemoryTable<T, K = String> {
    namespaces: HashMap<K, Namespace<K, T>>,
    /// Namespaces by creation sequence number.
    order: BTreeMap<u64, K>,
    /// entry_id -> the namespace holding it.
    owner: HashMap<K, K>,
    next_seq: u64,
}

impl<T, K> Default for MemoryTable<T, K> {
    fn default() -> Self {
        Self {
            namespaces: HashMap::new(),
            order: BTreeMap::new(),
            owner: HashMap::new(),
            next_seq: 0,
        }
    }
}

impl<T, K: Hash + Eq + Clone> MemoryTable<T, K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    fn ensure(&mut self, namespace: &K) {
        if !self.namespaces.contains_key(namespace) {
            let created = self.seq();
            self.order.insert(created, namespace.clone());
            self.namespaces
                .insert(namespace.clone(), Namespace::new(created));
        }
    }

    /// Removes an entry known to be in `namespace`, and the namespace if it empties.
    fn drop_entry(&mut self, namespace: &K, entry_id: &K) -> T {
        let ns = self
            .namespaces
            .get_mut(namespace)
            .expect("owner index names a live namespace");
        let seq = ns.ids.remove(entry_id).expect("entry is in its namespace");
        let slot = ns.slots.remove(&seq).expect("id index names a live slot");
        if let Some(key) = &slot.key {
            if ns.keys.get(key) == Some(&seq) {
                ns.keys.remove(key);
            }
        }
        self.owner.remove(entry_id);
        if ns.slots.is_empty() {
            let created = ns.created;
            self.namespaces.remove(namespace);
            self.order.remove(&created);
        }
        slot.payload
    }

    /// Inserts or replaces one entry (see the module documentation for the rules); returns
    /// the payloads it displaced: the entry's previous payload and any entry whose key it took.
    pub fn save(
        &mut self,
        namespace: K,
        entry_id: K,
        key: Option<K>,
        expires_at: Option<f64>,
        payload: T,
    ) -> Vec<T> {
        let mut displaced = Vec::new();
        if let Some(owner) = self.owner.get(&entry_id) {
            if *owner != namespace {
                let owner = owner.clone();
                displaced.push(self.drop_entry(&owner, &entry_id));
            }
        }
        self.ensure(&namespace);
        if let Some(key) = &key {
            let ns = &self.namespaces[&namespace];
            if let Some(&holder) = ns.keys.get(key) {
                if ns.ids.get(&entry_id) != Some(&holder) {
                    let holder_id = ns.slots[&holder].entry_id.clone();
                    displaced.push(self.drop_entry(&namespace, &holder_id));
                    // The holder may have been the namespace's last entry.
                    self.ensure(&namespace);
                }
            }
        }
        let existing = self.namespaces[&namespace].ids.get(&entry_id).copied();
        let seq = match existing {
            None => {
                let seq = self.seq();
                let ns = self.namespaces.get_mut(&namespace).expect("ensured above");
                ns.ids.insert(entry_id.clone(), seq);
                ns.slots.insert(
                    seq,
                    Slot {
                        entry_id: entry_id.clone(),
                        key: key.clone(),
                        expires_at,
                        payload,
                    },
                );
                self.owner.insert(entry_id, namespace.clone());
                seq
            }
            Some(seq) => {
                let ns = self.namespaces.get_mut(&namespace).expect("ensured above");
                let slot = ns.slots.get_mut(&seq).expect("id index names a live slot");
                if let Some(old) = &slot.key {
                    if key.as_ref() != Some(old) {
                        ns.keys.remove(old);
                    }
                }
                slot.key.clone_from(&key);
                slot.expires_at = expires_at;
                displaced.push(std::mem::replace(&mut slot.payload, payload));
                seq
            }
        };
        if let Some(key) = key {
            let ns = self.namespaces.get_mut(&namespace).expect("ensured above");
            ns.keys.insert(key, seq);
        }
        displaced
    }

    /// Unexpired payloads of a namespace, in insertion order.
    pub fn load(&self, namespace: &K, now: f64) -> impl Iterator<Item = &T> {
        self.namespaces
            .get(namespace)
            .into_iter()
            .flat_map(|ns| ns.slots.values())
            .filter(move |slot| live(slot.expires_at, now))
            .map(|slot| &slot.payload)
    }

    /// The unexpired payload holding `key`, if any.
    pub fn load_by_key(&self, namespace: &K, key: &K, now: f64) -> Option<&T> {
        let ns = self.namespaces.get(namespace)?;
        let slot = &ns.slots[ns.keys.get(key)?];
        live(slot.expires_at, now).then_some(&slot.payload)
    }

    /// The unexpired payload of `entry_id` in this namespace, if any.
    pub fn load_by_id(&self, namespace: &K, entry_id: &K, now: f64) -> Option<&T> {
        let ns = self.namespaces.get(namespace)?;
        let slot = &ns.slots[ns.ids.get(entry_id)?];
        live(slot.expires_at, now).then_some(&slot.payload)
    }

    /// Removes an entry of this namespace; its payload if there was one.
    pub fn delete(&mut self, namespace: &K, entry_id: &K) -> Option<T> {
        let held = self.namespaces.get(namespace)?.ids.contains_key(entry_id);
        held.then(|| self.drop_entry(namespace, entry_id))
    }

    /// Removes every entry of a namespace (expired ones too); their payloads.
    pub fn clear(&mut self, namespace: &K) -> Vec<T> {
        let Some(ns) = self.namespaces.remove(namespace) else {
            return Vec::new();
        };
        self.order.remove(&ns.created);
        ns.slots
            .into_values()
            .map(|slot| {
                self.owner.remove(&slot.entry_id);
                slot.payload
            })
            .collect()
    }

    /// Removes expired entries everywhere; their payloads.
    pub fn cleanup_expired(&mut self, now: f64) -> Vec<T> {
        let doomed: Vec<(K, K)> = self
            .order
            .values()
            .flat_map(|name| {
                self.namespaces[name]
                    .slots
                    .values()
                    .filter(|slot| !live(slot.expires_at, now))
                    .map(move |slot| (name.clone(), slot.entry_id.clone()))
            })
            .collect();
        doomed
            .into_iter()
            .map(|(name, entry_id)| self.drop_entry(&name, &entry_id))
            .collect()
    }

    /// Namespaces that hold at least one entry, in creation order.
    pub fn namespaces(&self) -> impl Iterator<Item = &K> {
        self.order.values()
    }

    /// Number of entries, expired ones included.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Table = MemoryTable<&'static str>;

    fn s(x: &str) -> String {
        x.to_owned()
    }

    fn save(
        t: &mut Table,
        ns: &str,
        id: &str,
        key: Option<&str>,
        exp: Option<f64>,
        p: &'static str,
    ) -> Vec<&'static str> {
        t.save(s(ns), s(id), key.map(s), exp, p)
    }

    fn load(t: &Table, ns: &str, now: f64) -> Vec<&'static str> {
        t.load(&s(ns), now).copied().collect()
    }

    fn names(t: &Table) -> Vec<String> {
        t.namespaces().cloned().collect()
    }

    #[test]
    fn replace_keeps_position_and_returns_old_payload() {
        let mut t = Table::new();
        save(&mut t, "a", "1", None, None, "one");
        save(&mut t, "a", "2", None, None, "two");
        assert_eq!(save(&mut t, "a", "1", None, None, "uno"), vec!["one"]);
        assert_eq!(load(&t, "a", 0.0), vec!["uno", "two"]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn key_is_unique_within_namespace() {
        let mut t = Table::new();
        save(&mut t, "a", "1", Some("k"), None, "one");
        save(&mut t, "a", "2", None, None, "two");
        assert_eq!(
            save(&mut t, "a", "3", Some("k"), None, "three"),
            vec!["one"]
        );
        assert_eq!(load(&t, "a", 0.0), vec!["two", "three"]);
        assert_eq!(t.load_by_key(&s("a"), &s("k"), 0.0), Some(&"three"));
        // Changing an entry's key frees the old one.
        save(&mut t, "a", "3", Some("j"), None, "three");
        assert_eq!(t.load_by_key(&s("a"), &s("k"), 0.0), None);
        assert_eq!(t.load_by_key(&s("a"), &s("j"), 0.0), Some(&"three"));
    }

    #[test]
    fn entry_moves_across_namespaces_to_the_end() {
        let mut t = Table::new();
        save(&mut t, "a", "1", Some("k"), None, "one");
        save(&mut t, "b", "2", None, None, "two");
        save(&mut t, "b", "1", Some("k"), None, "one-b");
        assert_eq!(names(&t), vec!["b"]);
        assert_eq!(load(&t, "b", 0.0), vec!["two", "one-b"]);
        assert_eq!(t.load_by_key(&s("a"), &s("k"), 0.0), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn namespace_emptied_by_key_takeover_moves_to_the_end() {
        let mut t = Table::new();
        save(&mut t, "a", "1", Some("k"), None, "one");
        save(&mut t, "b", "2", None, None, "two");
        save(&mut t, "a", "3", Some("k"), None, "three");
        assert_eq!(names(&t), vec!["b", "a"]);
    }

    #[test]
    fn expired_entries_are_hidden_but_hold_their_key() {
        let mut t = Table::new();
        save(&mut t, "a", "1", Some("k"), Some(10.0), "one");
        save(&mut t, "a", "2", None, Some(f64::NAN), "nan");
        assert_eq!(load(&t, "a", 5.0), vec!["one"]);
        assert_eq!(load(&t, "a", 10.0), Vec::<&str>::new());
        assert_eq!(t.load_by_key(&s("a"), &s("k"), 10.0), None);
        assert_eq!(t.cleanup_expired(10.0), vec!["one", "nan"]);
        assert!(t.is_empty());
        assert_eq!(names(&t), Vec::<String>::new());
    }

    #[test]
    fn delete_and_clear() {
        let mut t = Table::new();
        save(&mut t, "a", "1", Some("k"), None, "one");
        save(&mut t, "a", "2", None, Some(0.0), "two");
        save(&mut t, "b", "3", None, None, "three");
        assert_eq!(t.delete(&s("b"), &s("1")), None);
        assert_eq!(t.delete(&s("a"), &s("1")), Some("one"));
        assert_eq!(t.load_by_key(&s("a"), &s("k"), 0.0), None);
        assert_eq!(t.clear(&s("a")), vec!["two"]);
        assert_eq!(t.clear(&s("a")), Vec::<&str>::new());
        assert_eq!(names(&t), vec!["b"]);
        assert_eq!(t.len(), 1);
        // The cleared entry id is free to be used again.
        save(&mut t, "c", "2", None, None, "again");
        assert_eq!(names(&t), vec!["b", "c"]);
    }
}
