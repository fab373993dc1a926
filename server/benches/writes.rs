//! Writes per second from the defaults: `cargo xtask bench writes [-- --seconds S
//! --clients N --concurrency C]`.
//!
//! One client: the development token of `quire serve` as the README runs it (the embedded
//! default), `C` requests at once (its share is 32). Several clients: the same world and
//! limits with a tokens file of `N` tokens, each client `C` at once. Every write publishes
//! a new small document over HTTP keep-alive. Reports accepted writes per second, refusals
//! (429) and latency.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};
use support::{Served, quantile};

struct Args {
    seconds: u64,
    clients: usize,
    concurrency: usize,
}

fn args() -> Args {
    let mut args = Args {
        seconds: 10,
        clients: 4,
        concurrency: 32,
    };
    let given: Vec<String> = std::env::args().skip(1).collect();
    for pair in given.windows(2) {
        let value = || pair[1].parse().ok();
        match pair[0].as_str() {
            "--seconds" => args.seconds = value().expect("--seconds S") as u64,
            "--clients" => args.clients = value().expect("--clients N"),
            "--concurrency" => args.concurrency = value().expect("--concurrency C"),
            _ => {}
        }
    }
    args
}

struct Outcome {
    accepted: u64,
    refused: u64,
    failed: u64,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

/// `tokens.len()` clients, each `concurrency` writers at once, for `seconds`.
async fn run(base: &str, tokens: &[String], concurrency: usize, seconds: u64) -> Outcome {
    let (accepted, refused, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, token) in tokens.iter().enumerate() {
        let http = reqwest::Client::new();
        for w in 0..concurrency {
            let (http, token, base) = (http.clone(), token.clone(), base.to_owned());
            let (accepted, refused, failed) = (accepted.clone(), refused.clone(), failed.clone());
            tasks.spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let answer = http
                        .put(format!("{base}/bench/c{c}/w{w}/d{i}.md"))
                        .bearer_auth(&token)
                        .body(format!("# Document {i}\n\nwritten by {c}/{w}\n"))
                        .send()
                        .await;
                    i += 1;
                    match answer.map(|r| r.status().as_u16()) {
                        Ok(200 | 201) => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                            latencies.push(t.elapsed());
                        }
                        Ok(429) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                latencies
            });
        }
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.unwrap());
    }
    latencies.sort();
    Outcome {
        accepted: accepted.load(Ordering::Relaxed),
        refused: refused.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        latencies,
        elapsed: started.elapsed(),
    }
}

fn report(what: &str, outcome: &Outcome) {
    println!(
        "{what}: {:.0} writes/s accepted ({} in {:.1} s), {} refused (429), {} failed, p50 {:?}, p99 {:?}",
        outcome.accepted as f64 / outcome.elapsed.as_secs_f64(),
        outcome.accepted,
        outcome.elapsed.as_secs_f64(),
        outcome.refused,
        outcome.failed,
        quantile(&outcome.latencies, 0.5),
        quantile(&outcome.latencies, 0.99),
    );
}

#[tokio::main]
async fn main() {
    let args = args();
    {
        let served = Served::start();
        let base = format!("http://{}", served.http);
        let outcome = run(
            &base,
            std::slice::from_ref(&served.token),
            args.concurrency,
            args.seconds,
        )
        .await;
        report(
            &format!(
                "one client (development token, {} at once)",
                args.concurrency
            ),
            &outcome,
        );
    }
    // The embedded default's world and limits, with one token per client.
    let mut tokens_file = String::new();
    let mut secrets = Vec::new();
    for c in 0..args.clients {
        let secret = TokenSecret::generate().expect("a token");
        let entry = TokenEntrySpec {
            hash: secret.hash().to_string(),
            operations: vec![Operation::Publish],
            paths: vec!["/**".into()],
            expires: None,
        };
        tokens_file.push_str(&entry.to_toml(&format!("writer-{c}")));
        secrets.push(secret.as_str().to_owned());
    }
    let config = quire_server::config::DEFAULT_CONFIG
        .replace("development_token = true", "tokens_file = \"tokens.toml\"");
    let served = Served::start_with(Some(&[
        ("quire.toml", config),
        ("tokens.toml", tokens_file),
    ]));
    let base = format!("http://{}", served.http);
    let outcome = run(&base, &secrets, args.concurrency, args.seconds).await;
    report(
        &format!(
            "{} clients (a token each, {} at once each)",
            args.clients, args.concurrency
        ),
        &outcome,
    );
}
