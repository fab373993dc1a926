//! The Mark protocol over QUIC: the listener, one request per bidirectional stream, the
//! world chosen by the connection's SNI. Each stream's request is read with the codec's
//! limits (malformed input gets the codec's answer, and the connection stays open for the
//! next stream), then answered by the same handlers as the HTTP gateway, so auth, admission
//! limits and the per-request timeout are the same, and recorded in the same [`Metrics`].
//!
//! A WATCH stream stays open and carries the watch's blocks (`handlers::watch`); each
//! connection may hold watches on at most half its streams.
//!
//! Memory: a connection's unread data is bounded by its flow-control windows
//! ([`CONNECTION_RECEIVE_WINDOW`] in all, [`STREAM_RECEIVE_WINDOW`] per stream), and at most
//! [`READING_STREAMS`] of its streams are read into requests at once. A request's line and
//! metadata block are read first (at most 4 KiB + 64 KiB), since they carry the token that
//! names its client; its body (at most 1 MiB) only once the world's limits admit that
//! client, so a refused request never has its body buffered. Datagrams are refused. At most `max_connections` connections are open;
//! past half of them, a client must prove its address (a Retry) before its handshake runs.
//!
//! Shutdown stops accepting connections and streams, ends open watches with `closing`, lets
//! the streams in flight finish (for at most the shutdown timeout), then closes the
//! endpoint.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{HandshakeData, QuicServerConfig};
use quinn::{Connection, Endpoint, RecvStream, SendStream, VarInt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ListenConfig;
use crate::handlers::{self, WatchContext, World};
use crate::limits::ConnectionWatches;
use crate::mark::{RequestLimits, Response, Status, Verb, read_request_head};
use crate::metrics::Metrics;
use crate::tls::ServerCertificates;
use crate::worlds::Worlds;

/// The application error code a server closes connections with when it shuts down.
pub const CLOSE_SHUTDOWN: u32 = 0;
/// The application error code for a connection whose SNI names no world (normally refused
/// at the handshake already).
pub const CLOSE_UNKNOWN_WORLD: u32 = 1;
/// The code a stream's receive side is stopped with once its request was refused.
const STOP_REFUSED: u32 = 0;
/// Bytes a connection may have in flight to the server, unread, over all its streams.
pub const CONNECTION_RECEIVE_WINDOW: u32 = 2 * 1024 * 1024;
/// Bytes one stream may have in flight to the server, unread.
pub const STREAM_RECEIVE_WINDOW: u32 = 256 * 1024;
/// Streams of one connection read into requests at once; the others wait, their data held
/// back by flow control.
pub const READING_STREAMS: usize = 4;

/// The listener's transport settings (`[listen]`).
#[derive(Clone, Debug)]
pub struct QuicSettings {
    pub address: SocketAddr,
    /// Concurrent bidirectional streams per connection.
    pub max_incoming_streams: u32,
    pub idle_timeout: Duration,
    /// How long a shutdown waits for streams in flight.
    pub shutdown_timeout: Duration,
    /// Connections open at once; more are refused.
    pub max_connections: usize,
}

impl From<&ListenConfig> for QuicSettings {
    fn from(listen: &ListenConfig) -> Self {
        QuicSettings {
            address: listen.quic,
            max_incoming_streams: listen.max_incoming_streams.get(),
            idle_timeout: listen.idle_timeout,
            shutdown_timeout: listen.shutdown_timeout,
            max_connections: usize::try_from(listen.max_quic_connections.get())
                .unwrap_or(usize::MAX),
        }
    }
}

/// Binds the QUIC endpoint: TLS from `certificates`, SNI checked against `worlds`.
pub fn bind(
    settings: &QuicSettings,
    certificates: &Arc<ServerCertificates>,
    worlds: Arc<Worlds>,
) -> std::io::Result<Endpoint> {
    let tls = certificates
        .server_config(worlds)
        .map_err(std::io::Error::other)?;
    let crypto = QuicServerConfig::try_from(tls).map_err(std::io::Error::other)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(settings.max_incoming_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .max_idle_timeout(Some(
            settings
                .idle_timeout
                .try_into()
                .map_err(std::io::Error::other)?,
        ))
        .receive_window(VarInt::from_u32(CONNECTION_RECEIVE_WINDOW))
        .stream_receive_window(VarInt::from_u32(STREAM_RECEIVE_WINDOW))
        .datagram_receive_buffer_size(None);
    config.transport_config(Arc::new(transport));
    Endpoint::server(config, settings.address)
}

/// Serves `endpoint` (bound with `settings`) until `shutdown` completes, then drains the
/// streams in flight (for at most the settings' shutdown timeout) and closes the endpoint.
pub async fn serve(
    endpoint: Endpoint,
    worlds: Arc<Worlds>,
    metrics: Arc<Metrics>,
    settings: QuicSettings,
    shutdown: impl Future<Output = ()> + Send,
) {
    let shutdown_timeout = settings.shutdown_timeout;
    let streams = TaskTracker::new();
    let stop = CancellationToken::new();
    let max_connections = settings.max_connections.max(1);
    let connections = Arc::new(tokio::sync::Semaphore::new(max_connections));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let Ok(slot) = connections.clone().try_acquire_owned() else {
                    tracing::debug!(peer = %incoming.remote_address(), "QUIC connection refused: at the connection cap");
                    incoming.refuse();
                    continue;
                };
                // Under load, a handshake costs the server work only for a client that
                // proved it receives at its address.
                let busy = connections.available_permits() < max_connections / 2;
                if busy && !incoming.remote_address_validated() && incoming.may_retry() {
                    if let Err(error) = incoming.retry() {
                        tracing::debug!(%error, "QUIC retry failed");
                    }
                    continue;
                }
                let server = ConnectionServer {
                    max_streams: settings.max_incoming_streams,
                    worlds: worlds.clone(),
                    metrics: metrics.clone(),
                    streams: streams.clone(),
                    stop: stop.clone(),
                };
                streams.spawn(server.run(incoming, slot));
            }
        }
    }
    // New connections are refused from here on; open ones get no new streams.
    endpoint.set_server_config(None);
    stop.cancel();
    streams.close();
    if tokio::time::timeout(shutdown_timeout, streams.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout = ?shutdown_timeout,
            "QUIC streams still open at the end of the shutdown timeout"
        );
    }
    endpoint.close(VarInt::from_u32(CLOSE_SHUTDOWN), b"server shutting down");
    endpoint.wait_idle().await;
}

