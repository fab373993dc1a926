//! How many of a checkpoint's uploads may be in flight at once.
//!
//! A store's commits share the bucket with its checkpoints and, on a local server, the same
//! cores. A checkpoint uploads many objects; when they run at full width, the slot creates
//! queue behind them and every writer waits. A pace lets the store's committer set that width.

use std::fmt;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::error::Result;

/// Decides how many uploads may be in flight now, at most `most` (the replica's workers).
/// It is asked before each upload starts, so the width follows the store's load during one
/// checkpoint.
pub trait UploadPace: Send + Sync + fmt::Debug {
    fn in_flight(&self, most: usize) -> usize;
}

/// Runs `uploads` in order of starting, at most `most` at once and at most what `pace`
/// allows when each starts (at least one); returns their results in completion order, or
/// the first error.
pub(crate) async fn run_paced<F, T>(
    uploads: impl IntoIterator<Item = F>,
    most: usize,
    pace: Option<&dyn UploadPace>,
) -> Result<Vec<T>>
where
    F: Future<Output = Result<T>>,
{
    let most = most.max(1);
    let width = || pace.map_or(most, |p| p.in_flight(most).clamp(1, most));
    let mut uploads = uploads.into_iter();
    let mut running = FuturesUnordered::new();
    let mut done = Vec::new();
    loop {
        while running.len() < width() {
            let Some(upload) = uploads.next() else {
                break;
            };
            running.push(upload);
        }
        match running.next().await {
            Some(result) => done.push(result?),
            None => return Ok(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[derive(Debug)]
    struct Fixed(usize);

    impl UploadPace for Fixed {
        fn in_flight(&self, _most: usize) -> usize {
            self.0
        }
    }

    /// Runs 40 uploads of 1 ms each, returning how many ran at once at most.
    async fn widest(most: usize, pace: Option<&dyn UploadPace>) -> usize {
        let now = Arc::new(AtomicUsize::new(0));
        let widest = Arc::new(AtomicUsize::new(0));
        let uploads = (0..40).map(|i| {
            let (now, widest) = (now.clone(), widest.clone());
            async move {
                let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                widest.fetch_max(running, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(i)
            }
        });
        let mut done = run_paced(uploads, most, pace).await.unwrap();
        done.sort_unstable();
        assert_eq!(done, (0..40).collect::<Vec<_>>(), "every upload ran once");
        widest.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn uploads_run_as_wide_as_the_pace_allows_and_never_wider_than_the_workers() {
        assert_eq!(widest(8, None).await, 8);
        assert_eq!(widest(8, Some(&Fixed(3))).await, 3);
        assert_eq!(
            widest(8, Some(&Fixed(100))).await,
            8,
            "capped at the workers"
        );
        assert_eq!(widest(8, Some(&Fixed(0))).await, 1, "always at least one");
    }
}
