//! The adapter's own state (the file system, the runtime, the kernel's attribute TTL, the
//! passthrough switch) and the two ways it answers a request: on the FUSE thread when nothing
//! has to be waited for, on tokio when something must.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use fuser::{Generation, ReplyEntry};
use tokio::runtime::Handle;
use tracing::Instrument;

use super::ops::{Op, OpStats, Req};
use super::passthrough::Passthrough;
use super::reply::{answer, span, to_fuse, About, Replies};
use crate::error::Result;
use crate::fs::{Attr, Fs};

/// Answers the kernel's FUSE requests with the methods of `Fs`.
pub struct FuseAdapter {
    pub(super) fs: Arc<Fs>,
    pub(super) rt: Handle,
    pub(super) ttl: Duration,
    pub(super) pt: Arc<Passthrough>,
    pub(super) ops: Arc<OpStats>,
}

impl FuseAdapter {
    /// An adapter over `fs` that runs what must wait on the runtime of `rt`.
    pub fn new(fs: Arc<Fs>, rt: Handle) -> FuseAdapter {
        let ttl = fs.config().metadata_ttl;
        let pt = Arc::new(Passthrough::new(false));
        let ops = Arc::new(OpStats::default());
        FuseAdapter {
            fs,
            rt,
            ttl,
            pt,
            ops,
        }
    }

    /// The counts of the requests this adapter answers (for the mount's metrics).
    pub fn op_stats(&self) -> Arc<OpStats> {
        self.ops.clone()
    }

    /// A request of `op` about `about`, its timer started.
    pub(super) fn req(&self, op: Op, about: About) -> Req {
        Req::new(op, span(op, about), &self.ops)
    }

    /// Serves files whose bytes are local (staged copies) by FUSE passthrough where the
    /// kernel allows it (`on`: `--passthrough auto`).
    pub fn with_passthrough(mut self, on: bool) -> FuseAdapter {
        self.pt = Arc::new(Passthrough::new(on));
        self
    }

    /// Runs the operation `op` (given the file system) in the request's span and answers
    /// `reply` with its outcome (`ok` for a value, `answer` for an error); its latency is
    /// recorded once answered.
    pub(super) fn run<R, T, F>(
        &self,
        req: Req,
        reply: R,
        op: impl FnOnce(Arc<Fs>) -> F,
        ok: impl FnOnce(R, T) + Send + 'static,
    ) where
        R: Replies + Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let fut = op(self.fs.clone());
        let Req { span, timer } = req;
        self.poll_here(
            async move {
                answer(reply, fut.await, ok);
                drop(timer);
            }
            .instrument(span),
        );
    }

    /// Answers a request on this FUSE thread when it needs no waiting (metadata in
    /// memory, data already fetched): most requests of a warm or prefetched workload.
    /// Only a request that must wait moves to the runtime. Handing every request to
    /// another thread cost two context switches each, the largest single cost of
    /// reading many small files on a small machine.
    pub(super) fn poll_here<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        let _rt = self.rt.enter();
        let mut fut = Box::pin(fut);
        let mut cx = Context::from_waker(Waker::noop());
        // Polling again from the runtime registers its real waker: a resource first
        // polled here with the no-op waker is then watched as usual.
        if fut.as_mut().poll(&mut cx).is_pending() {
            self.rt.spawn(fut);
        }
    }

    /// Runs `op`, which makes or finds a name, and answers with its entry.
    pub(super) fn entry<F>(&self, req: Req, reply: ReplyEntry, op: impl FnOnce(Arc<Fs>) -> F)
    where
        F: Future<Output = Result<Attr>> + Send + 'static,
    {
        let ttl = self.ttl;
        self.run(req, reply, op, move |r, a| {
            r.entry(&ttl, &to_fuse(&a), Generation(0))
        });
    }
}
