//! A counting HTTP proxy in front of the local S3 server, for `bench peers`: every store under
//! test talks to the bucket through it, so one method counts every store's bucket requests
//! and bytes, whatever its client library. It forwards each request unchanged, `Host` header
//! included (S3 signatures cover it), and streams bodies through.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Kinds of bucket request, as the table shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Put,
    Get,
    List,
    Other,
}

const KINDS: [Kind; 4] = [Kind::Put, Kind::Get, Kind::List, Kind::Other];

/// What went through the proxy so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    requests: [u64; KINDS.len()],
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// How many PUTs had been answered: where this reading's PUT latencies end.
    puts_answered: usize,
}

impl Reading {
    pub(crate) fn requests(&self, kind: Kind) -> u64 {
        self.requests[kind as usize]
    }

    pub(crate) fn total(&self) -> u64 {
        self.requests.iter().sum()
    }

    /// What happened between `earlier` and this reading.
    pub(crate) fn since(&self, earlier: &Reading) -> Reading {
        let mut requests = [0; KINDS.len()];
        for (i, n) in requests.iter_mut().enumerate() {
            *n = self.requests[i] - earlier.requests[i];
        }
        Reading {
            requests,
            bytes_up: self.bytes_up - earlier.bytes_up,
            bytes_down: self.bytes_down - earlier.bytes_down,
            puts_answered: self.puts_answered - earlier.puts_answered,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    requests: [AtomicU64; KINDS.len()],
    bytes_up: Arc<AtomicU64>,
    bytes_down: Arc<AtomicU64>,
    /// Each answered PUT's time from reaching the proxy to the bucket's answer headers, in
    /// answer order: the bucket's own write latency, which a store's commit cannot beat.
    put_latencies: Mutex<Vec<Duration>>,
}

/// The running proxy; it stops when dropped.
#[derive(Debug)]
pub(crate) struct CountingProxy {
    /// `http://127.0.0.1:PORT`, to give clients in place of the server's endpoint.
    pub endpoint: String,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CountingProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream` (`http://host:port`).
    pub(crate) async fn start(upstream: &str) -> Result<CountingProxy> {
        let upstream: Uri = upstream
            .parse()
            .with_context(|| format!("the S3 endpoint {upstream:?} is not a URL"))?;
        let authority = upstream
            .authority()
            .context("the S3 endpoint names no host")?
            .clone();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address: SocketAddr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        // No Nagle on either side: a request or answer written in pieces must not wait for
        // the peer's delayed ACK, or the proxy would add latency the bucket does not have.
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, ProxyBody> =
            Client::builder(TokioExecutor::new()).build(connector);
        let shared = counters.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (client, counters, authority) =
                    (client.clone(), shared.clone(), authority.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        forward(client.clone(), counters.clone(), authority.clone(), request)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(CountingProxy {
            endpoint: format!("http://{address}"),
            counters,
            task,
        })
    }

    pub(crate) fn reading(&self) -> Reading {
        let mut requests = [0; KINDS.len()];
        for (i, n) in requests.iter_mut().enumerate() {
            *n = self.counters.requests[i].load(Ordering::Relaxed);
        }
        Reading {
            requests,
            bytes_up: self.counters.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.counters.bytes_down.load(Ordering::Relaxed),
            puts_answered: self.put_latencies_len(),
        }
    }

    fn put_latencies_len(&self) -> usize {
        self.counters
            .put_latencies
            .lock()
            .expect("latency lock")
            .len()
    }

    /// The latencies of the PUTs answered between two readings, sorted.
    pub(crate) fn put_latencies(&self, open: &Reading, closed: &Reading) -> Vec<Duration> {
        let all = self.counters.put_latencies.lock().expect("latency lock");
        let end = closed.puts_answered.min(all.len());
        let mut window = all[open.puts_answered.min(end)..end].to_vec();
        window.sort_unstable();
        window
    }
}

/// An S3 request's kind: a GET of the bucket itself (no key) or with `list-type` lists.
fn kind(method: &Method, uri: &Uri) -> Kind {
    match *method {
        Method::PUT => Kind::Put,
        Method::GET => {
            let key = uri.path().trim_start_matches('/').split_once('/');
            let listing = uri.query().is_some_and(|q| q.contains("list-type"));
            if listing || key.is_none_or(|(_, key)| key.is_empty()) {
                Kind::List
            } else {
                Kind::Get
            }
        }
        _ => Kind::Other,
    }
}

type ProxyBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// A body whose data bytes are added to `counter` as they pass.
fn counted<B>(body: B, counter: Arc<AtomicU64>) -> ProxyBody
where
    B: hyper::body::Body<Data = Bytes, Error = hyper::Error> + Send + 'static,
{
    body.map_frame(move |frame| {
        if let Some(data) = frame.data_ref() {
            counter.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        frame
    })
    .boxed_unsync()
}

async fn forward(
    client: Client<HttpConnector, ProxyBody>,
    counters: Arc<Counters>,
    authority: hyper::http::uri::Authority,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, hyper::Error> {
    let kind = kind(request.method(), request.uri());
    counters.requests[kind as usize].fetch_add(1, Ordering::Relaxed);
    let received = Instant::now();
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(path)
        .build()
        .expect("an upstream URL from valid parts");
    // The client keeps the request's own `Host` header, which the signature covers.
    let request = Request::from_parts(parts, counted(body, counters.bytes_up.clone()));
    match client.request(request).await {
        Ok(response) => {
            if kind == Kind::Put {
                let latency = received.elapsed();
                counters
                    .put_latencies
                    .lock()
                    .expect("latency lock")
                    .push(latency);
            }
            let (parts, body) = response.into_parts();
            Ok(Response::from_parts(
                parts,
                counted(body, counters.bytes_down.clone()),
            ))
        }
        Err(e) => {
            let mut response = Response::new(
                http_body_util::Full::new(Bytes::from(format!("proxy: {e}")))
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
            *response.status_mut() = hyper::StatusCode::BAD_GATEWAY;
            Ok(response)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream on 127.0.0.1 that reads each request's body and answers `hello`.
    async fn upstream() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|request: Request<Incoming>| async {
                        request.into_body().collect().await?;
                        Ok::<_, hyper::Error>(Response::new(http_body_util::Full::new(
                            Bytes::from_static(b"hello"),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        format!("http://{address}")
    }

    #[tokio::test]
    async fn every_request_and_byte_through_the_proxy_is_counted_by_kind() {
        let proxy = CountingProxy::start(&upstream().await).await.unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let url = |path: &str| format!("{}{path}", proxy.endpoint);
        let before = proxy.reading();
        let put = client
            .put(url("/bucket/key"))
            .body("0123456789")
            .send()
            .await
            .unwrap();
        assert_eq!(put.text().await.unwrap(), "hello", "forwarded and answered");
        for path in ["/bucket/key", "/bucket?list-type=2&prefix=log/", "/bucket/"] {
            client
                .get(url(path))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
        }
        client.delete(url("/bucket/key")).send().await.unwrap();
        let seen = proxy.reading().since(&before);
        assert_eq!(seen.requests(Kind::Put), 1);
        assert_eq!(seen.requests(Kind::Get), 1);
        assert_eq!(seen.requests(Kind::List), 2);
        assert_eq!(seen.requests(Kind::Other), 1);
        assert_eq!(seen.total(), 5);
        assert_eq!(seen.bytes_up, 10);
        // Five answers of five bytes (the DELETE's answer is counted as it streams through).
        assert_eq!(seen.bytes_down, 25);
        let after = proxy.reading();
        assert_eq!(
            proxy.put_latencies(&before, &after).len(),
            1,
            "the one PUT's latency is recorded"
        );
        assert!(proxy.put_latencies(&after, &after).is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_upstream_is_a_bad_gateway_not_a_hang() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = closed.local_addr().unwrap();
        drop(closed);
        let proxy = CountingProxy::start(&format!("http://{address}"))
            .await
            .unwrap();
        let answer = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("{}/bucket/key", proxy.endpoint))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), reqwest::StatusCode::BAD_GATEWAY);
        assert_eq!(proxy.reading().requests(Kind::Get), 1);
    }
}
