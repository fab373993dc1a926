//! The pace a bucket store sets for its checkpoint's uploads: full width while its slot
//! creates run at their usual latency, an eighth of it while they run slower.
//!
//! Upload latency alone cannot tell a loaded local server from a distant bucket; the
//! committer's own create latency can, because it is measured on the same small objects
//! whatever else runs. Its usual latency is a floor that follows the average down at once and
//! up over about a minute, so a lasting change of bucket becomes the new usual, while a
//! checkpoint's burst (seconds) reads as slower.

use std::sync::Mutex;
use std::time::Duration;

use quire_checkpoint::UploadPace;
use quire_log::commit::Committer;
use tokio::time::Instant;

/// Creates slower than their usual latency by this factor (3/2) narrow the uploads.
const SLOWER_NUMERATOR: u64 = 3;
const SLOWER_DENOMINATOR: u64 = 2;
/// The narrowed width: this share of the workers, at least [`NARROWEST`].
const NARROWED_SHARE: usize = 8;
const NARROWEST: usize = 2;
/// How long the floor takes to rise to a higher average that lasts.
const FLOOR_RISE: Duration = Duration::from_secs(60);

/// The usual latency and the judgement, apart from where the latency comes from.
#[derive(Debug, Default)]
struct Floor {
    /// The usual create latency and when it was last moved; `None` until the first sample.
    usual: Mutex<Option<(Duration, Instant)>>,
}

impl Floor {
    /// The width for `most` workers given the create latency at `now`.
    fn width(&self, latency: Duration, most: usize, now: Instant) -> usize {
        let mut usual = self.usual.lock().expect("pace lock poisoned");
        let floor = match *usual {
            Some((old, since)) if latency > old => {
                let share = (now - since).as_secs_f64() / FLOOR_RISE.as_secs_f64();
                old + (latency - old).mul_f64(share.min(1.0))
            }
            _ => latency,
        };
        *usual = Some((floor, now));
        let slower = latency.as_secs_f64() * SLOWER_DENOMINATOR as f64
            > floor.as_secs_f64() * SLOWER_NUMERATOR as f64;
        if slower {
            (most / NARROWED_SHARE).max(NARROWEST).min(most)
        } else {
            most
        }
    }
}

/// Paces a checkpoint's uploads by the store's committer.
#[derive(Debug)]
pub(crate) struct CommitterPace {
    committer: Committer,
    floor: Floor,
}

impl CommitterPace {
    pub(crate) fn new(committer: Committer) -> CommitterPace {
        CommitterPace {
            committer,
            floor: Floor::default(),
        }
    }
}

impl UploadPace for CommitterPace {
    fn in_flight(&self, most: usize) -> usize {
        match self.committer.create_latency() {
            Some(latency) => self.floor.width(latency, most, Instant::now()),
            None => most,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn creates_at_their_usual_latency_leave_the_uploads_wide() {
        let (floor, start) = (Floor::default(), Instant::now());
        for i in 0..100 {
            assert_eq!(floor.width(ms(3), 32, start + ms(i)), 32);
        }
        // Noise within half again of the usual does not narrow them.
        assert_eq!(floor.width(ms(4), 32, start + ms(100)), 32);
        // A distant bucket's creates are slow but steady: wide too.
        let distant = Floor::default();
        for i in 0..100 {
            assert_eq!(distant.width(ms(40), 32, start + ms(i)), 32);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn creates_slowing_down_narrow_the_uploads_until_they_recover() {
        let (floor, start) = (Floor::default(), Instant::now());
        floor.width(ms(3), 32, start);
        let later = start + ms(10);
        assert_eq!(floor.width(ms(6), 32, later), 4, "an eighth of the workers");
        assert_eq!(floor.width(ms(6), 8, later), 2, "never narrower than two");
        assert_eq!(
            floor.width(ms(6), 1, later),
            1,
            "never wider than the workers"
        );
        assert_eq!(
            floor.width(ms(3), 32, later),
            32,
            "back to the usual: wide again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_reads_as_slower_and_a_lasting_change_becomes_the_usual() {
        let (floor, start) = (Floor::default(), Instant::now());
        floor.width(ms(3), 32, start);
        // Asked a thousand times a second through a ten-second burst: narrowed throughout.
        for i in 1..=10_000 {
            let at = start + Duration::from_micros(1000 * i);
            assert_eq!(floor.width(ms(10), 32, at), 4, "at {i} ms");
        }
        // Still slower a minute on: that is the usual now.
        assert_eq!(floor.width(ms(10), 32, start + ms(70_000)), 32);
    }
}
