//! Turning a cancellation token into blob errors.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::BlobStore;
use crate::error::{Error, ErrorKind, Op, Result};
use crate::types::{Attributes, Generation, ListPage, Object};

/// Wraps a store so that every call observes a [`CancellationToken`].
///
/// A call made after the token fired returns [`ErrorKind::Canceled`] without reaching the
/// store. A read canceled in flight is [`ErrorKind::Canceled`]; a mutation canceled in flight
/// is [`ErrorKind::Ambiguous`], since the request may already have landed.
#[derive(Debug, Clone)]
pub struct Cancelable {
    inner: Arc<dyn BlobStore>,
    token: CancellationToken,
}

impl Cancelable {
    pub fn new(inner: Arc<dyn BlobStore>, token: CancellationToken) -> Self {
        Cancelable { inner, token }
    }

    async fn run<T>(&self, op: Op, key: &str, call: impl Future<Output = Result<T>>) -> Result<T> {
        if self.token.is_cancelled() {
            return Err(Error::new(
                op,
                key,
                ErrorKind::Canceled,
                "canceled before the call",
            ));
        }
        tokio::select! {
            biased;
            result = call => result,
            () = self.token.cancelled() => {
                let kind = if op.is_mutation() { ErrorKind::Ambiguous } else { ErrorKind::Canceled };
                Err(Error::new(op, key, kind, "canceled in flight"))
            }
        }
    }
}

#[async_trait]
impl BlobStore for Cancelable {
    async fn create(&self, key: &str, data: Bytes) -> Result<Attributes> {
        self.run(Op::Create, key, self.inner.create(key, data))
            .await
    }

    async fn get(&self, key: &str) -> Result<Object> {
        self.run(Op::Get, key, self.inner.get(key)).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.run(Op::GetRange, key, self.inner.get_range(key, range))
            .await
    }

    async fn head(&self, key: &str) -> Result<Attributes> {
        self.run(Op::Head, key, self.inner.head(key)).await
    }

    async fn replace(&self, key: &str, generation: &Generation, data: Bytes) -> Result<Attributes> {
        self.run(Op::Replace, key, self.inner.replace(key, generation, data))
            .await
    }

    async fn delete(&self, key: &str, generation: &Generation) -> Result<()> {
        self.run(Op::Delete, key, self.inner.delete(key, generation))
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: &str,
        cursor: Option<&str>,
    ) -> Result<ListPage> {
        self.run(
            Op::List,
            prefix,
            self.inner.list(prefix, start_after, cursor),
        )
        .await
    }
    fn unique_generations(&self) -> bool {
        self.inner.unique_generations()
    }
}
