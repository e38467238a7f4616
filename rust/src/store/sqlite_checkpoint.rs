//! Checkpoints a store's write-ahead log on a thread of its own (twin: `_pure/sqlite_checkpoint.py`).
//!
//! Why: SQLite's automatic checkpoint runs inside the commit that pushes the WAL past its
//! threshold, so one caller in every ~170 turns copies ~1,000 pages into the database and
//! waits for its `fdatasync`: about a third of a committed turn's cost, averaged. Here a
//! second connection runs a `PASSIVE` checkpoint on a thread after every
//! `COMMITS_PER_CHECKPOINT` committed writes (about as often as SQLite would), while the
//! writer goes on (WAL lets a checkpoint and a writer run at once). The copy is the same work:
//! where a core is idle it leaves the writer's time; where every core is busy it costs what it
//! did.
//!
//! Invariants:
//! * Durability is SQLite's, unchanged: commits are in the WAL when the writer returns, and a
//!   checkpoint copies only committed frames. The thread only decides who pays for the copy.
//! * The writer keeps an automatic checkpoint as a backstop (`BACKSTOP_PAGES`), so the WAL stays
//!   bounded if the thread falls behind or fails (a failed checkpoint is simply tried again at
//!   the next signal: it is an optimisation, never a correctness step).
//! * `stop` closes the thread's connection before the writer's closes, so the writer's close is
//!   still the last one and folds the WAL back into the file as it did before.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

/// Committed write transactions between two signals to the thread: a turn's commit writes ~6
/// pages, so ~1,000 pages of WAL, SQLite's own threshold. Checkpointing more often copies the
/// pages every commit rewrites (the tree's inner pages, page 1) more often: more work in all,
/// which a machine with no idle core pays back in the writer's time.
pub const COMMITS_PER_CHECKPOINT: u64 = 160;

/// The writer's own `wal_autocheckpoint` while a thread checkpoints: reached only if the thread
/// falls behind (or a few huge transactions outrun the commit count).
pub const BACKSTOP_PAGES: i64 = 4000;

/// The checkpointing thread of one writable connection.
#[derive(Debug)]
pub struct Checkpointer {
    wake: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The process that started the thread: a forked child has the handle but not the thread,
    /// and must not wait for it.
    pid: u32,
    commits: std::cell::Cell<u64>,
}

/// Passes of one checkpoint: the frames the writer appended while a pass copied are copied by
/// the next. Only a log copied to its end lets the writer's next transaction start the log
/// over; otherwise it grows to the backstop, whose checkpoint then runs in the writer.
const PASSES: usize = 3;

fn run(conn: &Connection, wake: &Receiver<()>) {
    while wake.recv().is_ok() {
        for _ in 0..PASSES {
            // A busy or failed checkpoint is retried at the next signal; the writer's
            // backstop bounds the WAL meanwhile.
            let pass = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            });
            if !matches!(pass, Ok((log, copied)) if copied < log) {
                break;
            }
        }
    }
}

impl Checkpointer {
    /// Starts the thread on its own connection to `path`, and sets `writer`'s automatic
    /// checkpoint to the backstop. `None` (the writer checkpointing as before) where there is no
    /// file to share (`:memory:`) or the second connection cannot be opened.
    pub fn start(path: &Path, writer: &Connection) -> Option<Self> {
        if path == Path::new(":memory:") {
            return None;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ok()?;
        conn.execute_batch("PRAGMA synchronous=NORMAL").ok()?;
        writer
            .pragma_update(None, "wal_autocheckpoint", BACKSTOP_PAGES)
            .ok()?;
        let (wake, signals) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("memlane-ckpt".to_owned())
            .spawn(move || run(&conn, &signals));
        let Ok(thread) = thread else {
            // No thread: the writer checkpoints inline again, at SQLite's default.
            writer
                .pragma_update(None, "wal_autocheckpoint", 1000)
                .ok()?;
            return None;
        };
        Some(Self {
            wake: Some(wake),
            thread: Some(thread),
            pid: std::process::id(),
            commits: std::cell::Cell::new(0),
        })
    }

    /// Counts one committed write transaction, signalling the thread every
    /// `COMMITS_PER_CHECKPOINT`. Never blocks: a signal still pending is enough.
    pub fn committed(&self) {
        let n = self.commits.get() + 1;
        self.commits.set(n);
        if n % COMMITS_PER_CHECKPOINT == 0 {
            if let Some(wake) = &self.wake {
                let _ = wake.try_send(());
            }
        }
    }

    /// Ends the thread and closes its connection (waits for a checkpoint in progress).
    pub fn stop(&mut self) {
        self.wake = None;
        if let Some(thread) = self.thread.take() {
            if self.pid == std::process::id() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_checkpoints_and_the_writer_does_not() {
        let dir = std::env::temp_dir().join(format!("memlane-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.sqlite3");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (x TEXT)")
            .unwrap();
        // Only a checkpoint writes pages into the database file itself.
        writer
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let mut ckpt = Checkpointer::start(&path, &writer).unwrap();
        let backstop: i64 = writer
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap();
        assert_eq!(backstop, BACKSTOP_PAGES);
        let text = "x".repeat(3000);
        for _ in 0..COMMITS_PER_CHECKPOINT {
            writer.execute("INSERT INTO t VALUES (?)", [&text]).unwrap();
            ckpt.committed();
        }
        // The WAL holds ~160 frames, far under the writer's backstop: only the thread copied.
        ckpt.stop();
        ckpt.stop();
        assert!(std::fs::metadata(&path).unwrap().len() > before + 60 * 4096);
        let rows: i64 = writer
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 160);
        drop(writer);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_in_memory_database_has_no_thread() {
        let writer = Connection::open_in_memory().unwrap();
        assert!(Checkpointer::start(Path::new(":memory:"), &writer).is_none());
    }
}