/// One connection's accept loop.
struct ConnectionServer {
    /// The connection's concurrent stream limit (half of it may hold watches).
    max_streams: u32,
    worlds: Arc<Worlds>,
    metrics: Arc<Metrics>,
    streams: TaskTracker,
    stop: CancellationToken,
}

impl ConnectionServer {
    async fn run(self, incoming: quinn::Incoming, _slot: tokio::sync::OwnedSemaphorePermit) {
        // A handshake still running at shutdown is dropped rather than waited for.
        let handshake = tokio::select! {
            () = self.stop.cancelled() => return,
            handshake = incoming => handshake,
        };
        let connection = match handshake {
            Ok(connection) => connection,
            Err(error) => {
                tracing::debug!(%error, "QUIC handshake failed");
                return;
            }
        };
        let Some(world) = self.world_of(&connection) else {
            connection.close(
                VarInt::from_u32(CLOSE_UNKNOWN_WORLD),
                b"no world is served at this name",
            );
            return;
        };
        let peer = connection.remote_address().ip();
        let watches = WatchContext {
            connection: Some(ConnectionWatches::for_stream_limit(self.max_streams)),
            peer: Some(peer),
            draining: self.stop.clone(),
        };
        let reading = Arc::new(tokio::sync::Semaphore::new(READING_STREAMS));
        loop {
            tokio::select! {
                () = self.stop.cancelled() => break,
                accepted = connection.accept_bi() => match accepted {
                    Ok((send, recv)) => {
                        let stream = answer(
                            world.clone(),
                            self.metrics.clone(),
                            watches.clone(),
                            reading.clone(),
                            send,
                            recv,
                        );
                        self.streams.spawn(stream);
                    }
                    Err(error) => {
                        tracing::debug!(%error, "QUIC connection ended");
                        break;
                    }
                },
            }
        }
    }

