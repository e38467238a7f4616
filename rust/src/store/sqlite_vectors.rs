//! Vectors in the SQLite file: the schema, its SQL and the scoring (the twin's
//! `memlane/_pure/sqlite_vectors.py`, whose constants a test holds equal to these).
//!
//! Invariants:
//! * `memory_vectors` holds at most one vector per entry, under the entry's `seq`, with its
//!   model, dimensions, the digest of the search text it was made from and its floats
//!   (float32 little-endian).
//! * Triggers drop an entry's vector when the entry is deleted (delete, clear, cleanup, a key
//!   taken over, a move to another namespace) or its search text changes, inside the writing
//!   statement's transaction, so every writer keeps the table right.
//! * A vector is written only while its entry still has the text whose digest the caller
//!   checked: `ATTACH` names that text, so a text changed by another process in between never
//!   takes a vector made from the old one.
//! * A search runs in one read transaction: it brings the process's mirror of the vectors of
//!   its model and dimensions up to date from `memory_vector_changes` (see `mirror`), scores
//!   the mirror, then reads the rows of the best `limit` by `seq`. A file whose vectors
//!   predate the change log is scanned instead (only the vectors of the model and dims).

use std::sync::PoisonError;

use rusqlite::{params, Connection};

use super::sqlite::{json_strings, read_row, Row};
use crate::vectors::{dot, Candidate, Top};

pub mod mirror;

/// The vectors table, its triggers and the change log mirrors follow, created once per file
/// (the twin's `VECTOR_SCHEMA`).
pub const VECTOR_SCHEMA: &str = "
CREATE TABLE memory_vectors (
    seq INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    digest TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX memory_vectors_model ON memory_vectors (model, dims);
CREATE TRIGGER memory_vectors_delete AFTER DELETE ON memory_entries
BEGIN
    DELETE FROM memory_vectors WHERE seq = old.seq;
END;
CREATE TRIGGER memory_vectors_update AFTER UPDATE OF metadata ON memory_entries
WHEN (CASE WHEN json_valid(old.metadata) THEN json_extract(old.metadata, '$.search_text') END)
    IS NOT (CASE WHEN json_valid(new.metadata) THEN json_extract(new.metadata, '$.search_text') END)
BEGIN
    DELETE FROM memory_vectors WHERE seq = old.seq;
END;
CREATE TABLE memory_vector_changes (
    gen INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER NOT NULL
);
CREATE TRIGGER memory_vector_changes_insert AFTER INSERT ON memory_vectors
BEGIN
    INSERT INTO memory_vector_changes (seq) VALUES (new.seq);
END;
CREATE TRIGGER memory_vector_changes_update AFTER UPDATE ON memory_vectors
BEGIN
    INSERT INTO memory_vector_changes (seq) SELECT old.seq UNION SELECT new.seq;
END;
CREATE TRIGGER memory_vector_changes_delete AFTER DELETE ON memory_vectors
BEGIN
    INSERT INTO memory_vector_changes (seq) VALUES (old.seq);
END;
CREATE TRIGGER memory_vector_changes_entry AFTER UPDATE OF namespace, importance, expires_at
ON memory_entries
WHEN (old.namespace IS NOT new.namespace OR old.importance IS NOT new.importance
        OR old.expires_at IS NOT new.expires_at)
    AND EXISTS (SELECT 1 FROM memory_vectors WHERE seq = new.seq)
BEGIN
    INSERT INTO memory_vector_changes (seq) VALUES (new.seq);
END;
CREATE TRIGGER memory_vector_changes_pruned AFTER INSERT ON memory_vector_changes
WHEN new.gen % 1024 = 0
BEGIN
    DELETE FROM memory_vector_changes WHERE gen <= new.gen - 65536;
END;
";

/// What a read-only open of a file from before vectors reads instead: an empty table in the
/// connection's temporary schema (the twin's `READ_ONLY_VECTORS`), the file untouched.
pub const READ_ONLY_VECTORS: &str = "CREATE TEMP TABLE memory_vectors (
    seq INTEGER PRIMARY KEY, model TEXT, dims INTEGER, digest TEXT, vector BLOB
)";

/// Search texts of unexpired entries: namespace, entry ids (JSON array), now.
pub const SEARCH_TEXTS: &str = "
SELECT e.entry_id, json_extract(e.metadata, '$.search_text') FROM memory_entries AS e
WHERE e.namespace = ? AND e.entry_id IN (SELECT value FROM json_each(?))
    AND (e.expires_at IS NULL OR e.expires_at > ?)
    AND json_type(CASE WHEN json_valid(e.metadata) THEN e.metadata END, '$.search_text') = 'text'
