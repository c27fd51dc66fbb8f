//! FUSE requests by operation: how many were answered and how long each took, from its
//! arrival on a FUSE thread to its answer (`OpStats`, one per mount, shared with the
//! binary's metrics). Counted by a `Timer` that each request's `Req` carries and that
//! records when it is dropped, after the answer: a few atomic adds, no lock, no
//! allocation (a request answered from memory costs a few microseconds; this adds tens
//! of nanoseconds).

use std::sync::Arc;
use std::time::Instant;

use flowfs_client::metrics::{Histogram, HistogramCounts};
use tracing::Span;

macro_rules! ops {
    ($($v:ident => $name:literal),* $(,)?) => {
        /// A FUSE operation flowfs answers.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(missing_docs)] // each is the kernel's operation of its name
        pub enum Op { $($v),* }

        impl Op {
            /// Every operation, in the order of `OpStats`.
            pub const ALL: &'static [Op] = &[$(Op::$v),*];

            /// The kernel's name for it (`lookup`, `read`, ...).
            pub fn name(self) -> &'static str {
                match self { $(Op::$v => $name),* }
            }
        }
    };
}

ops! {
    Lookup => "lookup", Forget => "forget", Getattr => "getattr", Setattr => "setattr",
    Readlink => "readlink", Mknod => "mknod", Mkdir => "mkdir", Unlink => "unlink",
    Rmdir => "rmdir", Symlink => "symlink", Rename => "rename", Link => "link",
    Open => "open", Create => "create", Read => "read", Write => "write", Flush => "flush",
    Release => "release", Fsync => "fsync", Opendir => "opendir", Readdir => "readdir",
    Readdirplus => "readdirplus", Releasedir => "releasedir", Fsyncdir => "fsyncdir",
    Statfs => "statfs", Access => "access", Fallocate => "fallocate",
    CopyFileRange => "copy_file_range", Getxattr => "getxattr", Listxattr => "listxattr",
    Setxattr => "setxattr", Removexattr => "removexattr",
}

/// The upper bounds of the latency buckets, in seconds (a last bucket is above them): 10 µs
/// (answered from memory) to 10 s (a request that waited on a slow store).
pub const BUCKETS: &[f64] = &[
    1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0, 10.0,
];

/// One operation's requests at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct FuseOpCounts {
    /// The operation.
    pub op: Op,
    /// Their latencies.
    pub latency: HistogramCounts,
}

/// The FUSE requests of one mount, by operation: a latency histogram each.
pub struct OpStats {
    cells: Vec<Histogram>,
}

impl Default for OpStats {
    fn default() -> OpStats {
        OpStats {
            cells: Op::ALL.iter().map(|_| Histogram::new(BUCKETS)).collect(),
        }
    }
}

impl std::fmt::Debug for OpStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpStats")
    }
}

impl OpStats {
    fn record(&self, op: Op, started: Instant) {
        self.cells[op as usize].observe(started.elapsed());
    }

    /// The operations answered at least once, with their counts.
    pub fn snapshot(&self) -> Vec<FuseOpCounts> {
        (Op::ALL.iter().zip(&self.cells))
            .map(|(&op, h)| FuseOpCounts {
                op,
                latency: h.counts(),
            })
            .filter(|c| c.latency.count > 0)
            .collect()
    }
}

/// Records its request's latency when dropped (after the answer).
pub(super) struct Timer {
    op: Op,
    started: Instant,
    stats: Arc<OpStats>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.stats.record(self.op, self.started);
    }
}

/// A request being answered: its span (the log's context) and its timer.
pub(super) struct Req {
    pub(super) span: Span,
    pub(super) timer: Timer,
}

impl Req {
    pub(super) fn new(op: Op, span: Span, stats: &Arc<OpStats>) -> Req {
        let timer = Timer {
            op,
            started: Instant::now(),
            stats: stats.clone(),
        };
        Req { span, timer }
    }

    /// Enters the span for a request answered in the calling function; the latency is
    /// recorded when the guard goes.
    pub(super) fn entered(self) -> Entered {
        Entered {
            _span: self.span.entered(),
            _timer: self.timer,
        }
    }
}

/// The span entered and the timer running, until dropped.
pub(super) struct Entered {
    _span: tracing::span::EnteredSpan,
    _timer: Timer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_lands_in_one_bucket_of_its_op() {
        let stats = Arc::new(OpStats::default());
        for _ in 0..3 {
            drop(Req::new(Op::Read, Span::none(), &stats).entered());
        }
        drop(Req::new(Op::Lookup, Span::none(), &stats));
        let s = stats.snapshot();
        assert_eq!(s.len(), 2);
        let read = s.iter().find(|c| c.op == Op::Read).unwrap();
        assert_eq!(read.latency.count, 3);
        assert_eq!(read.latency.buckets.iter().sum::<u64>(), 3);
        assert_eq!(read.latency.buckets.len(), BUCKETS.len() + 1);
        assert_eq!(Op::ALL[Op::Readdirplus as usize], Op::Readdirplus);
    }
}
