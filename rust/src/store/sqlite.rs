//! The SQLite store table: one file, WAL, every call one transaction.
//!
//! Twin of `SqliteTable` in `memlane/_pure/store.py`. The schema, the PRAGMAs and every SQL
//! statement are the twin's, so either implementation can open a file the other wrote and the
//! two agree row for row.
//!
//! Invariants:
//! * A key is unique within a namespace (a unique index), so `save_if` compares one
//!   row's version; it reads and writes inside one `BEGIN IMMEDIATE` transaction, which holds
//!   the file's write lock from its start, so no other connection or process writes between.
//! * `key` has the default BINARY collation: keys order by UTF-8 bytes, which is code-point
//!   order, the order of Python's `str`. `load_range` walks the (namespace, key) index.
//! * A file made before the `version` column existed gains it on open (rows become version 0).
//! * `memory_search` (FTS5) holds, under each entry's `seq` as rowid, the entry's
//!   `metadata.search_text` when that is a JSON string, and nothing else. Triggers on
//!   `memory_entries` keep it so inside the writing statement's own transaction, so every
//!   writer (both implementations, and versions of memlane that predate the index) keeps it
//!   right; a file made before the index existed gets it, back-filled, on open.
//! * The index is contentless (`content = ''`): the texts live in the entries' metadata only,
//!   so a searchable write dirties no page of a copy, and the triggers remove a text by
//!   giving FTS5 the very text they indexed (the `'delete'` command), which the metadata
//!   still holds when they fire. A file whose index kept copies is rebuilt once, on open.

use std::fmt::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags};

use super::sqlite_checkpoint::Checkpointer;
use super::sqlite_vectors::{self, Attach};

/// The on-disk schema, byte for byte the twin's `SCHEMA` (a unit test compares them).
///
/// `seq` has no `AUTOINCREMENT`: that keyword costs every insert a write of the
/// `sqlite_sequence` page (one of about eight a turn's commit writes), and buys only that a
/// deleted highest `seq` is never handed out again. Reusing it is safe because everything
/// keyed on `seq` leaves with its row in the deleting statement: the search index and the
/// vector by their delete triggers, and the vector change log records that `seq`, so a
/// mirror re-reads it and finds the new row's vector or none. Files made with the keyword
/// keep it (`CREATE TABLE IF NOT EXISTS`); both kinds behave alike.
///
/// One index serves a namespace's keys and its order: `(namespace, key)`, unique (SQLite
/// counts NULLs as distinct, so unkeyed entries never collide) and holding every row, so
/// its entries are `(namespace, key, seq)` and a namespace's `seq`s are read from it alone
/// (see `LOAD`). A second index on `(namespace, seq)` cost every write one more page (and
/// its splits), ~1.7 of the ~7.6 WAL frames a turn's commit wrote.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memory_entries (
    seq INTEGER PRIMARY KEY,
    entry_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    expires_at REAL,
    importance REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    version INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS memory_entries_namespace_key
    ON memory_entries (namespace, key);
CREATE INDEX IF NOT EXISTS memory_entries_expires_at
    ON memory_entries (expires_at) WHERE expires_at IS NOT NULL;
";

/// Brings a file made before versions existed to `SCHEMA` (the twin's `ADD_VERSION`).
pub const ADD_VERSION: &str =
    "ALTER TABLE memory_entries ADD COLUMN version INTEGER NOT NULL DEFAULT 0";

/// Brings a file made with two namespace indexes (`(namespace, seq)`, and `(namespace, key)`
/// for keyed rows only) to `SCHEMA`'s one (the twin's `ONE_KEY_INDEX`). Read-only, such a
/// file is read as it is: every statement works with either set of indexes.
pub const ONE_KEY_INDEX: &str = "
DROP INDEX IF EXISTS memory_entries_namespace;
DROP INDEX IF EXISTS memory_entries_namespace_key;
CREATE UNIQUE INDEX memory_entries_namespace_key ON memory_entries (namespace, key);
";

/// The search index, its triggers and its back-fill (the twin's `SEARCH_SCHEMA`), run once per
/// file, in the transaction that finds the index missing.
///
/// Tokens are maximal runs of Unicode letters and numbers (`categories 'L* N*'`: private-use
/// characters separate, as in `search_terms`), case-folded and with diacritics kept
/// (`remove_diacritics 0`: "café" and "cafe" are different words, as in `search_terms`).
/// Where the two can still differ: `str.casefold` folds fully ("ß" is "ss", "ﬁ" is "fi", "ς"
/// is "σ") while unicode61 only lowercases, and each follows its own Unicode version, so a
/// letter newer than SQLite's tables separates words in the index. A query term the index
/// splits into several tokens is searched as a phrase of them; one it splits into none
/// matches nothing.
///
/// `json_valid` guards every JSON call: a row whose metadata is not JSON (written by hand,
/// or damaged) is simply not searchable, instead of making writes to it, or opening the
/// file, fail.
pub const SEARCH_SCHEMA: &str = r#"
CREATE VIRTUAL TABLE memory_search USING fts5(
    text, content = '', tokenize = "unicode61 remove_diacritics 0 categories 'L* N*'"
);
CREATE TRIGGER memory_search_insert AFTER INSERT ON memory_entries
WHEN json_type(CASE WHEN json_valid(new.metadata) THEN new.metadata END, '$.search_text')
    = 'text'
BEGIN
    INSERT INTO memory_search (rowid, text)
    VALUES (new.seq, json_extract(new.metadata, '$.search_text'));
END;
CREATE TRIGGER memory_search_delete AFTER DELETE ON memory_entries
WHEN json_type(CASE WHEN json_valid(old.metadata) THEN old.metadata END, '$.search_text')
    = 'text'
BEGIN
    INSERT INTO memory_search (memory_search, rowid, text)
    VALUES ('delete', old.seq, json_extract(old.metadata, '$.search_text'));
END;
CREATE TRIGGER memory_search_update AFTER UPDATE OF metadata ON memory_entries
WHEN old.metadata IS NOT new.metadata
BEGIN
    INSERT INTO memory_search (memory_search, rowid, text)
    SELECT 'delete', old.seq, json_extract(old.metadata, '$.search_text')
    WHERE json_type(CASE WHEN json_valid(old.metadata) THEN old.metadata END, '$.search_text')
        = 'text';
    INSERT INTO memory_search (rowid, text)
    SELECT new.seq, json_extract(new.metadata, '$.search_text')
    WHERE json_type(CASE WHEN json_valid(new.metadata) THEN new.metadata END, '$.search_text')
        = 'text';
END;
INSERT INTO memory_search (rowid, text)
SELECT seq, json_extract(metadata, '$.search_text') FROM memory_entries
WHERE json_type(CASE WHEN json_valid(metadata) THEN metadata END, '$.search_text') = 'text';
"#;

/// Drops a search index that keeps its own copy of every text (files from before the index
/// was contentless); `SEARCH_SCHEMA` then builds it again from the entries (the twin's
/// `DROP_SEARCH`).
pub const DROP_SEARCH: &str = "
DROP TRIGGER memory_search_insert;
DROP TRIGGER memory_search_delete;
DROP TRIGGER memory_search_update;
DROP TABLE memory_search;
";

/// Ranked search (the twin's `SEARCH`). Parameters: the FTS5 query (see `match_query`), the
/// namespaces as a JSON array, now, the minimum importance, the limit.
///
/// `CROSS JOIN` fixes the FTS index as the outer loop, each hit then looking its entry up by
/// rowid: the planner could otherwise walk every entry of the namespaces and probe the index
/// per entry. bm25() is negative, lower is better; its corpus is the whole index (every
/// namespace, expired entries until removed), so scores order one call's hits and nothing
/// more.
pub const SEARCH: &str = "
SELECT e.entry_id, e.scope, e.key, e.content, e.metadata, e.created_at, e.expires_at,
    e.importance, e.version, -bm25(memory_search) AS score
