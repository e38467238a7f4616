//! The SQLite store table: one file, WAL, every call one transaction.
//!
//! Twin of `SqliteTable` in `memlane/_pure/store.py`. The schema, the PRAGMAs and every SQL
//! statement are the twin's, so either implementation can open a file the other wrote and the
//! two agree row for row. Values are bound and read as plain SQLite values (`Value`), not as
//! typed fields, so that odd inputs are stored exactly as Python's `sqlite3` stores them.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{params_from_iter, Connection, OpenFlags, ToSql};

/// The on-disk schema, byte for byte the twin's `SCHEMA` (a unit test compares them).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memory_entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    entry_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    expires_at REAL,
    importance REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1)
);
CREATE INDEX IF NOT EXISTS memory_entries_namespace ON memory_entries (namespace, seq);
CREATE UNIQUE INDEX IF NOT EXISTS memory_entries_namespace_key
    ON memory_entries (namespace, key) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_entries_expires_at
    ON memory_entries (expires_at) WHERE expires_at IS NOT NULL;
";

/// WAL with synchronous=NORMAL: durable across process crashes, one fsync per checkpoint.
pub const PRAGMAS: [&str; 3] = [
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=30000",
];

/// The columns of a [`Row`], in order.
pub const COLUMNS: [&str; 8] = [
    "entry_id",
    "scope",
    "key",
    "content",
    "metadata",
    "created_at",
    "expires_at",
    "importance",
];

/// A persisted entry: entry_id, scope, key, content JSON, metadata JSON, created_at ISO,
/// expires_at (Unix seconds or NULL), importance.
pub type Row = [Value; 8];

const LOAD: &str = "SELECT entry_id, scope, key, content, metadata, created_at, expires_at, importance \
    FROM memory_entries WHERE namespace = ? AND (expires_at IS NULL OR expires_at > ?) ORDER BY seq";
const LOAD_BY_KEY: &str =
    "SELECT entry_id, scope, key, content, metadata, created_at, expires_at, importance \
    FROM memory_entries WHERE namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)";
const DELETE_KEY_HOLDER: &str =
    "DELETE FROM memory_entries WHERE namespace = ? AND key = ? AND entry_id != ?";
const DELETE_MOVED: &str = "DELETE FROM memory_entries WHERE entry_id = ? AND namespace != ?";
const UPSERT: &str = "INSERT INTO memory_entries (namespace, entry_id, scope, key, content, metadata, created_at, expires_at, importance) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
    ON CONFLICT (entry_id) DO UPDATE SET scope = excluded.scope, key = excluded.key, \
    content = excluded.content, metadata = excluded.metadata, \
    created_at = excluded.created_at, expires_at = excluded.expires_at, \
    importance = excluded.importance";