";

/// Attaches a vector: model, dims, digest, blob, namespace, entry id, now, the text checked.
pub const ATTACH: &str = "
INSERT OR REPLACE INTO memory_vectors (seq, model, dims, digest, vector)
SELECT e.seq, ?, ?, ?, ? FROM memory_entries AS e
WHERE e.namespace = ? AND e.entry_id = ? AND (e.expires_at IS NULL OR e.expires_at > ?)
    AND json_type(CASE WHEN json_valid(e.metadata) THEN e.metadata END, '$.search_text') = 'text'
    AND json_extract(e.metadata, '$.search_text') = ?
";

/// The vectors a search scores: model, dims, namespaces (JSON array), now, min importance.
pub const CANDIDATES: &str = "
SELECT e.seq, e.importance, v.vector FROM memory_vectors AS v
JOIN memory_entries AS e ON e.seq = v.seq
WHERE v.model = ? AND v.dims = ? AND e.namespace IN (SELECT value FROM json_each(?))
    AND (e.expires_at IS NULL OR e.expires_at > ?) AND e.importance >= ?
";

/// One row by its `seq`.
pub const BY_SEQ: &str = "
SELECT entry_id, scope, key, content, metadata, created_at, expires_at, importance, version
FROM memory_entries WHERE seq = ?
";

/// 1 when the file has the change log a mirror follows (a file given vectors before the log
/// existed has not: it is scanned).
pub const HAS_CHANGES: &str = "
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'memory_vector_changes'
";

/// Names the connection's mirror: a random id in the connection's own temporary schema
/// (never the file), so a new connection, even to a file made again at the same path or to
/// another in-memory database, never takes an old connection's mirror.
pub const MIRROR_ID: &str = "
CREATE TEMP TABLE IF NOT EXISTS memory_vector_mirror AS SELECT lower(hex(randomblob(16))) AS id
";

/// Reads the connection's mirror id.
pub const MIRROR_ID_READ: &str = "
SELECT id FROM temp.memory_vector_mirror
";

/// The first and last positions of the file's change log.
pub const CHANGES_STATE: &str = "
SELECT (SELECT min(gen) FROM memory_vector_changes), (SELECT max(gen) FROM memory_vector_changes)
";

/// Every vector of a model and dimensions, with its entry's filters: model, dims.
pub const MIRROR_LOAD: &str = "
SELECT v.seq, v.vector, e.namespace, e.importance, e.expires_at FROM memory_vectors AS v
JOIN memory_entries AS e ON e.seq = v.seq
WHERE v.model = ? AND v.dims = ?
";

/// Each entry changed after a log position, with its vector of a model and dimensions if it
/// has one now: position, model, dims.
pub const MIRROR_CHANGES: &str = "
SELECT c.seq, v.vector, e.namespace, e.importance, e.expires_at
FROM (SELECT DISTINCT seq FROM memory_vector_changes WHERE gen > ?) AS c
LEFT JOIN memory_vectors AS v ON v.seq = c.seq AND v.model = ? AND v.dims = ?
LEFT JOIN memory_entries AS e ON e.seq = v.seq
";

/// Entries to embed, oldest first: namespaces (JSON array), now, model, limit.
pub const MISSING: &str = "
SELECT e.entry_id, e.scope, e.key, e.content, e.metadata, e.created_at, e.expires_at,
    e.importance, e.version
FROM memory_entries AS e
WHERE e.namespace IN (SELECT value FROM json_each(?)) AND (e.expires_at IS NULL OR e.expires_at > ?)
    AND json_type(CASE WHEN json_valid(e.metadata) THEN e.metadata END, '$.search_text') = 'text'
    AND NOT EXISTS (SELECT 1 FROM memory_vectors AS v WHERE v.seq = e.seq AND v.model = ?)
ORDER BY e.seq LIMIT ?
";

/// A vector to attach: entry id, the search text its digest was checked against, the
/// digest, the float32 little-endian bytes.
pub type Attach<B> = (String, String, String, B);

/// Whether the file has the vectors table.
pub fn has_vectors(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE name = 'memory_vectors'",
        [],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// (entry id, search text) of the unexpired entries among `entry_ids` that have one.
pub fn search_texts(
    conn: &Connection,
    namespace: &str,
    entry_ids: &[String],
    now: f64,
) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare_cached(SEARCH_TEXTS)?;
    let found = stmt.query_map(params![namespace, json_strings(entry_ids), now], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })?;
    found.collect()
}

