//! Counting a batch of texts on every core, with worker threads that outlive the call.
//!
//! Each thread keeps its own cache of piece counts (`tokens.rs`). Threads spawned per batch
//! would start every batch with empty caches and merge every distinct piece again, which is
//! what made a two-thread batch only ~1.4x a loop on the caller's warm thread. The workers
//! here live for the process, so their caches stay warm like the caller's.
//!
//! Invariants:
//! - Results are in input order: slot `i` of the output is written once, by whichever
//!   thread took the block holding `i`.
//! - The caller always works too, so a batch finishes even if no worker ever runs.
//! - The pool belongs to the process that built it: after `fork` the child has the pool's
//!   memory but not its threads, so a pool whose pid differs is built again. If the pool is
//!   busy (another thread's batch, or a lock held across `fork`), the batch runs on threads
//!   spawned for it, as before there was a pool.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};

use crate::tokens::Mode;

/// Texts a thread takes at a time: small enough to balance mixed lengths, large enough that
/// taking a block costs nothing next to counting it.
const BLOCK: usize = 16;

/// One batch, owned, so that threads outliving the call can read it.
struct Batch {
    mode: Mode,
    text: String,
    bounds: Vec<Range<usize>>,
    next: AtomicUsize,
    out: Vec<AtomicUsize>,
}

impl Batch {
    fn new(mode: Mode, texts: &[&str]) -> Self {
        let mut text = String::with_capacity(texts.iter().map(|t| t.len()).sum());
        let mut bounds = Vec::with_capacity(texts.len());
        for t in texts {
            let start = text.len();
            text.push_str(t);
            bounds.push(start..text.len());
        }
        let out = texts.iter().map(|_| AtomicUsize::new(0)).collect();
        Self {
            mode,
            text,
            bounds,
            next: AtomicUsize::new(0),
            out,
        }
    }

    /// Counts blocks until none is left.
    fn work(&self) {
        let len = self.bounds.len();
        loop {
            let start = self.next.fetch_add(BLOCK, Ordering::Relaxed);
            if start >= len {
                return;
            }
            for i in start..(start + BLOCK).min(len) {
                let count = self.mode.count(&self.text[self.bounds[i].clone()]);
                self.out[i].store(count, Ordering::Relaxed);
            }
        }
    }

    fn counts(&self) -> Vec<usize> {
        self.out.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }
}

type Job = (Arc<Batch>, mpsc::Sender<()>);

struct Pool {
    pid: u32,
    workers: Vec<mpsc::Sender<Job>>,
}

impl Pool {
    fn new(workers: usize) -> Self {
        let workers = (0..workers)
            .map(|_| {
                let (send, receive) = mpsc::channel::<Job>();
                std::thread::spawn(move || {
                    for (batch, done) in receive {
                        batch.work();
                        // The caller may have stopped waiting only if it panicked.
                        let _ = done.send(());
                    }
                });
                send
            })
            .collect();
        Self {
            pid: std::process::id(),
            workers,
        }
    }

    /// Counts `batch` on the workers and the calling thread; `None` if a worker is gone.
    fn run(&self, batch: &Arc<Batch>) -> Option<Vec<usize>> {
        let (done, finished) = mpsc::channel();
        for worker in &self.workers {
            worker.send((Arc::clone(batch), done.clone())).ok()?;
        }
        drop(done);
        batch.work();
        for _ in &self.workers {
            finished.recv().ok()?;
        }
        Some(batch.counts())
    }
}

fn pool() -> &'static Mutex<Option<Pool>> {
    static POOL: OnceLock<Mutex<Option<Pool>>> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(None))
}

/// Counts `texts` in order on `threads` threads (the caller's among them).
pub fn count_many(mode: Mode, texts: &[&str], threads: usize) -> Vec<usize> {
    if let Ok(mut slot) = pool().try_lock() {
        let pid = std::process::id();
        if slot
            .as_ref()
            .is_none_or(|p| p.pid != pid || p.workers.len() != threads - 1)
        {
            *slot = Some(Pool::new(threads - 1));
        }
        let batch = Arc::new(Batch::new(mode, texts));
        if let Some(counts) = slot.as_ref().and_then(|p| p.run(&batch)) {
            return counts;
        }
        *slot = None; // a worker died: the next batch builds the pool again
        return texts.iter().map(|t| mode.count(t)).collect();
    }
    spawned(mode, texts, threads)
}

/// The batch on threads spawned for it (cold caches): when the pool is busy.
fn spawned(mode: Mode, texts: &[&str], threads: usize) -> Vec<usize> {
    let batch = Batch::new(mode, texts);
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|| batch.work());
        }
        batch.work();
    });
    batch.counts()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Encoding;

    fn texts() -> Vec<String> {
        (0..1000)
            .map(|i| {
                format!(
                    "message {i}: {} 漢字 {{\"k\": {i}}}",
                    "word ".repeat(i % 37)
                )
            })
            .collect()
    }

    #[test]
    fn pool_and_spawned_threads_count_like_a_loop() {
        let owned = texts();
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        let mode = Mode::Exact(Encoding::O200kBase);
        let expected: Vec<usize> = refs.iter().map(|t| mode.count(t)).collect();
        for threads in [2, 3] {
            assert_eq!(count_many(mode, &refs, threads), expected);
            assert_eq!(
                count_many(mode, &refs, threads),
                expected,
                "again, warm workers"
            );
            assert_eq!(spawned(mode, &refs, threads), expected);
        }
    }

    #[test]
    fn concurrent_batches_share_the_pool_or_spawn() {
        let owned = texts();
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        let mode = Mode::Heuristic {
            tokens_per_word: 1.3,
        };
        let expected: Vec<usize> = refs.iter().map(|t| mode.count(t)).collect();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| assert_eq!(count_many(mode, &refs, 2), expected));
            }
        });
    }
}