    /// The world the connection's SNI names (no SNI: the name-less choice of
    /// [`Worlds::for_host`], which only a single-world server makes).
    fn world_of(&self, connection: &Connection) -> Option<Arc<World>> {
        let sni = connection
            .handshake_data()
            .and_then(|data| data.downcast::<HandshakeData>().ok())
            .and_then(|data| data.server_name);
        self.worlds.for_host(sni.as_deref().unwrap_or(""))
    }
}

/// Reads one request from the stream (holding one of the connection's `reading` slots),
/// answers it, and finishes the stream.
async fn answer(
    world: Arc<World>,
    metrics: Arc<Metrics>,
    watches: WatchContext,
    reading: Arc<tokio::sync::Semaphore>,
    mut send: SendStream,
    mut recv: RecvStream,
) {
    // tokio's clock: real time in a server, paused time in a test.
    let started = tokio::time::Instant::now();
    let deadline = tokio::time::Instant::now() + world.limiter.request_timeout();
    let peer = watches.peer;
    // The request line and metadata first: they name the client (its token), so the body,
    // the bulk of a request, is read only once that client's share admits it.
    let head = tokio::time::timeout_at(deadline, async {
        // The semaphore is never closed.
        let _reading = reading.acquire().await.ok();
        read_request_head(&mut recv, RequestLimits::default()).await
    })
    .await;
    let read = match head {
        Ok(Ok(head)) => {
            let request = head.request();
            let admission = if request.verb == Verb::Watch {
                // A watch is admitted by its own slots when it opens.
                None
            } else {
                match handlers::admit(&world, &request, peer).await {
                    Ok(admission) => Some(admission),
                    Err(response) => {
                        metrics.observe(&world.name, request.verb, response.status, started);
                        let _ = recv.stop(VarInt::from_u32(STOP_REFUSED));
                        deliver(&mut send, &response).await;
                        return;
                    }
                }
            };
            let body = tokio::time::timeout_at(deadline, async {
                let _reading = reading.acquire().await.ok();
                head.read_body(&mut recv).await
            })
            .await;
            body.map(|read| read.map(|request| (request, admission)))
        }
        Ok(Err(error)) => Ok(Err(error)),
        Err(elapsed) => Err(elapsed),
    };
    let response = match read {
        Ok(Ok((request, _))) if request.verb == Verb::Watch => {
            match handlers::open_watch(world.clone(), request, &watches).await {
                Ok(watch) => {
                    metrics.observe(&world.name, Verb::Watch, Status::Ok, started);
                    if let Err(error) = watch.write_to(&mut send).await {
                        tracing::debug!(%error, "QUIC watch ended by the client");
                        return;
                    }
                    if send.finish().is_ok() {
                        // In flight until the client has the terminal block (see below).
                        let _ = send.stopped().await;
                    }
                    return;
                }
                Err(response) => {
                    metrics.observe(&world.name, Verb::Watch, response.status, started);
                    response
                }
            }
        }
        Ok(Ok((request, admission))) => {
            let verb = request.verb;
            let response = match admission {
                Some(admission) => handlers::handle_admitted(&world, request, admission).await,
                None => handlers::handle_from(&world, request, peer).await,
            };
            metrics.observe(&world.name, verb, response.status, started);
            response
        }
        Ok(Err(error)) => {
            tracing::debug!(%error, world = %world.name, "refused a QUIC request");
            // The rest of the request is not wanted: tell the client to stop sending.
            let _ = recv.stop(VarInt::from_u32(STOP_REFUSED));
            error.to_response()
        }
        Err(_elapsed) => {
            let _ = recv.stop(VarInt::from_u32(STOP_REFUSED));
            Response::error(Status::ServerError, "could not read request: timed out")
        }
    };
    deliver(&mut send, &response).await;
}

/// Sends `response` and finishes the stream.
async fn deliver(send: &mut SendStream, response: &Response) {
    if let Err(error) = send.write_all(&response.encode()).await {
        tracing::debug!(%error, "QUIC response not delivered");
        return;
    }
    if send.finish().is_ok() {
        // Count the stream as in flight until the client has the whole answer, so a
        // shutdown does not close the connection under it.
        let _ = send.stopped().await;
    }
}
