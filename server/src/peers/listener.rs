//! The hint listener: QUIC with ALPN `mark-peer` on its own address, the replica certificate
//! required of every client, one hint per unidirectional stream, read with a size bound and a
//! timeout and handed to [`Peers::deliver`]. Bidirectional streams and datagrams are refused;
//! connections are capped, and a connection's unread bytes are bounded by small windows.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Endpoint, RecvStream, VarInt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{MAX_HINT_BYTES, Peers, ReplicaIdentity};

/// Peer connections open at once.
pub const MAX_PEER_CONNECTIONS: usize = 256;
/// Hint streams one connection may have open at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;
/// How long a hint stream may take to arrive whole.
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection without traffic this long is closed (senders keep theirs alive).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Handshake failures (a foreign or missing certificate among them) are counted as this.
pub const RECEIVED_HANDSHAKE_FAILED: &str = "handshake_failed";

/// Binds the hint listener on `address`.
pub fn bind(
    address: SocketAddr,
    identity: &ReplicaIdentity,
    peers: &Peers,
) -> std::io::Result<Endpoint> {
    let tls = identity
        .server_config(peers.counters())
        .map_err(std::io::Error::other)?;
    let crypto = QuicServerConfig::try_from(tls).map_err(std::io::Error::other)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    let window = u32::try_from(MAX_HINT_BYTES).unwrap_or(u32::MAX);
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(0))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_STREAMS_PER_CONNECTION))
        .stream_receive_window(VarInt::from_u32(window))
        .receive_window(VarInt::from_u32(window * MAX_STREAMS_PER_CONNECTION))
        .max_idle_timeout(Some(
            IDLE_TIMEOUT.try_into().map_err(std::io::Error::other)?,
        ))
        .datagram_receive_buffer_size(None);
    config.transport_config(Arc::new(transport));
    Endpoint::server(config, address)
}

/// Serves hints on `endpoint` until `shutdown` completes.
pub async fn serve(endpoint: Endpoint, peers: Arc<Peers>, shutdown: impl Future<Output = ()>) {
    let tasks = TaskTracker::new();
    let stop = CancellationToken::new();
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_PEER_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let Ok(permit) = connections.clone().try_acquire_owned() else {
                    incoming.refuse();
                    continue;
                };
                tasks.spawn(connection(incoming, peers.clone(), stop.clone(), permit));
            }
        }
    }
    endpoint.set_server_config(None);
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    endpoint.close(VarInt::from_u32(0), b"shutting down");
}

async fn connection(
    incoming: quinn::Incoming,
    peers: Arc<Peers>,
    stop: CancellationToken,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let handshake = tokio::select! {
        () = stop.cancelled() => return,
        handshake = incoming => handshake,
    };
    let connection = match handshake {
        Ok(connection) => connection,
        Err(error) => {
            tracing::debug!(%error, "peer hint handshake refused");
            peers.counters().received(RECEIVED_HANDSHAKE_FAILED);
            return;
        }
    };
    let streams = TaskTracker::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            accepted = connection.accept_uni() => match accepted {
                Ok(recv) => {
                    streams.spawn(hint(recv, peers.clone()));
                }
                Err(error) => {
                    tracing::debug!(%error, "peer hint connection ended");
                    break;
                }
            },
        }
    }
    streams.close();
    streams.wait().await;
}

/// Reads one hint stream whole (bounded in size and time) and delivers it.
async fn hint(mut recv: RecvStream, peers: Arc<Peers>) {
    let read = tokio::time::timeout(STREAM_TIMEOUT, recv.read_to_end(MAX_HINT_BYTES)).await;
    match read {
        Ok(Ok(bytes)) => {
            peers.deliver(&bytes);
        }
        // Too long, reset or too slow: not a hint.
        _ => {
            let _ = recv.stop(VarInt::from_u32(0));
            peers.deliver(b"");
        }
    }
}
