//! The flood's memory bound, measured: `cargo xtask bench flood [-- --slow-http N
//! --half-bodies N --quic-connections N --streams N --seconds S]`.
//!
//! Starts a real `quire serve` (the embedded default, as the README runs it), then floods
//! it from many loopback addresses (each its own client): HTTP connections that never
//! finish their headers, PUTs that stop one byte before the end of a 1 MiB body (half with
//! the development token, admitted up to that client's share, half anonymous), and QUIC
//! connections whose streams send half a request and stall (half with the token). Meanwhile a normal client on its own address
//! fetches a document over both transports. Reports the server's resident memory before
//! and under the flood against the bound docs/SPEC.md ("Limits", Memory) states for that
//! many connections, the normal client's p50/p99, and how many slow connections the server
//! closed by its timeouts.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time")]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quire_server::mark::client::{Client, Trust};
use quire_server::mark::{Request, Status, Verb};
use support::{Served, mib, quantile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

struct Args {
    slow_http: usize,
    half_bodies: usize,
    quic_connections: usize,
    streams: usize,
    seconds: u64,
}

fn args() -> Args {
    let mut args = Args {
        slow_http: 2000,
        half_bodies: 400,
        quic_connections: 64,
        streams: 16,
        seconds: 15,
    };
    let given: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < given.len() {
        let value = || given.get(i + 1).and_then(|v| v.parse().ok());
        match given[i].as_str() {
            "--slow-http" => args.slow_http = value().expect("--slow-http N"),
            "--half-bodies" => args.half_bodies = value().expect("--half-bodies N"),
            "--quic-connections" => args.quic_connections = value().expect("--quic-connections N"),
            "--streams" => args.streams = value().expect("--streams N"),
            "--seconds" => args.seconds = value().expect("--seconds S") as u64,
            // `cargo bench` passes `--bench`; anything else is ignored too.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    args
}

/// The `n`-th flooding client's own loopback address in block `block` (127.<block>.x.y).
fn flooder(block: u8, n: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        block,
        (n / 250) as u8,
        (n % 250 + 1) as u8,
    ))
}

async fn connect_from(source: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(server).await
}

/// Reads until the server closes `stream`; whether it did within `guard`.
async fn closed_by_server(stream: &mut TcpStream, guard: Duration) -> bool {
    let mut sink = vec![0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(guard, read_all).await.is_ok()
}

#[tokio::main]
async fn main() {
    let args = args();
    let served = Served::start();
    let http = served.http;
    let base = format!("http://{http}");
    let body = "# Flood\n\n".to_owned() + &"a line of the document\n".repeat(40);
    let writer = reqwest::Client::new();
    let put = writer
        .put(format!("{base}/bench/a.md"))
        .bearer_auth(&served.token)
        .body(body.clone())
        .send()
        .await
        .expect("the server answers");
    assert!(put.status().is_success(), "publish: {}", put.status());

    let normal_http = reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .build()
        .unwrap();
    let trust = Trust::from_pem_file(&served.cert).expect("the development certificate");
    let normal_quic_client = Client::bind("127.0.0.3:0".parse().unwrap(), &trust).unwrap();
    let normal_quic = normal_quic_client
        .connect(served.quic, "localhost")
        .await
        .expect("a QUIC connection");
    let fetch = Request::new(Verb::Fetch, "/bench/a.md");
    for _ in 0..200 {
        normal_http
            .get(format!("{base}/bench/a.md"))
            .send()
            .await
            .unwrap();
        normal_quic.request(&fetch).await.unwrap();
    }
    let (before, _) = served.rss();

    let stop = Arc::new(AtomicBool::new(false));
    let closed_slow = Arc::new(AtomicU64::new(0));
    let closed_half = Arc::new(AtomicU64::new(0));
    let connect_failures = Arc::new(AtomicU64::new(0));
    let guard = Duration::from_secs(args.seconds + 60);
    let mut flood = tokio::task::JoinSet::new();
    for n in 0..args.slow_http {
        let (closed, failures) = (closed_slow.clone(), connect_failures.clone());
        flood.spawn(async move {
            let Ok(mut stream) = connect_from(flooder(1, n), http).await else {
                failures.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let _ = stream
                .write_all(b"GET /bench/a.md HTTP/1.1\r\nHost: local\r\nX-Slow: ")
                .await;
            if closed_by_server(&mut stream, guard).await {
                closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    for n in 0..args.half_bodies {
        let (closed, failures) = (closed_half.clone(), connect_failures.clone());
        // Half of them hold the development token: admitted up to that client's share; the
        // others are anonymous, refused before their body is read.
        let auth = if n % 2 == 0 {
            format!("Authorization: Bearer {}\r\n", served.token)
        } else {
            String::new()
        };
        flood.spawn(async move {
            let Ok(mut stream) = connect_from(flooder(2, n), http).await else {
                failures.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let head = format!(
                "PUT /bench/h{n}.md HTTP/1.1\r\nHost: local\r\n{auth}Content-Length: {}\r\n\r\n",
                1 << 20
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let chunk = vec![b'x'; 64 * 1024];
            let mut left = (1usize << 20) - 1;
            while left > 0 {
                let n = left.min(chunk.len());
                if stream.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                left -= n;
            }
            if closed_by_server(&mut stream, guard).await {
                closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let half_streams = Arc::new(AtomicU64::new(0));
    for n in 0..args.quic_connections {
        let (trust, quic, stop) = (trust.clone(), served.quic, stop.clone());
        // Every other connection writes with the development token (admitted up to its
        // share), the rest with an unknown one (refused at the request's head).
        let token = if n % 2 == 0 {
            served.token.clone()
        } else {
            "quire_unknown".to_owned()
        };
        let opened = half_streams.clone();
        flood.spawn(async move {
            let Ok(client) = Client::bind(SocketAddr::new(flooder(3, n), 0), &trust) else {
                return;
            };
            let Ok(connection) = client.connect(quic, "localhost").await else {
                return;
            };
            let mut held = Vec::new();
            for _ in 0..args.streams {
                let Ok((mut send, recv)) = connection.quic().open_bi().await else {
                    break;
                };
                opened.fetch_add(1, Ordering::Relaxed);
                let mut request =
                    format!("PUBLISH /bench/q.md\n---\nauth: {token}\n---\n").into_bytes();
                request.resize(request.len() + 512 * 1024, b'q');
                // Flow control stops the write part-way: that is the point.
                let _ = tokio::time::timeout(Duration::from_millis(200), send.write_all(&request))
                    .await;
                held.push((send, recv));
            }
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            drop(held);
        });
    }

    // Memory, sampled while the normal client works.
    let sampler = {
        let (stop, pid) = (stop.clone(), served.child.id());
        tokio::spawn(async move {
            let mut peak = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                if let Some(kib) = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
                {
                    peak = peak.max(kib * 1024);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let started = Instant::now();
    let (mut http_times, mut quic_times) = (Vec::new(), Vec::new());
    let (mut http_failures, mut quic_failures) = (0u64, 0u64);
    while started.elapsed() < Duration::from_secs(args.seconds) {
        let t = Instant::now();
        let served = match normal_http.get(format!("{base}/bench/a.md")).send().await {
            Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
            _ => false,
        };
        if served {
            http_times.push(t.elapsed());
        } else {
            http_failures += 1;
        }
        let t = Instant::now();
        match normal_quic.request(&fetch).await {
            Ok(r) if r.status == Status::Ok => quic_times.push(t.elapsed()),
            _ => quic_failures += 1,
        }
    }
    let (under, _) = served.rss();
    stop.store(true, Ordering::Relaxed);
    let sampled_peak = sampler.await.unwrap();
    let (_, hwm) = served.rss();
    // The slow connections are closed by the server's own timeouts (10 s for headers,
    // 30 s for a body).
    while flood.join_next().await.is_some() {}
    http_times.sort();
    quic_times.sort();

    let http_connections = (args.slow_http + args.half_bodies) as u64;
    let world = 256u64 * (2 << 20);
    let bound = before
        + world
        + http_connections * (64 << 10)
        + args.quic_connections as u64 * ((2 << 20) + 4 * (68 << 10));
    println!(
        "flood: {} slow-header HTTP connections, {} half-sent 1 MiB PUTs, {} QUIC connections x {} half-sent streams ({} opened), {} s",
        args.slow_http,
        args.half_bodies,
        args.quic_connections,
        args.streams,
        half_streams.load(Ordering::Relaxed),
        args.seconds
    );
    println!(
        "flood: connections the client could not open: {}",
        connect_failures.load(Ordering::Relaxed)
    );
    println!("rss before the flood: {:.1} MiB", mib(before));
    println!(
        "rss under the flood:  {:.1} MiB at the end, {:.1} MiB sampled peak, {:.1} MiB high-water mark",
        mib(under),
        mib(sampled_peak),
        mib(hwm)
    );
    println!(
        "bound (docs/SPEC.md, Limits): {:.1} MiB = before + 256 requests x 2 MiB + {} HTTP connections x 64 KiB + {} QUIC connections x 2.3 MiB",
        mib(bound),
        http_connections,
        args.quic_connections
    );
    println!("within the bound: {}", hwm <= bound);
    println!(
        "normal client over HTTP: {} requests, p50 {:?}, p99 {:?}, {} failed",
        http_times.len(),
        quantile(&http_times, 0.5),
        quantile(&http_times, 0.99),
        http_failures
    );
    println!(
        "normal client over QUIC: {} requests, p50 {:?}, p99 {:?}, {} failed",
        quic_times.len(),
        quantile(&quic_times, 0.5),
        quantile(&quic_times, 0.99),
        quic_failures
    );
    println!(
        "closed by the server's timeouts: {} of {} slow-header connections, {} of {} half-sent bodies",
        closed_slow.load(Ordering::Relaxed),
        args.slow_http,
        closed_half.load(Ordering::Relaxed),
        args.half_bodies
    );
}