FROM memory_search CROSS JOIN memory_entries AS e ON e.seq = memory_search.rowid
WHERE memory_search MATCH ? AND e.namespace IN (SELECT value FROM json_each(?))
    AND (e.expires_at IS NULL OR e.expires_at > ?) AND e.importance >= ?
ORDER BY score DESC, e.importance DESC, e.seq
LIMIT ?
";

/// WAL with synchronous=NORMAL: durable across process crashes, one fsync per checkpoint.
pub const PRAGMAS: [&str; 3] = [
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=30000",
];

/// A persisted entry, in column order.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub entry_id: String,
    pub scope: String,
    pub key: Option<String>,
    /// JSON text.
    pub content: String,
    /// JSON text.
    pub metadata: String,
    /// ISO 8601 text.
    pub created_at: String,
    /// Unix seconds; `None` never expires.
    pub expires_at: Option<f64>,
    pub importance: f64,
    /// Assigned by the store: 0 for a plain save, one more than expected for `save_if`.
    pub version: i64,
}

/// A row's fields borrowed from wherever they were read: a `Row`, or a `Packed` batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowRef<'a> {
    pub entry_id: &'a str,
    pub scope: &'a str,
    pub key: Option<&'a str>,
    pub content: &'a str,
    pub metadata: &'a str,
    pub created_at: &'a str,
    pub expires_at: Option<f64>,
    pub importance: f64,
    pub version: i64,
}

impl Row {
    pub fn as_ref(&self) -> RowRef<'_> {
        RowRef {
            entry_id: &self.entry_id,
            scope: &self.scope,
            key: self.key.as_deref(),
            content: &self.content,
            metadata: &self.metadata,
            created_at: &self.created_at,
            expires_at: self.expires_at,
            importance: self.importance,
            version: self.version,
        }
    }
}

impl RowRef<'_> {
    pub fn to_row(&self) -> Row {
        Row {
            entry_id: self.entry_id.to_owned(),
            scope: self.scope.to_owned(),
            key: self.key.map(str::to_owned),
            content: self.content.to_owned(),
            metadata: self.metadata.to_owned(),
            created_at: self.created_at.to_owned(),
            expires_at: self.expires_at,
            importance: self.importance,
            version: self.version,
        }
    }
}

/// Rows read into one buffer, each text field a range of it: a namespace is read with a few
/// growing allocations instead of six strings per row (made, then freed, once building
/// entries from them is done).
#[derive(Debug, Default)]
pub struct Packed {
    text: String,
    rows: Vec<PackedRow>,
}

#[derive(Debug)]
struct PackedRow {
    /// Where `entry_id`, `scope`, `key`, `content`, `metadata` and `created_at` end in `text`,
    /// each starting where the one before ends (the first at the previous row's last end).
    ends: [usize; 6],
    has_key: bool,
    expires_at: Option<f64>,
    importance: f64,
    version: i64,
}

impl Packed {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows, in the order they were read.
    pub fn iter(&self) -> impl Iterator<Item = RowRef<'_>> {
        let mut start = 0;
        self.rows.iter().map(move |row| {
            let field = |i: usize| {
                let from = if i == 0 { start } else { row.ends[i - 1] };
                &self.text[from..row.ends[i]]
            };
            let found = RowRef {
                entry_id: field(0),
                scope: field(1),
                key: if row.has_key { Some(field(2)) } else { None },
                content: field(3),
                metadata: field(4),
                created_at: field(5),
                expires_at: row.expires_at,
                importance: row.importance,
                version: row.version,
            };
            start = row.ends[5];
            found
        })
    }

    /// Appends `row` as `read_row` reads it: the same values, the same errors.
    fn push(&mut self, row: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
        let mut ends = [0; 6];
        let mut has_key = true;
        for (i, end) in ends.iter_mut().enumerate() {
            let value = row.get_ref(i)?;
            if i == 2 && value == rusqlite::types::ValueRef::Null {
                has_key = false;
            } else if let Ok(text) = value.as_str() {
                self.text.push_str(text);
            } else {
                // Not UTF-8 text: `get` says so in the words `read_row`'s `get` uses.
                row.get::<_, String>(i)?;
            }
            *end = self.text.len();
        }
        self.rows.push(PackedRow {
            ends,
            has_key,
            expires_at: row.get(6)?,
            importance: row.get(7)?,
            version: row.get(8)?,
        });
        Ok(())
    }
}

/// A namespace's rows in `seq` order: its `seq`s are read from the `(namespace, key)` index
/// alone and sorted as integers, then each row is found by `seq` in that order, so no row
/// goes through a sort (`ORDER BY seq` over the index's key order would sort whole rows).
const LOAD: &str =
    "SELECT entry_id, scope, key, content, metadata, created_at, expires_at, importance, version \
    FROM memory_entries WHERE seq IN (SELECT seq FROM memory_entries WHERE namespace = ?) \
    AND (expires_at IS NULL OR expires_at > ?) ORDER BY seq";
const LOAD_BY_KEY: &str =
    "SELECT entry_id, scope, key, content, metadata, created_at, expires_at, importance, version \
    FROM memory_entries WHERE namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)";
const LOAD_RANGE: &str =
    "SELECT entry_id, scope, key, content, metadata, created_at, expires_at, importance, version \
    FROM memory_entries WHERE namespace = ? AND key >= ? AND key < ? \
    AND (expires_at IS NULL OR expires_at > ?) ORDER BY key";
const LOAD_CONTENT_BY_KEY: &str = "SELECT entry_id, version, content FROM memory_entries \
    WHERE namespace = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)";
/// The holder of a key, live or expired: its version, whether it is live at now, whether it
/// is the entry being written. Parameters: now, the entry id, the namespace, the key.
const HOLDER: &str = "SELECT version, \
    CASE WHEN expires_at IS NULL OR expires_at > ? THEN 1 ELSE 0 END, entry_id = ? \
    FROM memory_entries WHERE namespace = ? AND key = ?";
const DELETE_KEY_HOLDER: &str =
    "DELETE FROM memory_entries WHERE namespace = ? AND key = ? AND entry_id != ?";
const DELETE_MOVED: &str = "DELETE FROM memory_entries WHERE entry_id = ? AND namespace != ?";
const UPSERT: &str = "INSERT INTO memory_entries (namespace, entry_id, scope, key, content, metadata, created_at, expires_at, importance, version) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
    ON CONFLICT (entry_id) DO UPDATE SET scope = excluded.scope, key = excluded.key, \
    content = excluded.content, metadata = excluded.metadata, \
    created_at = excluded.created_at, expires_at = excluded.expires_at, \
    importance = excluded.importance, version = excluded.version";

/// How both tables begin the message of a database holding no memlane table (the twin's
/// `NOT_A_STORE`; the Python store maps it to `NotAStoreError`).
pub const NOT_A_STORE: &str = "not a memlane store";

/// Why a read-only open refuses a memlane file it would have to migrate (the twin's
/// `OUTDATED`).
pub const OUTDATED: &str = "made by an older memlane: open it once writable to upgrade it";

