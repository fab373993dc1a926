//! The server's Prometheus metrics, shared by every transport: the requests answered (by
//! world, verb and status) and their latency, recorded by the QUIC listener and the HTTP
//! gateway alike ([`Metrics`]), plus per-world store metrics ([`StoreCollector`]), read from
//! each store's [`Store::stats`](quire_backend::Store::stats) at every scrape: commit batch
//! sizes, slot races, blob requests and bytes. A store that does not report a part (a file
//! store commits no slots) shows none of its series.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `quire_requests` | requests answered | `world`, `verb`, `status` |
//! | `quire_request_duration_seconds` | histogram of the time to answer | `verb` |
//! | `quire_commit_batch_size` | histogram of writes per committed slot | `world` |
//! | `quire_commit_slots_won_total` | slot creates won | `world` |
//! | `quire_commit_slot_races_lost_total` | slot races lost to another store | `world` |
//! | `quire_commit_members_rebuilt_total` | writes rebuilt after a lost race | `world` |
//! | `quire_commit_yields_total` | pauses after wins while a peer was active | `world` |
//! | `quire_commit_handoffs_total` | creates held for a peer that lost a slot to us | `world` |
//! | `quire_commit_listening_pauses_total` | names left free by a store seeing no peer | `world` |
//! | `quire_blob_requests_total` | blob requests | `world`, `op` |
//! | `quire_blob_request_failures_total` | failed blob requests | `world`, `op` |
//! | `quire_blob_bytes_total` | blob bytes sent (`up`) and received (`down`) | `world`, `direction` |
//! | `quire_blob_hedges_sent_total` | second attempts sent for slow gets and creates | `world` |
//! | `quire_blob_hedges_won_total` | second attempts that answered first | `world` |

use std::fmt;
use std::sync::Arc;
use tokio::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use quire_backend::StoreStats;

use crate::mark::{Status, Verb};
use crate::worlds::Worlds;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    world: String,
    verb: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
}

type LatencyFamily = Family<VerbLabels, Histogram, fn() -> Histogram>;

/// The gateway's Prometheus metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        fn latency_histogram() -> Histogram {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        }
        let latency: LatencyFamily = Family::new_with_constructor(latency_histogram);
        registry.register(
            "quire_requests",
            "Requests answered, by world, verb and status",
            requests.clone(),
        );
        registry.register(
            "quire_request_duration_seconds",
            "Time to answer a request, by verb",
            latency.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
        }
    }
}

impl Metrics {
    /// The request metrics plus every world's store metrics ([`StoreCollector`]).
    pub fn for_worlds(worlds: Arc<Worlds>) -> Metrics {
        let mut metrics = Metrics::default();
        metrics
            .registry
            .register_collector(Box::new(StoreCollector::new(worlds)));
        metrics
    }