/// A failed table operation.
#[derive(Debug)]
pub enum Error {
    /// The database file's parent directories could not be created.
    Io(std::io::Error),
    /// SQLite refused the operation.
    Sqlite(rusqlite::Error),
    /// A TEXT value that is not UTF-8 (only a foreign writer can store one).
    NotUtf8 { column: &'static str, text: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => e.fmt(f),
            Self::Sqlite(e) => e.fmt(f),
            // Python's sqlite3 message, word for word.
            Self::NotUtf8 { column, text } => {
                write!(
                    f,
                    "Could not decode to UTF-8 column '{column}' with text '{text}'"
                )
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

fn read_value(value: ValueRef<'_>, column: &'static str) -> Result<Value, Error> {
    Ok(match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Integer(i),
        ValueRef::Real(r) => Value::Real(r),
        ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => Value::Text(text.to_owned()),
            Err(_) => {
                let text = String::from_utf8_lossy(bytes).into_owned();
                return Err(Error::NotUtf8 { column, text });
            }
        },
        ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
    })
}

fn read_row(row: &rusqlite::Row<'_>) -> Result<Row, Error> {
    let mut out: Row = std::array::from_fn(|_| Value::Null);
    for (i, (slot, column)) in out.iter_mut().zip(COLUMNS).enumerate() {
        *slot = read_value(row.get_ref(i)?, column)?;
    }
    Ok(out)
}

/// The SQLite store on one connection. Not `Sync`: share it behind a mutex.
#[derive(Debug)]
pub struct SqliteTable {
    conn: Connection,
}

/// Runs `op`, retrying for up to 30 s while the database is locked. Switching a fresh file to
/// WAL takes a lock that SQLite's busy handler does not wait for, so processes opening the
/// same new file at once would otherwise fail with "database is locked" (the twin retries
/// the same way).
fn with_lock_retry<T>(mut op: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match op() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

impl SqliteTable {
    /// Opens (creating if missing) the database at `path` and its parent directories;
    /// `":memory:"` is an in-memory database.
    pub fn open(path: &Path) -> Result<Self, Error> {
        if path != Path::new(":memory:") {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
        }
        // No SQLITE_OPEN_URI: like Python's sqlite3.connect, "file:..." is a plain file name.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        // The twin connects with timeout=30 before running its PRAGMAs.
        conn.busy_timeout(Duration::from_secs(30))?;
        for pragma in PRAGMAS {
            with_lock_retry(|| conn.execute_batch(pragma))?;
        }
        conn.execute_batch(SCHEMA)?;
        Ok(Self { conn })
    }

    fn upsert(&self, namespace: &dyn ToSql, row: &Row) -> Result<(), Error> {
        let [entry_id, _, key, ..] = row;
        if *key != Value::Null {
            self.conn.prepare_cached(DELETE_KEY_HOLDER)?.execute([
                namespace,
                key as &dyn ToSql,
                entry_id,
            ])?;
        }
        self.conn
            .prepare_cached(DELETE_MOVED)?
            .execute([entry_id as &dyn ToSql, namespace])?;
        let params = std::iter::once(namespace).chain(row.iter().map(|v| v as &dyn ToSql));
        self.conn
            .prepare_cached(UPSERT)?
            .execute(params_from_iter(params))?;
        Ok(())
    }

    /// Upserts rows in one transaction: all of them are written or none.
    ///
    /// A row may itself be an error (say, a value the caller could not convert); it aborts
    /// the batch exactly where it stands, like an SQL error would, and is returned.
    pub fn save_many<E: From<Error>>(
        &self,
        namespace: &dyn ToSql,
        rows: impl IntoIterator<Item = Result<Row, E>>,
    ) -> Result<(), E> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(Error::from)?;
        let outcome = rows
            .into_iter()
            .try_for_each(|row| self.upsert(namespace, &row?).map_err(E::from));
        if let Err(e) = outcome {
            self.conn.execute_batch("ROLLBACK").map_err(Error::from)?;
            return Err(e);
        }
        self.conn.execute_batch("COMMIT").map_err(Error::from)?;
        Ok(())
    }

    /// Upserts one row atomically.
    pub fn save(&self, namespace: &dyn ToSql, row: Row) -> Result<(), Error> {
        self.save_many(namespace, [Ok(row)])
    }

    /// Unexpired rows of a namespace, in insertion order.
    pub fn load(&self, namespace: &dyn ToSql, now: &dyn ToSql) -> Result<Vec<Row>, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD)?;
        let mut rows = stmt.query([namespace, now])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(read_row(row)?);
        }
        Ok(out)
    }

    /// The unexpired row holding `key`, if any.
    pub fn load_by_key(
        &self,
        namespace: &dyn ToSql,
        key: &dyn ToSql,
        now: &dyn ToSql,
    ) -> Result<Option<Row>, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD_BY_KEY)?;
        let mut rows = stmt.query([namespace, key, now])?;
        rows.next()?.map(read_row).transpose()
    }

    /// Removes an entry of this namespace; whether there was one.
    pub fn delete(&self, namespace: &dyn ToSql, entry_id: &dyn ToSql) -> Result<bool, Error> {
        let mut stmt = self
            .conn
            .prepare_cached("DELETE FROM memory_entries WHERE namespace = ? AND entry_id = ?")?;
        Ok(stmt.execute([namespace, entry_id])? > 0)
    }

    /// Removes every entry of a namespace; how many there were.
    pub fn clear(&self, namespace: &dyn ToSql) -> Result<usize, Error> {
        let mut stmt = self
            .conn
            .prepare_cached("DELETE FROM memory_entries WHERE namespace = ?")?;
        Ok(stmt.execute([namespace])?)
    }

    /// Removes expired entries everywhere; how many.
    pub fn cleanup_expired(&self, now: &dyn ToSql) -> Result<usize, Error> {
        let mut stmt = self.conn.prepare_cached(
            "DELETE FROM memory_entries WHERE expires_at IS NOT NULL AND expires_at <= ?",
        )?;
        Ok(stmt.execute([now])?)
    }

    /// Namespaces that hold at least one entry, in order of their oldest entry.
    pub fn namespaces(&self) -> Result<Vec<Value>, Error> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT namespace FROM memory_entries GROUP BY namespace ORDER BY MIN(seq)",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(read_value(row.get_ref(0)?, "namespace")?);
        }
        Ok(out)
    }

    /// Closes the connection; on failure it is handed back, still open.
    #[expect(
        clippy::result_large_err,
        reason = "the shape of rusqlite's Connection::close; a cold path, returned once"
    )]
    pub fn close(self) -> Result<(), (Self, Error)> {
        self.conn
            .close()
            .map_err(|(conn, e)| (Self { conn }, Error::Sqlite(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, key: Option<&str>, expires_at: Option<f64>, importance: f64) -> Row {
        let text = |s: &str| Value::Text(s.to_owned());
        [
            text(id),
            text("long_term"),
            key.map_or(Value::Null, text),
            text("\"content\""),
            text("{}"),
            text("2024-01-01T00:00:00+00:00"),
            expires_at.map_or(Value::Null, Value::Real),
            Value::Real(importance),
        ]
    }

    fn ids(rows: &[Row]) -> Vec<String> {
        rows.iter()
            .map(|r| match &r[0] {
                Value::Text(s) => s.clone(),
                other => panic!("entry_id {other:?}"),
            })
            .collect()
    }

    fn memory() -> SqliteTable {
        SqliteTable::open(Path::new(":memory:")).unwrap()
    }

    #[test]
    fn schema_is_the_twins_byte_for_byte() {
        let twin = include_str!("../../../python/memlane/_pure/store.py");
        let start = twin.find("SCHEMA = \"\"\"").expect("twin defines SCHEMA") + 12;
        let len = twin[start..].find("\"\"\"").expect("SCHEMA is closed");
        assert_eq!(&twin[start..start + len], SCHEMA);
        let pragmas = PRAGMAS.map(|p| format!("\"{p}\"")).join(", ");
        assert!(twin.contains(&format!("PRAGMAS = ({pragmas})")));
    }

    #[test]
    fn upsert_keeps_position_and_key_is_unique() {
        let t = memory();
        t.save(&"a", row("1", Some("k"), None, 0.5)).unwrap();
        t.save(&"a", row("2", None, None, 0.5)).unwrap();
        t.save(&"a", row("1", Some("k"), None, 0.9)).unwrap();
        assert_eq!(ids(&t.load(&"a", &0.0).unwrap()), ["1", "2"]);
        t.save(&"a", row("3", Some("k"), None, 0.5)).unwrap();
        assert_eq!(ids(&t.load(&"a", &0.0).unwrap()), ["2", "3"]);
        let found = t.load_by_key(&"a", &"k", &0.0).unwrap().unwrap();
        assert_eq!(found[0], Value::Text("3".into()));
    }

    #[test]
    fn entry_moves_across_namespaces() {
        let t = memory();
        t.save(&"a", row("1", None, None, 0.5)).unwrap();
        t.save(&"b", row("2", None, None, 0.5)).unwrap();
        t.save(&"b", row("1", None, None, 0.5)).unwrap();
        assert!(t.load(&"a", &0.0).unwrap().is_empty());
        assert_eq!(ids(&t.load(&"b", &0.0).unwrap()), ["2", "1"]);
        assert_eq!(t.namespaces().unwrap(), [Value::Text("b".into())]);
    }

    #[test]
    fn save_many_is_all_or_nothing() {
        let t = memory();
        let rows = [row("1", None, None, 0.5), row("2", None, None, 2.0)];
        let err = t.save_many::<Error>(&"a", rows.map(Ok)).unwrap_err();
        assert!(err.to_string().contains("CHECK constraint failed"), "{err}");
        assert!(t.load(&"a", &0.0).unwrap().is_empty());
        // A caller-side failure midway rolls back too, and is the error returned.
        #[derive(Debug)]
        enum Failure {
            Caller,
            Sql,
        }
        impl From<Error> for Failure {
            fn from(_: Error) -> Self {
                Self::Sql
            }
        }
        let rows = [Ok(row("1", None, None, 0.5)), Err(Failure::Caller)];
        assert!(matches!(t.save_many(&"a", rows), Err(Failure::Caller)));
        assert!(t.load(&"a", &0.0).unwrap().is_empty());
        t.save_many::<Error>(
            &"a",
            [row("1", None, None, 0.5), row("2", None, None, 1.0)].map(Ok),
        )
        .unwrap();
        assert_eq!(ids(&t.load(&"a", &0.0).unwrap()), ["1", "2"]);
    }

    #[test]
    fn expiry_delete_clear_cleanup() {
        let t = memory();
        t.save(&"a", row("1", Some("k"), Some(10.0), 0.5)).unwrap();
        t.save(&"a", row("2", None, None, 0.5)).unwrap();
        t.save(&"b", row("3", None, Some(5.0), 0.5)).unwrap();
        assert_eq!(ids(&t.load(&"a", &10.0).unwrap()), ["2"]);
        assert!(t.load_by_key(&"a", &"k", &10.0).unwrap().is_none());
        assert_eq!(t.cleanup_expired(&10.0).unwrap(), 2);
        assert!(!t.delete(&"b", &"2").unwrap());
        assert!(t.delete(&"a", &"2").unwrap());
        t.save(&"c", row("4", None, None, 0.5)).unwrap();
        assert_eq!(t.clear(&"c").unwrap(), 1);
        assert_eq!(t.clear(&"c").unwrap(), 0);
        assert!(t.namespaces().unwrap().is_empty());
    }

    #[test]
    fn file_is_created_with_parents_and_reopened() {
        let dir = std::env::temp_dir().join(format!("memlane-sqlite-{}", std::process::id()));
        let path = dir.join("nested/deeper/memory.sqlite3");
        let t = SqliteTable::open(&path).unwrap();
        t.save(&"a", row("1", None, None, 0.5)).unwrap();
        t.close().map_err(|(_, e)| e).unwrap();
        let t = SqliteTable::open(&path).unwrap();
        assert_eq!(ids(&t.load(&"a", &0.0).unwrap()), ["1"]);
        let mode: String = t
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn invalid_utf8_text_is_reported_like_python() {
        let t = memory();
        t.save(&"a", row("1", None, None, 0.5)).unwrap();
        t.conn
            .execute(
                "UPDATE memory_entries SET content = CAST(x'61ff62' AS TEXT)",
                [],
            )
            .unwrap();
        let err = t.load(&"a", &0.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Could not decode to UTF-8 column 'content' with text 'a\u{fffd}b'"
        );
    }
}