/// A failed table operation.
#[derive(Debug)]
pub enum Error {
    /// The database holds no memlane table (the message begins with `NOT_A_STORE`).
    NotAStore(String),
    /// A read-only open of a memlane file made before the version column or the index.
    Outdated,
    /// The database file's parent directory could not be created.
    Io {
        directory: PathBuf,
        source: std::io::Error,
    },
    /// SQLite refused the operation, or a stored value is not of its column's type.
    Sqlite(rusqlite::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { directory, source } => write!(f, "{}: {source}", directory.display()),
            Self::NotAStore(message) => f.write_str(message),
            Self::Outdated => f.write_str(OUTDATED),
            Self::Sqlite(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

/// The FTS5 query matching any of `terms`: each one a string (`"..."`, quotes doubled), so no
/// term can be an FTS5 operator, column filter or prefix, joined by `OR`. A NUL would end the
/// query text for FTS5's parser mid-string; it separates words anyway, so it becomes a space.
pub fn match_query(terms: &[String]) -> String {
    terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"").replace('\0', " ")))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// `items` as a JSON array of strings, for `json_each`: one bound parameter whatever their
/// number, so no statement outgrows SQLite's limit on parameters.
pub(crate) fn json_strings(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => {
                    write!(out, "\\u{:04x}", u32::from(c)).expect("a String takes any write");
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

pub(crate) fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        entry_id: row.get(0)?,
        scope: row.get(1)?,
        key: row.get(2)?,
        content: row.get(3)?,
        metadata: row.get(4)?,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
        importance: row.get(7)?,
        version: row.get(8)?,
    })
}

fn packed(mut rows: rusqlite::Rows<'_>) -> Result<Packed, Error> {
    let mut out = Packed::default();
    while let Some(row) = rows.next()? {
        out.push(row)?;
    }
    Ok(out)
}

/// The SQLite store on one connection. Not `Sync`: share it behind a mutex.
#[derive(Debug)]
pub struct SqliteTable {
    /// Declared first, so dropped first: its connection closes before `conn` (see
    /// `sqlite_checkpoint`). `None` read-only or in memory.
    checkpointer: Option<Checkpointer>,
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
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Starts a write transaction, waiting (busy handler, then retries) for other writers. A
/// `BEGIN` that failed to take the lock started nothing, so it is safe to repeat.
///
/// `BEGIN` and `COMMIT` run as cached statements: `execute_batch` would parse them again on
/// every write (~1 µs of a turn's).
fn begin(conn: &Connection) -> rusqlite::Result<()> {
    with_lock_retry(|| {
        conn.prepare_cached("BEGIN IMMEDIATE")?
            .execute([])
            .map(drop)
    })
}

/// What a conditional write read of its key's holder before writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    /// Not read (an unconditional write).
    Unknown,
    /// No row holds the key, live or expired.
    Absent,
    /// The row being written holds it.
    This,
    /// Another entry holds it (live or expired).
    Other,
}

fn has_version(conn: &Connection) -> rusqlite::Result<bool> {
    let mut stmt = conn.prepare("PRAGMA table_info(memory_entries)")?;
    let mut names = stmt.query_map([], |row| row.get::<_, String>(1))?;
    names.try_fold(false, |found, name| Ok(found || name? == "version"))
}

fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE name = ?",
        [name],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

fn has_search(conn: &Connection) -> rusqlite::Result<bool> {
    has_table(conn, "memory_search")
}

/// Whether the search index keeps no copy of the texts: an FTS5 table with content keeps them
/// in its `_content` shadow table, one more page written by every searchable write.
fn has_contentless_search(conn: &Connection) -> rusqlite::Result<bool> {
    Ok(!has_table(conn, "memory_search_content")?)
}

/// Whether the file has `SCHEMA`'s one namespace index: no `(namespace, seq)` index, and a
/// `(namespace, key)` index over every row rather than keyed rows only.
fn has_one_key_index(conn: &Connection) -> rusqlite::Result<bool> {
    if has_table(conn, "memory_entries_namespace")? {
        return Ok(false);
    }
    let sql: Option<String> = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'memory_entries_namespace_key'",
            [],
            |row| row.get(0),
        )
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    Ok(sql.is_some_and(|sql| !sql.contains("WHERE")))
}

/// Runs `upgrade` unless `done` says the file already has it. Checked again inside a write
/// transaction: processes opening one old file at once all see the upgrade missing, and only
/// the first may apply it; the others wait for its commit and then find it done.
fn migrate(
    conn: &Connection,
    done: fn(&Connection) -> rusqlite::Result<bool>,
    upgrade: &str,
) -> rusqlite::Result<()> {
    if done(conn)? {
        return Ok(());
    }
    begin(conn)?;
    let applied = match done(conn) {
        Ok(true) => Ok(()),
        Ok(false) => conn.execute_batch(upgrade),
        Err(e) => Err(e),
    };
    if let Err(e) = applied {
        conn.execute_batch("ROLLBACK")?;
        return Err(e);
    }
    conn.execute_batch("COMMIT")
}

/// Refuses a database that is not a memlane store, before anything is written to it (the
/// twin's `_check_memlane`). A writable open accepts an empty database (it becomes a store)
/// and refuses one holding other tables and not memlane's; a read-only open refuses both,
/// and a memlane file it would have to migrate.
fn check_memlane(conn: &Connection, read_only: bool) -> Result<(), Error> {
    let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
    let tables = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<std::collections::BTreeSet<String>>>()?;
    if !tables.contains("memory_entries") {
        if !tables.is_empty() {
            return Err(Error::NotAStore(format!(
                "{NOT_A_STORE}: it holds another application's tables ({}), no memory_entries",
                tables.len()
            )));
        }
        if read_only {
            return Err(Error::NotAStore(format!(
                "{NOT_A_STORE}: the database is empty"
            )));
        }
        return Ok(());
    }
    if read_only && !(has_version(conn)? && has_search(conn)?) {
        return Err(Error::Outdated);
    }
    Ok(())
}

impl SqliteTable {
    /// Opens (creating if missing) the database at `path` and its parent directories;
    /// `":memory:"` is an in-memory database.
    pub fn open(path: &Path) -> Result<Self, Error> {
        Self::open_with(path, false)
    }

    /// Opens the existing database at `path` with SQLite's read-only flag: nothing is
    /// created, switched or migrated, and SQLite itself refuses every write.
    pub fn open_read_only(path: &Path) -> Result<Self, Error> {
        Self::open_with(path, true)
    }