    /// The registry, for metrics owned elsewhere (peer hints).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Records one answered request (any transport).
    pub fn observe(&self, world: &str, verb: Verb, status: Status, started: Instant) {
        self.requests
            .get_or_create(&RequestLabels {
                world: world.to_owned(),
                verb: verb.as_str().to_owned(),
                status: status.as_str().to_owned(),
            })
            .inc();
        self.latency
            .get_or_create(&VerbLabels {
                verb: verb.as_str().to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Upper bounds of the batch-size histogram (a slot holds at most a few hundred writes).
const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorldLabels {
    world: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlobOpLabels {
    world: String,
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    world: String,
    direction: String,
}

/// Renders every world's store stats at scrape time.
pub struct StoreCollector {
    worlds: Arc<Worlds>,
}

impl fmt::Debug for StoreCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreCollector").finish_non_exhaustive()
    }
}

impl StoreCollector {
    pub fn new(worlds: Arc<Worlds>) -> StoreCollector {
        StoreCollector { worlds }
    }
}

/// One counter series per `(labels, value)`, under one descriptor.
fn counters<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(L, u64)],
) -> fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in series {
        metric
            .encode_family(labels)?
            .encode_counter::<NoLabelSet, _, u64>(value, None)?;
    }
    Ok(())
}

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let stats: Vec<(String, StoreStats)> = self
            .worlds
            .iter()
            .map(|world| (world.name.clone(), world.store.stats()))
            .collect();
        let world = |name: &String| WorldLabels {
            world: name.clone(),
        };

        let commits: Vec<_> = stats
            .iter()
            .filter_map(|(name, s)| s.commits.as_ref().map(|c| (name, c)))
            .collect();
        if !commits.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "quire_commit_batch_size",
                "Writes per committed slot, by world",
                None,
                MetricType::Histogram,
            )?;
            for (name, c) in &commits {
                let mut buckets: Vec<(f64, u64)> = BATCH_BUCKETS
                    .iter()
                    .map(|b| (*b, 0))
                    .chain([(f64::MAX, 0)])
                    .collect();
                let (mut sum, mut count) = (0.0, 0);
                for (&size, &batches) in &c.batches_by_size {
                    sum += (size as u64 * batches) as f64;
                    count += batches;
                    let bucket = buckets
                        .iter_mut()
                        .find(|(bound, _)| size as f64 <= *bound)
                        .expect("the last bucket is unbounded");
                    bucket.1 += batches;
                }
                metric
                    .encode_family(&world(name))?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        let series = |value: fn(&quire_backend::CommitCounters) -> u64| -> Vec<(WorldLabels, u64)> {
            commits
                .iter()
                .map(|(name, c)| (world(name), value(c)))
                .collect()
        };
        counters(
            &mut encoder,
            "quire_commit_slots_won",
            "Slot creates this server won, by world",
            &series(|c| c.slots_won),
        )?;
        counters(
            &mut encoder,
            "quire_commit_slot_races_lost",
            "Slot races lost to another store, by world",
            &series(|c| c.slots_lost),
        )?;
        counters(
            &mut encoder,
            "quire_commit_members_rebuilt",
            "Writes rebuilt after a lost slot race, by world",
            &series(|c| c.members_rebuilt),
        )?;
        counters(
            &mut encoder,
            "quire_commit_yields",
            "Pauses after slot wins while another store was active, by world",
            &series(|c| c.yields),
        )?;
        counters(
            &mut encoder,
            "quire_commit_handoffs",
            "Slot creates held back for a peer that lost a slot to this server, by world",
            &series(|c| c.handoffs),
        )?;
        counters(
            &mut encoder,
            "quire_commit_listening_pauses",
            "Slot names left free by a busy server that saw no other store, by world",
            &series(|c| c.listening_pauses),
        )?;

        let blobs: Vec<_> = stats
            .iter()
            .filter_map(|(name, s)| s.blobs.as_ref().map(|b| (name, b)))
            .collect();
        let per_op = |failures: bool| -> Vec<(BlobOpLabels, u64)> {
            blobs
                .iter()
                .flat_map(|(name, reading)| {
                    quire_blob::Op::ALL.iter().map(move |op| {
                        let value = if failures {
                            reading.failures(*op)
                        } else {
                            reading.requests(*op)
                        };
                        let labels = BlobOpLabels {
                            world: (*name).clone(),
                            op: op.name().to_owned(),
                        };
                        (labels, value)
                    })
                })
                .collect()
        };
        counters(
            &mut encoder,
            "quire_blob_requests",
            "Blob store requests, by world and operation",
            &per_op(false),
        )?;
        counters(
            &mut encoder,
            "quire_blob_request_failures",
            "Failed blob store requests, by world and operation",
            &per_op(true),
        )?;
        let bytes: Vec<(DirectionLabels, u64)> = blobs
            .iter()
            .flat_map(|(name, reading)| {
                [("up", reading.bytes_up), ("down", reading.bytes_down)].map(|(direction, n)| {
                    let labels = DirectionLabels {
                        world: (*name).clone(),
                        direction: direction.to_owned(),
                    };
                    (labels, n)
                })
            })
            .collect();
        counters(
            &mut encoder,
            "quire_blob_bytes",
            "Blob bytes sent (up) and received (down), by world",
            &bytes,
        )?;
        let hedges = |value: fn(&quire_blob::HedgeCounts) -> u64| -> Vec<(WorldLabels, u64)> {
            stats
                .iter()
                .filter_map(|(name, s)| s.hedges.as_ref().map(|h| (world(name), value(h))))
                .collect()
        };
        counters(
            &mut encoder,
            "quire_blob_hedges_sent",
            "Second attempts sent for slow blob gets and creates, by world",
            &hedges(|h| h.sent),
        )?;
        counters(
            &mut encoder,
            "quire_blob_hedges_won",
            "Second attempts that answered before the first, by world",
            &hedges(|h| h.won),
        )
    }
}