/// Attaches each vector whose entry still has the checked text; how many. The caller holds
/// the write transaction.
pub fn save_vectors<B: AsRef<[u8]>>(
    conn: &Connection,
    namespace: &str,
    model: &str,
    dims: i64,
    items: &[Attach<B>],
    now: f64,
) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(ATTACH)?;
    let mut attached = 0;
    for (entry_id, text, digest, blob) in items {
        attached += stmt.execute(params![
            model,
            dims,
            digest,
            blob.as_ref(),
            namespace,
            entry_id,
            now,
            text
        ])?;
    }
    Ok(attached)
}

/// (seq, score) of the best `limit` by reading every candidate blob: the search of a file
/// without the change log.
fn scan(
    conn: &Connection,
    namespaces: &[String],
    model: &str,
    query: &[f32],
    limit: usize,
    min_importance: f64,
    now: f64,
) -> rusqlite::Result<Vec<(i64, f64)>> {
    let mut stmt = conn.prepare_cached(CANDIDATES)?;
    let mut rows = stmt.query(params![
        model,
        i64::try_from(query.len()).unwrap_or(i64::MAX),
        json_strings(namespaces),
        now,
        min_importance
    ])?;
    let mut floats = vec![0.0f32; query.len()];
    let mut top = Top::new(limit);
    let mut seqs: Vec<i64> = Vec::new();
    while let Some(row) = rows.next()? {
        let blob = row.get_ref(2)?.as_blob()?;
        // A blob of another length was not written by memlane: it is not a vector.
        if blob.len() != 4 * query.len() {
            continue;
        }
        for (f, bytes) in floats.iter_mut().zip(blob.chunks_exact(4)) {
            *f = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        let seq: i64 = row.get(0)?;
        top.offer(Candidate {
            score: f64::from(dot(&floats, query)),
            importance: row.get(1)?,
            // AUTOINCREMENT rowids are positive: the cast keeps their order.
            seq: seq as u64,
            row: seqs.len(),
        });
        seqs.push(seq);
    }
    Ok(top
        .into_best_first()
        .into_iter()
        .map(|best| (seqs[best.row], best.score))
        .collect())
}

fn file_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<mirror::FileRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get::<_, Option<f64>>(3)?.unwrap_or(0.0),
        row.get(4)?,
    ))
}

