//! The request context every backend call takes: a cancellation token and an optional
//! deadline. Writes hand the deadline to the committer (a write still queued when it passes
//! is never committed); reads stop waiting when either fires.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorKind, Op, Result};

/// A request's cancellation and deadline. Clones share the token.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    token: CancellationToken,
    deadline: Option<Instant>,
}

impl Ctx {
    /// A context that never ends on its own.
    pub fn new() -> Ctx {
        Ctx::default()
    }

    /// A context that ends at `deadline`.
    pub fn with_deadline(deadline: Instant) -> Ctx {
        Ctx {
            token: CancellationToken::new(),
            deadline: Some(deadline),
        }
    }

    /// A context that ends `timeout` from now.
    pub fn with_timeout(timeout: Duration) -> Ctx {
        Ctx::with_deadline(Instant::now() + timeout)
    }

    /// A context that has already ended (for tests and for refusing work up front).
    pub fn canceled() -> Ctx {
        let ctx = Ctx::new();
        ctx.cancel();
        ctx
    }

    /// A child sharing this deadline, canceled with this context or on its own.
    pub fn child(&self) -> Ctx {
        Ctx {
            token: self.token.child_token(),
            deadline: self.deadline,
        }
    }

    /// Ends the context.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the context was canceled or its deadline passed.
    pub fn is_done(&self) -> bool {
        self.token.is_cancelled() || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// [`ErrorKind::Canceled`] for `op` on `key` when the context is done.
    pub fn check(&self, op: Op, key: &str) -> Result<()> {
        if self.is_done() {
            return Err(canceled(op, key, "the request ended before the call"));
        }
        Ok(())
    }

    /// Runs `work` until it finishes or the context ends (then [`ErrorKind::Canceled`]).
    /// Use it for reads; a write whose outcome matters must not be abandoned half-way.
    pub async fn run<T>(
        &self,
        op: Op,
        key: &str,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        self.check(op, key)?;
        let deadline = async {
            match self.deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            result = work => result,
            () = self.token.cancelled() => Err(canceled(op, key, "the request was canceled")),
            () = deadline => Err(canceled(op, key, "the request deadline passed")),
        }
    }
}

fn canceled(op: Op, key: &str, detail: &str) -> Error {
    Error::new(op, key, ErrorKind::Canceled, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ends_on_cancel_or_deadline() {
        let ctx = Ctx::new();
        assert!(!ctx.is_done());
        assert_eq!(ctx.run(Op::Get, "/a", async { Ok(1) }).await.unwrap(), 1);
        let child = ctx.child();
        ctx.cancel();
        assert!(child.is_done());
        let err = ctx.run(Op::Get, "/a", async { Ok(1) }).await.unwrap_err();
        assert_eq!((err.kind(), err.key()), (ErrorKind::Canceled, "/a"));

        let timed = Ctx::with_timeout(Duration::from_secs(1));
        let slow = timed.run(Op::Get, "/b", async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        });
        assert_eq!(slow.await.unwrap_err().kind(), ErrorKind::Canceled);
        assert!(timed.is_done());
    }
}
