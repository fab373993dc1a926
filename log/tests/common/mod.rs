//! Code shared by the integration tests: the crate's `testing` support, committers, and
//! the simulated stores they run on.
#![allow(dead_code)]

pub(crate) mod committers;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use quire_blob::{BlobStore, LatencyProfile, Simulated};

pub(crate) use quire_log::testing::*;

/// `inner` behind a simulated store without latency or faults (arm them on it).
pub(crate) fn simulated(inner: Arc<dyn BlobStore>) -> Arc<Simulated> {
    Arc::new(Simulated::new(inner, 0))
}

/// `inner` behind a simulated store whose every call takes `millis` milliseconds, drawn
/// evenly from the range with the seeded stream.
pub(crate) fn jittered(inner: Arc<dyn BlobStore>, millis: Range<u64>, seed: u64) -> Arc<Simulated> {
    let (min, max) = (millis.start, millis.end.saturating_sub(1).max(millis.start));
    let profile = if min == max {
        LatencyProfile::Fixed(Duration::from_millis(min))
    } else {
        LatencyProfile::Uniform {
            min: Duration::from_millis(min),
            max: Duration::from_millis(max),
        }
    };
    let simulated = Simulated::new(inner, seed);
    for op in quire_blob::Op::ALL {
        simulated.set_latency(op, profile);
    }
    Arc::new(simulated)
}
