//! The reliability gate (see `quire_conformance::gate`). The short form runs with the tests
//! (three seeds, one simulated minute on 10,000 documents, and one seed twice to show it
//! replays exactly); `cargo xtask gate` runs the full one (ten simulated minutes on a
//! million documents). `QUIRE_SIM_SEED=N` replays one seed; `QUIRE_GATE_DOCS` and
//! `QUIRE_GATE_MINUTES` resize the full run.
#![allow(
    clippy::disallowed_methods,
    reason = "the gate runs against real servers and measures real time"
)]

use std::time::Duration;

use quire_conformance::gate::{GateConfig, GateReport, run_gate};

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// Runs the short gate of each seed, each on its own thread and its own paused
/// current-thread runtime (what makes a run reproducible), so the runs share the machine's
/// cores.
fn short_gates(seeds: Vec<u64>) -> Vec<GateReport> {
    let runs: Vec<_> = seeds
        .into_iter()
        .map(|seed| {
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .start_paused(true)
                    .build()
                    .expect("a runtime builds");
                runtime.block_on(run_gate(&GateConfig::short(seed)))
            })
        })
        .collect();
    runs.into_iter()
        .map(|run| run.join().expect("a gate run panicked"))
        .collect()
}

#[test]
fn the_short_gate_loses_no_acknowledged_write() {
    let seeds = match env_u64("QUIRE_SIM_SEED") {
        Some(seed) => vec![seed],
        None => vec![1, 2, 3],
    };
    for report in short_gates(seeds) {
        println!("{report}");
        assert!(report.passed(), "{report}");
        assert!(report.acknowledged > report.offered / 2, "{report}");
        assert!(report.checkpoints_written > 0, "{report}");
        assert!(report.checkpoint > report.initial_checkpoint, "{report}");
    }
}

/// One seed run twice at once (sharing the process, as parallel tests do) gives one
/// outcome: the same acknowledged writes at the same versions and simulated times, the same
/// refusals, faults and figures.
#[test]
fn a_seed_replays_the_short_gate_exactly() {
    let seed = env_u64("QUIRE_SIM_SEED").unwrap_or(4);
    let reports = short_gates(vec![seed, seed]);
    let (first, second) = (&reports[0], &reports[1]);
    assert!(first.passed(), "{first}");
    assert_eq!(first.to_string(), second.to_string());
    assert_eq!(first.outcome, second.outcome);
}

#[tokio::test(start_paused = true)]
#[ignore = "ten simulated minutes on a million documents: run with `cargo xtask gate`"]
async fn the_full_gate_loses_no_acknowledged_write() {
    let seed = env_u64("QUIRE_SIM_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    // What the stores warn of (failed compaction steps, retries) shows with RUST_LOG set.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut config = GateConfig::full(seed);
    if let Some(docs) = env_u64("QUIRE_GATE_DOCS") {
        config.documents = docs;
    }
    if let Some(minutes) = env_u64("QUIRE_GATE_MINUTES") {
        config.duration = Duration::from_secs(60 * minutes);
    }
    let wall = std::time::Instant::now();
    let report = run_gate(&config).await;
    println!("{report}");
    println!("  wall time {:.1} s", wall.elapsed().as_secs_f64());
    assert!(report.passed(), "{report}");
}