    fn open_with(path: &Path, read_only: bool) -> Result<Self, Error> {
        if !read_only && path != Path::new(":memory:") {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                    directory: parent.to_owned(),
                    source,
                })?;
            }
        }
        // No SQLITE_OPEN_URI: like Python's sqlite3.connect, "file:..." is a plain file name.
        let flags = if read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = Connection::open_with_flags(path, flags)?;
        // The twin connects with timeout=30 before running its PRAGMAs.
        conn.busy_timeout(Duration::from_secs(30))?;
        // Another process may be switching a new file to WAL, whose lock the busy handler
        // does not wait for: retried as the PRAGMAs are.
        let mut checked = Ok(());
        with_lock_retry(|| match check_memlane(&conn, read_only) {
            Err(Error::Sqlite(e)) => Err(e),
            other => {
                checked = other;
                Ok(())
            }
        })?;
        checked?;
        if read_only {
            if !sqlite_vectors::has_vectors(&conn)? {
                conn.execute_batch(sqlite_vectors::READ_ONLY_VECTORS)?;
            }
            return Ok(Self {
                checkpointer: None,
                conn,
            });
        }
        for pragma in PRAGMAS {
            with_lock_retry(|| conn.execute_batch(pragma))?;
        }
        conn.execute_batch(SCHEMA)?;
        migrate(&conn, has_version, ADD_VERSION)?;
        migrate(&conn, has_search, SEARCH_SCHEMA)?;
        migrate(
            &conn,
            has_contentless_search,
            &format!("{DROP_SEARCH}{SEARCH_SCHEMA}"),
        )?;
        migrate(
            &conn,
            sqlite_vectors::has_vectors,
            sqlite_vectors::VECTOR_SCHEMA,
        )?;
        migrate(&conn, has_one_key_index, ONE_KEY_INDEX)?;
        Ok(Self {
            checkpointer: Checkpointer::start(path, &conn),
            conn,
        })
    }

    /// Commits the open write transaction, and counts it towards the next checkpoint.
    fn commit(&self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.committed();
        Ok(())
    }

    /// Counts a write committed by its own statement (autocommit).
    fn committed(&self) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.committed();
        }
    }

    fn upsert(&self, namespace: &str, row: &Row) -> rusqlite::Result<()> {
        self.upsert_after(namespace, row, Holder::Unknown)
    }

    /// `upsert`, given what the caller already read of the key's holder: the deletes that
    /// could find nothing are skipped (each is an index probe, ~1 µs of a turn's write).
    fn upsert_after(&self, namespace: &str, row: &Row, holder: Holder) -> rusqlite::Result<()> {
        if let Some(key) = &row.key {
            if holder == Holder::Unknown || holder == Holder::Other {
                self.conn
                    .prepare_cached(DELETE_KEY_HOLDER)?
                    .execute(params![namespace, key, row.entry_id])?;
            }
        }
        // Entry ids are unique over every namespace: the row holding this key is this entry,
        // so it is in this namespace and in no other.
        if holder != Holder::This {
            self.conn
                .prepare_cached(DELETE_MOVED)?
                .execute(params![row.entry_id, namespace])?;
        }
        self.conn.prepare_cached(UPSERT)?.execute(params![
            namespace,
            row.entry_id,
            row.scope,
            row.key,
            row.content,
            row.metadata,
            row.created_at,
            row.expires_at,
            row.importance,
            row.version,
        ])?;
        Ok(())
    }

    /// Upserts rows in one transaction: all of them are written or none.
    pub fn save_many(&self, namespace: &str, rows: &[Row]) -> Result<(), Error> {
        begin(&self.conn)?;
        if let Err(e) = rows.iter().try_for_each(|row| self.upsert(namespace, row)) {
            self.conn.execute_batch("ROLLBACK")?;
            return Err(e.into());
        }
        self.commit()?;
        Ok(())
    }

    /// Upserts one row atomically.
    pub fn save(&self, namespace: &str, row: &Row) -> Result<(), Error> {
        self.save_many(namespace, std::slice::from_ref(row))
    }

    /// Upserts `row` if the holder of its key unexpired at `now` is at `expected_version`
    /// (`None`: there is none); whether it did. One `BEGIN IMMEDIATE` transaction.
    pub fn save_if(
        &self,
        namespace: &str,
        row: &Row,
        expected_version: Option<i64>,
        now: f64,
    ) -> Result<bool, Error> {
        self.in_transaction(|| self.check_and_upsert(namespace, row, expected_version, now))
    }

    /// Several `save_if`s, in order, in one `BEGIN IMMEDIATE` transaction: each compares the
    /// holder its key has after the ones before it, as if run one by one; whether each wrote.
    /// An error rolls all of them back. Writers waiting at one moment share one commit so
    /// (group commit), each judged exactly as alone.
    pub fn save_if_many(
        &self,
        ops: &[(String, Row, Option<i64>, f64)],
    ) -> Result<Vec<bool>, Error> {
        self.in_transaction(|| {
            ops.iter()
                .map(|(namespace, row, expected_version, now)| {
                    self.check_and_upsert(namespace, row, *expected_version, *now)
                })
                .collect()
        })
    }

    /// The conditional write of `save_if`, inside the caller's transaction.
    fn check_and_upsert(
        &self,
        namespace: &str,
        row: &Row,
        expected_version: Option<i64>,
        now: f64,
    ) -> rusqlite::Result<bool> {
        let mut stmt = self.conn.prepare_cached(HOLDER)?;
        let mut found = stmt.query(params![now, row.entry_id, namespace, row.key])?;
        let (current, holder) = match found.next()? {
            None => (None, Holder::Absent),
            Some(r) => {
                let holder = if r.get(2)? {
                    Holder::This
                } else {
                    Holder::Other
                };
                (r.get::<_, bool>(1)?.then(|| r.get(0)).transpose()?, holder)
            }
        };
        drop(found);
        let won = current == expected_version;
        if won {
            self.upsert_after(namespace, row, holder)?;
        }
        Ok(won)
    }

    /// `op` in one `BEGIN IMMEDIATE` transaction, committed if it succeeds, else rolled back.
    fn in_transaction<T>(&self, op: impl FnOnce() -> rusqlite::Result<T>) -> Result<T, Error> {
        begin(&self.conn)?;
        match op() {
            Ok(value) => {
                self.commit()?;
                Ok(value)
            }
            Err(e) => {
                self.conn.execute_batch("ROLLBACK")?;
                Err(e.into())
            }
        }
    }

    /// Unexpired rows whose key is in `[start, stop)`, in key order, from the index.
    pub fn load_range(
        &self,
        namespace: &str,
        start: &str,
        stop: &str,
        now: f64,
    ) -> Result<Vec<Row>, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD_RANGE)?;
        let rows = stmt.query_map(params![namespace, start, stop, now], read_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// `load_range` into one buffer (see `Packed`).
    pub fn load_range_packed(
        &self,
        namespace: &str,
        start: &str,
        stop: &str,
        now: f64,
    ) -> Result<Packed, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD_RANGE)?;
        let rows = stmt.query(params![namespace, start, stop, now])?;
        packed(rows)
    }

    /// `load` into one buffer (see `Packed`).
    pub fn load_packed(&self, namespace: &str, now: f64) -> Result<Packed, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD)?;
        let rows = stmt.query(params![namespace, now])?;
        packed(rows)
    }

    /// Unexpired rows of a namespace, in insertion order.
    pub fn load(&self, namespace: &str, now: f64) -> Result<Vec<Row>, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD)?;
        let rows = stmt.query_map(params![namespace, now], read_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The unexpired row holding `key`, if any.
    pub fn load_by_key(&self, namespace: &str, key: &str, now: f64) -> Result<Option<Row>, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD_BY_KEY)?;
        let mut rows = stmt.query(params![namespace, key, now])?;
        Ok(rows.next()?.map(read_row).transpose()?)
    }

    /// `(entry_id, version, content)` of the unexpired row holding `key`, the content as the
    /// JSON text stored: for a reader that decodes (or caches by) the text itself and needs
    /// none of the row's other fields. The same values, and errors, as `load_by_key`'s.
    pub fn load_content_by_key(
        &self,
        namespace: &str,
        key: &str,
        now: f64,
    ) -> Result<Option<(String, i64, String)>, Error> {
        let mut stmt = self.conn.prepare_cached(LOAD_CONTENT_BY_KEY)?;
        let mut rows = stmt.query(params![namespace, key, now])?;
        let Some(row) = rows.next()? else {
            return Ok(None);
        };
        Ok(Some((row.get(0)?, row.get(1)?, row.get(2)?)))
    }

    /// The unexpired rows of `namespaces` with `importance >= min_importance` whose search text
    /// holds any of `terms`, each with its score (> 0, higher is better): best first, then by
    /// importance, then in insertion order; at most `limit`. Served by the FTS index; `terms`
    /// are only ever data (see `match_query`).
    pub fn search(
        &self,
        namespaces: &[String],
        terms: &[String],
        limit: i64,
        min_importance: f64,
        now: f64,
    ) -> Result<Vec<(Row, f64)>, Error> {
        // An empty MATCH is an FTS5 syntax error, and nothing could be found anyway.
        if namespaces.is_empty() || terms.is_empty() {
            return Ok(Vec::new());
        }
        let mut stmt = self.conn.prepare_cached(SEARCH)?;
        let hits = stmt.query_map(
            params![
                match_query(terms),
                json_strings(namespaces),
                now,
                min_importance,
                limit
            ],
            |row| Ok((read_row(row)?, row.get(9)?)),
        )?;
        Ok(hits.collect::<rusqlite::Result<_>>()?)
    }

    /// (entry id, search text) of the unexpired entries among `entry_ids` that have one.
    pub fn search_texts(
        &self,
        namespace: &str,
        entry_ids: &[String],
        now: f64,
    ) -> Result<Vec<(String, String)>, Error> {
        Ok(sqlite_vectors::search_texts(
            &self.conn, namespace, entry_ids, now,
        )?)
    }

    /// Attaches each vector whose unexpired entry still has the checked search text,
    /// replacing its vector, in one transaction; how many.
    pub fn save_vectors<B: AsRef<[u8]>>(
        &self,
        namespace: &str,
        model: &str,
        dims: i64,
        items: &[Attach<B>],
        now: f64,
    ) -> Result<usize, Error> {
        begin(&self.conn)?;
        match sqlite_vectors::save_vectors(&self.conn, namespace, model, dims, items, now) {
            Ok(attached) => {
                self.commit()?;
                Ok(attached)
            }
            Err(e) => {
                self.conn.execute_batch("ROLLBACK")?;
                Err(e.into())
            }
        }
    }

    /// The rows nearest `query` by their vector of `model` (see
    /// `sqlite_vectors::vector_search`).
    pub fn vector_search(
        &self,
        namespaces: &[String],
        model: &str,
        query: &[f32],
        limit: usize,
        min_importance: f64,
        now: f64,
    ) -> Result<Vec<(Row, f64)>, Error> {
        Ok(sqlite_vectors::vector_search(
            &self.conn,
            namespaces,
            model,
            query,
            limit,
            min_importance,
            now,
        )?)
    }

    /// Unexpired rows with a search text and no vector of `model`, oldest first.
    pub fn missing_vectors(
        &self,
        namespaces: &[String],
        model: &str,
        limit: i64,
        now: f64,
    ) -> Result<Vec<Row>, Error> {
        Ok(sqlite_vectors::missing_vectors(
            &self.conn, namespaces, model, limit, now,
        )?)
    }

    /// Removes an entry of this namespace; whether there was one.
    pub fn delete(&self, namespace: &str, entry_id: &str) -> Result<bool, Error> {
        let mut stmt = self
            .conn
            .prepare_cached("DELETE FROM memory_entries WHERE namespace = ? AND entry_id = ?")?;
        let gone = stmt.execute(params![namespace, entry_id])? > 0;
        self.committed();
        Ok(gone)
    }

    /// Removes the entries of this namespace with these ids in one transaction (all or
    /// none); the ids that existed, in the order given.
    pub fn delete_many(&self, namespace: &str, entry_ids: &[String]) -> Result<Vec<String>, Error> {
        begin(&self.conn)?;
        let attempt = (|| {
            let mut stmt = self.conn.prepare_cached(
                "DELETE FROM memory_entries WHERE namespace = ? AND entry_id = ?",
            )?;
            let mut gone = Vec::new();
            for entry_id in entry_ids {
                if stmt.execute(params![namespace, entry_id])? > 0 {
                    gone.push(entry_id.clone());
                }
            }
            Ok::<_, rusqlite::Error>(gone)
        })();
        match attempt {
            Ok(gone) => {
                self.commit()?;
                Ok(gone)
            }
            Err(e) => {
                self.conn.execute_batch("ROLLBACK")?;
                Err(e.into())
            }
        }
    }

    /// Removes every entry of a namespace; how many there were.
    pub fn clear(&self, namespace: &str) -> Result<usize, Error> {
        let mut stmt = self
            .conn
            .prepare_cached("DELETE FROM memory_entries WHERE namespace = ?")?;
        let gone = stmt.execute(params![namespace])?;
        self.committed();
        Ok(gone)
    }

    /// Removes expired entries everywhere; how many.
    pub fn cleanup_expired(&self, now: f64) -> Result<usize, Error> {
        let mut stmt = self.conn.prepare_cached(
            "DELETE FROM memory_entries WHERE expires_at IS NOT NULL AND expires_at <= ?",
        )?;
        let gone = stmt.execute(params![now])?;
        self.committed();
        Ok(gone)
    }

    /// Namespaces that hold at least one entry, in order of their oldest entry.
    pub fn namespaces(&self) -> Result<Vec<String>, Error> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT namespace FROM memory_entries GROUP BY namespace ORDER BY MIN(seq)",
        )?;
        let names = stmt.query_map([], |row| row.get(0))?;
        Ok(names.collect::<rusqlite::Result<_>>()?)
    }

    /// Closes the connection; on failure it is handed back, still open.
    #[expect(
        clippy::result_large_err,
        reason = "the shape of rusqlite's Connection::close; a cold path, returned once"
    )]
    pub fn close(mut self) -> Result<(), (Self, Error)> {
        if let Some(mut checkpointer) = self.checkpointer.take() {
            checkpointer.stop();
        }
        self.conn.close().map_err(|(conn, e)| {
            let table = Self {
                checkpointer: None,
                conn,
            };
            (table, Error::Sqlite(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, key: Option<&str>, expires_at: Option<f64>, importance: f64) -> Row {
        Row {
            entry_id: id.to_owned(),
            scope: "long_term".to_owned(),
            key: key.map(str::to_owned),
            content: "\"content\"".to_owned(),
            metadata: "{}".to_owned(),
            created_at: "2024-01-01T00:00:00+00:00".to_owned(),
            expires_at,
            importance,
            version: 0,
        }
    }

    fn ids(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.entry_id.as_str()).collect()
    }

    fn memory() -> SqliteTable {
        SqliteTable::open(Path::new(":memory:")).unwrap()
    }

    /// The text of the twin's triple-quoted constant `name`.
    fn twin_constant(name: &str) -> &'static str {
        twin_constant_in(include_str!("../../../python/memlane/_pure/store.py"), name)
    }

    fn twin_constant_in(twin: &'static str, name: &str) -> &'static str {
        let opening = format!("\n{name} = \"\"\"");
        let start = twin.find(&opening).expect("twin defines the constant") + opening.len();
        let len = twin[start..]
            .find("\"\"\"")
            .expect("the constant is closed");
        &twin[start..start + len]
    }

    #[test]
    fn schema_is_the_twins_byte_for_byte() {
        let twin = include_str!("../../../python/memlane/_pure/store.py");
        assert_eq!(twin_constant("SCHEMA"), SCHEMA);
        assert_eq!(twin_constant("SEARCH_SCHEMA"), SEARCH_SCHEMA);
        assert_eq!(twin_constant("DROP_SEARCH"), DROP_SEARCH);
        assert_eq!(twin_constant("ONE_KEY_INDEX"), ONE_KEY_INDEX);
        assert_eq!(twin_constant("SEARCH"), SEARCH);
        let pragmas = PRAGMAS.map(|p| format!("\"{p}\"")).join(", ");
        assert!(twin.contains(&format!("PRAGMAS = ({pragmas})")));
        assert!(twin.contains(&format!("ADD_VERSION = \"{ADD_VERSION}\"")));
        let opening = include_str!("../../../python/memlane/_pure/sqlite_open.py");
        assert!(opening.contains(&format!("NOT_A_STORE = \"{NOT_A_STORE}\"")));
        assert!(opening.contains(&format!("OUTDATED = \"{OUTDATED}\"")));
        let vectors = include_str!("../../../python/memlane/_pure/sqlite_vectors.py");
        for (name, sql) in [
            ("VECTOR_SCHEMA", sqlite_vectors::VECTOR_SCHEMA),
            ("READ_ONLY_VECTORS", sqlite_vectors::READ_ONLY_VECTORS),
            ("SEARCH_TEXTS", sqlite_vectors::SEARCH_TEXTS),
            ("ATTACH", sqlite_vectors::ATTACH),
            ("CANDIDATES", sqlite_vectors::CANDIDATES),
            ("BY_SEQ", sqlite_vectors::BY_SEQ),
            ("MISSING", sqlite_vectors::MISSING),
        ] {
            assert_eq!(twin_constant_in(vectors, name), sql, "{name}");
        }
    }

    fn versioned(id: &str, key: &str, version: i64) -> Row {
        Row {
            version,
            ..row(id, Some(key), None, 0.5)
        }
    }

    #[test]
    fn save_if_many_is_save_if_one_by_one_in_one_transaction() {
        let (batch, serial) = (memory(), memory());
        let ops: Vec<(String, Row, Option<i64>, f64)> = vec![
            ("a".into(), versioned("1", "k", 1), None, 0.0),
            ("a".into(), versioned("2", "k", 1), None, 0.0),
            ("a".into(), versioned("3", "k", 2), Some(1), 0.0),
            ("b".into(), versioned("4", "k", 1), None, 0.0),
            ("a".into(), versioned("5", "j", 3), Some(2), 0.0),
        ];
        let won = batch.save_if_many(&ops).unwrap();
        assert_eq!(won, [true, false, true, true, false]);
        for (namespace, row, expected, now) in &ops {
            serial.save_if(namespace, row, *expected, *now).unwrap();
        }
        for namespace in ["a", "b"] {
            assert_eq!(
                batch.load(namespace, 0.0).unwrap(),
                serial.load(namespace, 0.0).unwrap()
            );
        }
        // One failing write (a CHECK constraint) leaves the whole batch unwritten.
        let mut bad = versioned("6", "m", 1);
        bad.importance = 2.0;
        let failing = vec![
            ("c".into(), versioned("7", "n", 1), None, 0.0),
            ("c".into(), bad, None, 0.0),
        ];
        assert!(batch.save_if_many(&failing).is_err());
        assert!(batch.load("c", 0.0).unwrap().is_empty());
    }

    #[test]
    fn save_if_compares_the_live_holders_version() {
        let t = memory();
        assert!(t.save_if("a", &versioned("1", "k", 1), None, 0.0).unwrap());
        assert!(!t.save_if("a", &versioned("2", "k", 1), None, 0.0).unwrap());
        assert!(!t
            .save_if("a", &versioned("2", "k", 3), Some(2), 0.0)
            .unwrap());
        assert!(t
            .save_if("a", &versioned("2", "k", 2), Some(1), 0.0)
            .unwrap());
        // The winner replaced the key's holder; the losers wrote nothing.
        assert_eq!(t.load("a", 0.0).unwrap(), [versioned("2", "k", 2)]);
        // An expired holder counts as absent, and is replaced.
        let expiring = Row {
            expires_at: Some(5.0),
            ..versioned("3", "j", 7)
        };
        t.save("a", &expiring).unwrap();
        assert!(!t
            .save_if("a", &versioned("4", "j", 8), Some(7), 5.0)
            .unwrap());
        assert!(t.save_if("a", &versioned("4", "j", 1), None, 5.0).unwrap());
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["2", "4"]);
    }

    #[test]
    fn save_if_skips_only_the_deletes_that_find_nothing() {
        let t = memory();
        // No holder: the entry's copy in another namespace still leaves it.
        assert!(t.save_if("a", &versioned("1", "k", 1), None, 0.0).unwrap());
        assert!(t.save_if("b", &versioned("1", "j", 1), None, 0.0).unwrap());
        assert!(t.load("a", 0.0).unwrap().is_empty());
        // The entry is its own holder: updated in place, before a later row.
        assert!(t.save_if("b", &versioned("2", "m", 1), None, 0.0).unwrap());
        assert!(t
            .save_if("b", &versioned("1", "j", 2), Some(1), 0.0)
            .unwrap());
        assert_eq!(
            t.load("b", 0.0).unwrap(),
            [versioned("1", "j", 2), versioned("2", "m", 1)]
        );
        // Another holder, expired: counts as none and still leaves.
        let expiring = Row {
            expires_at: Some(5.0),
            ..versioned("3", "e", 1)
        };
        assert!(t.save_if("b", &expiring, None, 0.0).unwrap());
        assert!(t.save_if("b", &versioned("4", "e", 1), None, 9.0).unwrap());
        assert_eq!(ids(&t.load("b", 0.0).unwrap()), ["1", "2", "4"]);
    }

    #[test]
    fn load_range_is_key_ordered_half_open_and_indexed() {
        let t = memory();
        for (id, key) in [
            ("1", "b"),
            ("2", "a"),
            ("3", "\u{e9}"),
            ("4", "c"),
            ("5", "bb"),
        ] {
            t.save("a", &row(id, Some(key), None, 0.5)).unwrap();
        }
        t.save("a", &row("6", None, None, 0.5)).unwrap();
        t.save("a", &row("7", Some("ba"), Some(1.0), 0.5)).unwrap();
        assert_eq!(ids(&t.load_range("a", "b", "c", 1.0).unwrap()), ["1", "5"]);
        assert_eq!(
            ids(&t.load_range("a", "", "\u{10ffff}", 0.0).unwrap()),
            ["2", "1", "7", "5", "4", "3"]
        );
        let plan: String = t
            .conn
            .query_row(
                &format!("EXPLAIN QUERY PLAN {LOAD_RANGE}"),
                params!["a", "b", "c", 0.0],
                |r| r.get(3),
            )
            .unwrap();
        assert!(
            plan.contains("USING INDEX memory_entries_namespace_key"),
            "{plan}"
        );
    }

    #[test]
    fn load_content_by_key_is_load_by_keys_fields() {
        let t = memory();
        t.save("a", &versioned("1", "k", 3)).unwrap();
        t.save("a", &row("2", Some("gone"), Some(1.0), 0.5))
            .unwrap();
        let full = t.load_by_key("a", "k", 0.0).unwrap().unwrap();
        assert_eq!(
            t.load_content_by_key("a", "k", 0.0).unwrap(),
            Some((full.entry_id, full.version, full.content))
        );
        assert_eq!(t.load_content_by_key("a", "gone", 2.0).unwrap(), None);
        assert_eq!(t.load_content_by_key("b", "k", 0.0).unwrap(), None);
    }

    #[test]
    fn load_reads_seqs_from_the_key_index_and_sorts_no_rows() {
        let t = memory();
        for (id, key) in [("1", Some("b")), ("2", None), ("3", Some("a")), ("4", None)] {
            t.save("a", &row(id, key, None, 0.5)).unwrap();
        }
        t.save("b", &row("5", Some("a"), None, 0.5)).unwrap();
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["1", "2", "3", "4"]);
        let mut stmt = t
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {LOAD}"))
            .unwrap();
        let plan = stmt
            .query_map(params!["a", 0.0], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap()
            .join(" ");
        assert!(
            plan.contains("COVERING INDEX memory_entries_namespace_key"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        assert!(has_one_key_index(&t.conn).unwrap());
    }

    #[test]
    fn a_file_without_versions_is_migrated() {
        let dir = std::env::temp_dir().join(format!("memlane-migrate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("old.sqlite3");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(&SCHEMA.replace(",\n    version INTEGER NOT NULL DEFAULT 0", ""))
            .unwrap();
        old.execute(
            "INSERT INTO memory_entries (entry_id, namespace, scope, key, content, created_at) \
             VALUES ('1', 'a', 'long_term', 'k', '1', '2024-01-01T00:00:00+00:00')",
            [],
        )
        .unwrap();
        drop(old);
        let t = SqliteTable::open(&path).unwrap();
        assert_eq!(t.load("a", 0.0).unwrap()[0].version, 0);
        assert!(t
            .save_if("a", &versioned("1", "k", 1), Some(0), 0.0)
            .unwrap());
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn upsert_keeps_position_and_key_is_unique() {
        let t = memory();
        t.save("a", &row("1", Some("k"), None, 0.5)).unwrap();
        t.save("a", &row("2", None, None, 0.5)).unwrap();
        t.save("a", &row("1", Some("k"), None, 0.9)).unwrap();
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["1", "2"]);
        t.save("a", &row("3", Some("k"), None, 0.5)).unwrap();
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["2", "3"]);
        let found = t.load_by_key("a", "k", 0.0).unwrap().unwrap();
        assert_eq!(found, row("3", Some("k"), None, 0.5));
    }

    #[test]
    fn entry_moves_across_namespaces() {
        let t = memory();
        t.save("a", &row("1", None, None, 0.5)).unwrap();
        t.save("b", &row("2", None, None, 0.5)).unwrap();
        t.save("b", &row("1", None, None, 0.5)).unwrap();
        assert!(t.load("a", 0.0).unwrap().is_empty());
        assert_eq!(ids(&t.load("b", 0.0).unwrap()), ["2", "1"]);
        assert_eq!(t.namespaces().unwrap(), ["b"]);
    }

    #[test]
    fn save_many_is_all_or_nothing() {
        let t = memory();
        let rows = [row("1", None, None, 0.5), row("2", None, None, 2.0)];
        let err = t.save_many("a", &rows).unwrap_err();
        assert!(err.to_string().contains("CHECK constraint failed"), "{err}");
        assert!(t.load("a", 0.0).unwrap().is_empty());
        let rows = [row("1", None, None, 0.5), row("2", None, None, 1.0)];
        t.save_many("a", &rows).unwrap();
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["1", "2"]);
    }

    #[test]
    fn delete_many_is_all_or_nothing() {
        let t = memory();
        for id in ["1", "2", "3"] {
            t.save("a", &row(id, None, None, 0.5)).unwrap();
        }
        t.conn
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE DELETE ON memory_entries WHEN old.entry_id = '3' \
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .unwrap();
        let all = strings(&["1", "2", "3"]);
        assert!(t.delete_many("a", &all).is_err());
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["1", "2", "3"]);
        let some = strings(&["2", "9", "1"]);
        assert_eq!(t.delete_many("a", &some).unwrap(), ["2", "1"]);
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["3"]);
    }

    #[test]
    fn a_foreign_or_empty_database_is_not_a_store() {
        let dir = std::env::temp_dir().join(format!("memlane-foreign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let foreign = dir.join("shop.db");
        Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE orders (id INTEGER)")
            .unwrap();
        let before = std::fs::read(&foreign).unwrap();
        for open in [SqliteTable::open, SqliteTable::open_read_only] {
            let err = open(&foreign).unwrap_err();
            assert!(err.to_string().starts_with(NOT_A_STORE), "{err}");
        }
        assert_eq!(std::fs::read(&foreign).unwrap(), before);
        let empty = dir.join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        let err = SqliteTable::open_read_only(&empty).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
        assert_eq!(std::fs::read(&empty).unwrap(), b"");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn expiry_delete_clear_cleanup() {
        let t = memory();
        t.save("a", &row("1", Some("k"), Some(10.0), 0.5)).unwrap();
        t.save("a", &row("2", None, None, 0.5)).unwrap();
        t.save("b", &row("3", None, Some(5.0), 0.5)).unwrap();
        assert_eq!(ids(&t.load("a", 10.0).unwrap()), ["2"]);
        assert!(t.load_by_key("a", "k", 10.0).unwrap().is_none());
        assert_eq!(t.cleanup_expired(10.0).unwrap(), 2);
        assert!(!t.delete("b", "2").unwrap());
        assert!(t.delete("a", "2").unwrap());
        t.save("c", &row("4", None, None, 0.5)).unwrap();
        assert_eq!(t.clear("c").unwrap(), 1);
        assert_eq!(t.clear("c").unwrap(), 0);
        assert!(t.namespaces().unwrap().is_empty());
    }

    #[test]
    fn file_is_created_with_parents_and_reopened() {
        let dir = std::env::temp_dir().join(format!("memlane-sqlite-{}", std::process::id()));
        let path = dir.join("nested/deeper/memory.sqlite3");
        let t = SqliteTable::open(&path).unwrap();
        t.save("a", &row("1", None, None, 0.5)).unwrap();
        t.close().map_err(|(_, e)| e).unwrap();
        let t = SqliteTable::open(&path).unwrap();
        assert_eq!(ids(&t.load("a", 0.0).unwrap()), ["1"]);
        let mode: String = t
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn integer_values_read_back_as_reals() {
        // Python's sqlite3 stores an int importance or expiry as INTEGER; a file it wrote
        // reads back here all the same.
        let t = memory();
        t.save("a", &row("1", None, Some(7.0), 1.0)).unwrap();
        t.conn
            .execute(
                "UPDATE memory_entries SET importance = 1, expires_at = 7",
                [],
            )
            .unwrap();
        assert_eq!(t.load("a", 0.0).unwrap(), [row("1", None, Some(7.0), 1.0)]);
    }

    fn unpacked(packed: &Packed) -> Vec<Row> {
        packed.iter().map(|r| r.to_row()).collect()
    }

    #[test]
    fn packed_reads_are_the_plain_reads() {
        let t = memory();
        t.save("a", &row("1", Some("k"), Some(7.0), 1.0)).unwrap();
        t.save("a", &row("2", None, None, 0.5)).unwrap();
        t.save("a", &row("", Some(""), None, 0.0)).unwrap();
        t.save("a", &row("4", Some("\u{e9}\u{1f600}"), None, 0.25))
            .unwrap();
        t.conn
            .execute(
                "UPDATE memory_entries SET importance = 1, content = '' WHERE entry_id = '1'",
                [],
            )
            .unwrap();
        let plain = t.load("a", 0.0).unwrap();
        assert_eq!(plain.len(), 4);
        let packed = t.load_packed("a", 0.0).unwrap();
        assert_eq!((packed.len(), packed.is_empty()), (4, false));
        assert_eq!(unpacked(&packed), plain);
        assert_eq!(
            unpacked(&t.load_range_packed("a", "", "z", 0.0).unwrap()),
            t.load_range("a", "", "z", 0.0).unwrap()
        );
        assert!(t.load_packed("b", 0.0).unwrap().is_empty());
        for r in &plain {
            assert_eq!(r.as_ref().to_row(), *r);
        }
        // A value that is not UTF-8 text fails as the plain read fails (a number in a TEXT
        // column is stored as text).
        for bad in ["CAST(x'61ff62' AS TEXT)", "x'00'", "3"] {
            t.conn
                .execute(
                    &format!("UPDATE memory_entries SET created_at = {bad} WHERE entry_id = '2'"),
                    [],
                )
                .unwrap();
            let plain = t.load("a", 0.0).map_err(|e| e.to_string());
            let packed = t.load_packed("a", 0.0).map_err(|e| e.to_string());
            assert_eq!(packed.map(|p| unpacked(&p)), plain);
        }
    }

    #[test]
    fn invalid_utf8_text_is_an_error_not_a_panic() {
        let t = memory();
        t.save("a", &row("1", None, None, 0.5)).unwrap();
        t.conn
            .execute(
                "UPDATE memory_entries SET content = CAST(x'61ff62' AS TEXT)",
                [],
            )
            .unwrap();
        assert!(matches!(t.load("a", 0.0), Err(Error::Sqlite(_))));
    }

    fn searchable(id: &str, key: Option<&str>, text: &str, importance: f64) -> Row {
        let array = json_strings(&[text.to_owned()]);
        Row {
            metadata: format!("{{\"search_text\":{}}}", &array[1..array.len() - 1]),
            ..row(id, key, None, importance)
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn found(t: &SqliteTable, namespaces: &[&str], query: &[&str]) -> Vec<String> {
        t.search(&strings(namespaces), &strings(query), 10, 0.0, 0.0)
            .unwrap()
            .into_iter()
            .map(|(r, score)| {
                assert!(score > 0.0, "{score}");
                r.entry_id
            })
            .collect()
    }

    #[test]
    fn search_ranks_by_bm25_then_importance_then_insertion() {
        let t = memory();
        t.save("a", &searchable("1", None, "apple", 0.2)).unwrap();
        t.save("a", &searchable("2", None, "apple banana", 0.5))
            .unwrap();
        t.save("a", &searchable("3", None, "apple", 0.9)).unwrap();
        t.save("a", &searchable("4", None, "apple", 0.2)).unwrap();
        t.save("a", &row("5", None, None, 0.5)).unwrap();
        t.save("b", &searchable("6", None, "banana", 0.5)).unwrap();
        assert_eq!(
            found(&t, &["a"], &["apple", "banana"]),
            ["2", "3", "1", "4"]
        );
        assert_eq!(found(&t, &["b", "a"], &["banana"]), ["6", "2"]);
        assert!(found(&t, &[], &["apple"]).is_empty());
        assert!(found(&t, &["a"], &[]).is_empty());
        let limited = t
            .search(&strings(&["a"]), &strings(&["apple"]), 2, 0.5, 0.0)
            .unwrap();
        assert_eq!(
            ids(&limited.into_iter().map(|h| h.0).collect::<Vec<_>>()),
            ["3", "2"]
        );
    }

    #[test]
    fn search_terms_are_data_not_fts5_syntax() {
        let t = memory();
        t.save("a", &searchable("1", None, "near or and not", 0.5))
            .unwrap();
        t.save("a", &searchable("2", None, "say \"hi\"", 0.5))
            .unwrap();
        t.save("we\"ird\\ns\n", &searchable("3", None, "near", 0.5))
            .unwrap();
        assert_eq!(
            match_query(&strings(&["a\"b", "c\0d"])),
            "\"a\"\"b\" OR \"c d\""
        );
        for query in [
            ["NEAR"],
            ["AND"],
            ["*"],
            ["\""],
            ["text:near"],
            ["a\" OR \"near"],
        ] {
            t.search(&strings(&["a"]), &strings(&query), 10, 0.0, 0.0)
                .unwrap();
        }
        assert_eq!(found(&t, &["a"], &["NEAR"]), ["1"]);
        assert_eq!(found(&t, &["a"], &["hi"]), ["2"]);
        assert_eq!(found(&t, &["we\"ird\\ns\n"], &["near"]), ["3"]);
    }

    #[test]
    fn search_reads_the_index_not_the_entries() {
        let t = memory();
        let plan: Vec<String> = t
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {SEARCH}"))
            .unwrap()
            .query_map(params!["\"a\"", "[\"a\"]", 0.0, 0.0, 10], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("SCAN memory_search VIRTUAL TABLE"), "{plan}");
        assert!(
            plan.contains("SEARCH e USING INTEGER PRIMARY KEY"),
            "{plan}"
        );
        assert!(!plan.contains("SCAN e"), "{plan}");
    }

    #[test]
    fn the_index_follows_every_write() {
        let t = memory();
        t.save("a", &searchable("1", Some("k"), "alpha", 0.5))
            .unwrap();
        t.save("a", &searchable("1", Some("k"), "beta", 0.5))
            .unwrap();
        assert!(found(&t, &["a"], &["alpha"]).is_empty());
        // A new id takes the key over: the old holder leaves the index with its row.
        t.save("a", &searchable("2", Some("k"), "gamma", 0.5))
            .unwrap();
        assert!(found(&t, &["a"], &["beta"]).is_empty());
        assert!(t
            .save_if("a", &searchable("3", Some("k"), "delta", 0.5), Some(0), 0.0)
            .unwrap());
        assert!(found(&t, &["a"], &["gamma"]).is_empty());
        assert_eq!(found(&t, &["a"], &["delta"]), ["3"]);
        // Moving to another namespace keeps it searchable there only.
        t.save("b", &searchable("3", None, "delta", 0.5)).unwrap();
        assert_eq!(found(&t, &["b"], &["delta"]), ["3"]);
        assert!(t.delete("b", "3").unwrap());
        t.save("c", &searchable("4", None, "epsilon", 0.5)).unwrap();
        t.clear("c").unwrap();
        let expiring = Row {
            expires_at: Some(5.0),
            ..searchable("5", None, "zeta", 0.5)
        };
        t.save("a", &expiring).unwrap();
        assert_eq!(found(&t, &["a"], &["zeta"]), ["5"]);
        assert!(t
            .search(&strings(&["a"]), &strings(&["zeta"]), 10, 0.0, 5.0)
            .unwrap()
            .is_empty());
        t.cleanup_expired(5.0).unwrap();
        let indexed: i64 = t
            .conn
            .query_row("SELECT count(*) FROM memory_search", [], |r| r.get(0))
            .unwrap();
        assert_eq!(indexed, 0);
    }

    #[test]
    fn a_reused_seq_inherits_no_search_text() {
        let t = memory();
        t.save("a", &searchable("1", None, "kept", 0.5)).unwrap();
        t.save("a", &searchable("2", None, "vanished", 0.5))
            .unwrap();
        assert!(t.delete("a", "2").unwrap());
        t.save("a", &row("3", None, None, 0.5)).unwrap();
        let seq: i64 = t
            .conn
            .query_row(
                "SELECT seq FROM memory_entries WHERE entry_id = '3'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(seq, 2, "a new file reuses the deleted highest seq");
        assert!(found(&t, &["a"], &["vanished"]).is_empty());
        assert_eq!(found(&t, &["a"], &["kept"]), ["1"]);
    }

    #[test]
    fn a_file_without_the_index_gets_it_back_filled() {
        let dir = std::env::temp_dir().join(format!("memlane-fts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("old.sqlite3");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(SCHEMA).unwrap();
        old.execute(
            "INSERT INTO memory_entries (entry_id, namespace, scope, content, metadata, created_at) \
             VALUES ('1', 'a', 'long_term', '1', '{\"search_text\":\"old words\"}', 'x'), \
             ('2', 'a', 'long_term', '1', '{\"search_text\":3}', 'x'), \
             ('3', 'a', 'long_term', '1', 'not json', 'x')",
            [],
        )
        .unwrap();
        drop(old);
        let t = SqliteTable::open(&path).unwrap();
        assert_eq!(found(&t, &["a"], &["words"]), ["1"]);
        // The damaged row is unsearchable but still deletable.
        assert!(t.delete("a", "3").unwrap());
        drop(t);
        // Opened again: back-filled once, not twice.
        let t = SqliteTable::open(&path).unwrap();
        assert_eq!(found(&t, &["a"], &["old"]), ["1"]);
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_strings_round_trip_through_sqlite() {
        let t = memory();
        let items = strings(&["plain", "q\"uote", "back\\slash", "ctl\u{1}\n\t", "é😀", ""]);
        let back: Vec<String> = t
            .conn
            .prepare("SELECT value FROM json_each(?)")
            .unwrap()
            .query_map([json_strings(&items)], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(back, items);
    }
}