/// (seq, score) of the best `limit` from the process's mirror, first brought to the snapshot
/// of the caller's read transaction (see `mirror`).
fn mirrored(
    conn: &Connection,
    namespaces: &[String],
    model: &str,
    query: &[f32],
    limit: usize,
    min_importance: f64,
    now: f64,
) -> rusqlite::Result<Vec<(i64, f64)>> {
    let (first, last): (Option<i64>, Option<i64>) = conn
        .prepare_cached(CHANGES_STATE)?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let last = last.unwrap_or(0);
    let dims = i64::try_from(query.len()).unwrap_or(i64::MAX);
    let id: String = conn
        .prepare_cached(MIRROR_ID_READ)?
        .query_row([], |row| row.get(0))?;
    let shared = mirror::mirror_for(&id, model, query.len());
    // Every change is completed before the lock is released, or the mirror is reloaded: a
    // panic inside cannot leave it half-applied at a position it claims.
    let mut mirror = shared.lock().unwrap_or_else(PoisonError::into_inner);
    match mirror.gen {
        Some(gen) if last >= gen && first.is_none_or(|f| f <= gen + 1) => {
            if last > gen {
                let mut stmt = conn.prepare_cached(MIRROR_CHANGES)?;
                let rows = stmt
                    .query_map(params![gen, model, dims], file_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                mirror.apply(rows, last);
            }
        }
        _ => {
            mirror.gen = None;
            let mut stmt = conn.prepare_cached(MIRROR_LOAD)?;
            let rows = stmt
                .query_map(params![model, dims], file_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            mirror.load(rows, last);
        }
    }
    Ok(mirror.search(namespaces, query, limit, min_importance, now))
}

/// The rows nearest `query` (dot product with their vector of `model` and `query.len()`
/// dims) among those of `namespaces` unexpired at `now` with `importance >= min_importance`:
/// best first, then importance, then the oldest; at most `limit`. One read transaction: the
/// mirror is brought to its snapshot, and the best rows are read from the same one.
pub fn vector_search(
    conn: &Connection,
    namespaces: &[String],
    model: &str,
    query: &[f32],
    limit: usize,
    min_importance: f64,
    now: f64,
) -> rusqlite::Result<Vec<(Row, f64)>> {
    conn.execute_batch(MIRROR_ID)?;
    conn.execute_batch("BEGIN")?;
    let found = (|| {
        let logged: i64 = conn
            .prepare_cached(HAS_CHANGES)?
            .query_row([], |row| row.get(0))?;
        let best = if logged == 1 {
            mirrored(conn, namespaces, model, query, limit, min_importance, now)?
        } else {
            scan(conn, namespaces, model, query, limit, min_importance, now)?
        };
        let mut by_seq = conn.prepare_cached(BY_SEQ)?;
        let mut hits = Vec::new();
        for (seq, score) in best {
            let mut rows = by_seq.query(params![seq])?;
            if let Some(row) = rows.next()? {
                hits.push((read_row(row)?, score));
            }
        }
        Ok(hits)
    })();
    // A read transaction: ending it either way releases the snapshot.
    conn.execute_batch("COMMIT")?;
    found
}

/// Unexpired rows of `namespaces` with a search text and no vector of `model`, in insertion
/// order, at most `limit`.
pub fn missing_vectors(
    conn: &Connection,
    namespaces: &[String],
    model: &str,
    limit: i64,
    now: f64,
) -> rusqlite::Result<Vec<Row>> {
    let mut stmt = conn.prepare_cached(MISSING)?;
    let rows = stmt.query_map(
        params![json_strings(namespaces), now, model, limit],
        read_row,
    )?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn twin_constant(name: &str) -> &'static str {
        let twin = include_str!("../../../python/memlane/_pure/sqlite_vectors.py");
        let opening = format!("\n{name} = \"\"\"");
        let start = twin.find(&opening).expect("twin defines the constant") + opening.len();
        let len = twin[start..]
            .find("\"\"\"")
            .expect("the constant is closed");
        &twin[start..start + len]
    }

    #[test]
    fn the_mirrors_sql_is_the_twins() {
        for (name, sql) in [
            ("HAS_CHANGES", HAS_CHANGES),
            ("MIRROR_ID", MIRROR_ID),
            ("MIRROR_ID_READ", MIRROR_ID_READ),
            ("CHANGES_STATE", CHANGES_STATE),
            ("MIRROR_LOAD", MIRROR_LOAD),
            ("MIRROR_CHANGES", MIRROR_CHANGES),
        ] {
            assert_eq!(twin_constant(name), sql, "{name}");
        }
        let twin = include_str!("../../../python/memlane/_pure/sqlite_mirror.py");
        let kept = format!("\nKEPT_MIRRORS = {}\n", mirror::KEPT_MIRRORS);
        assert!(twin.contains(&kept));
    }

    #[test]
    fn a_search_sees_every_later_write_of_another_connection() {
        let dir = std::env::temp_dir().join(format!("memlane-mirror-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("v.sqlite3");
        let _ = std::fs::remove_file(&path);
        let table = super::super::sqlite::SqliteTable::open(&path).unwrap();
        let other = Connection::open(&path).unwrap();
        other
            .busy_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        let ns = vec!["a".to_owned()];
        let blob = |x: f32, y: f32| [x.to_le_bytes(), y.to_le_bytes()].concat();
        for round in 1..=4i64 {
            other
                .execute(
                    "INSERT INTO memory_entries (entry_id, namespace, scope, content, created_at) \
                     VALUES (?, 'a', 'long_term', '1', 'x')",
                    params![format!("e{round}")],
                )
                .unwrap();
            other
                .execute(
                    "INSERT INTO memory_vectors (seq, model, dims, digest, vector) \
                     SELECT seq, 'm', 2, 'd', ? FROM memory_entries WHERE entry_id = ?",
                    params![blob(1.0, 0.0), format!("e{round}")],
                )
                .unwrap();
            if round > 2 {
                other
                    .execute("DELETE FROM memory_entries WHERE entry_id = 'e1'", [])
                    .unwrap();
                other
                    .execute(
                        "UPDATE memory_entries SET importance = 0.1 WHERE entry_id = 'e2'",
                        [],
                    )
                    .unwrap();
            }
            let found = table
                .vector_search(&ns, "m", &[1.0, 0.0], 10, 0.2, 0.0)
                .unwrap();
            let expected = if round > 2 { round - 2 } else { round };
            assert_eq!(
                found.len(),
                usize::try_from(expected).unwrap(),
                "round {round}"
            );
        }
        drop(table);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
