//! Sending hints: the peer set (static addresses and a DNS name, re-resolved every
//! [`PeerSet::resolve_every`], minus this replica's own listener) and one task per peer that
//! sends each world's newest sequence from the outbox, one stream per hint.
//!
//! Coalescing: a task sends one hint at a time and reads the world's sequence only once its
//! stream is open, so every sequence reported while a send is in flight (or while the peer
//! holds back stream credit) collapses into the newest. A failed send drops the connection
//! and waits a backoff (doubling from [`SenderSettings::backoff_base`] to
//! [`SenderSettings::backoff_cap`]) before the task tries again with whatever is newest then.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Connection, Endpoint, VarInt};
use tokio_util::sync::CancellationToken;

use super::{Peers, ReplicaIdentity, SENT_DELIVERED, SENT_FAILED, encode_hint};

/// The name a sender asks for (the certificate is pinned, so the name is not checked).
const PEER_SERVER_NAME: &str = "quire-peer";

/// Timeouts and backoff of the senders.
#[derive(Clone, Debug)]
pub struct SenderSettings {
    /// To establish a connection.
    pub dial_timeout: Duration,
    /// To open a stream and have its hint acknowledged.
    pub send_timeout: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
}

impl Default for SenderSettings {
    fn default() -> Self {
        SenderSettings {
            dial_timeout: Duration::from_secs(3),
            send_timeout: Duration::from_secs(5),
            backoff_base: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(30),
        }
    }
}

/// Where the peers are.
#[derive(Clone, Debug)]
pub struct PeerSet {
    /// `host:port` entries, resolved at every round (an IP literal resolves to itself).
    pub addresses: Vec<String>,
    /// A `name:port` whose every address is a peer (a headless service, say).
    pub dns: Option<String>,
    pub resolve_every: Duration,
    /// This replica's own hint listener, never a peer.
    pub own: SocketAddr,
}

impl PeerSet {
    /// The peers now: every address the entries resolve to, minus this replica.
    pub async fn resolve(&self) -> HashSet<SocketAddr> {
        let mut found = HashSet::new();
        for entry in self.addresses.iter().chain(self.dns.iter()) {
            match tokio::net::lookup_host(entry.as_str()).await {
                Ok(addresses) => found.extend(addresses),
                Err(error) => tracing::debug!(%error, entry, "peer address not resolved"),
            }
        }
        found.retain(|address| !is_self(*address, self.own));
        found
    }
}

/// Whether `address` is this replica's listener `own`: the same port on one of this
/// machine's addresses that `own` listens on.
fn is_self(address: SocketAddr, own: SocketAddr) -> bool {
    if address.port() != own.port() {
        return false;
    }
    if address.ip() == own.ip() {
        return true;
    }
    let local = address.ip().is_loopback() || binds_locally(address.ip());
    local && own.ip().is_unspecified()
}

/// Whether `ip` is an address of this machine (only those can be bound).
fn binds_locally(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Sends hints to the peers of `set` until `stop` is cancelled.
pub async fn run(
    peers: Arc<Peers>,
    identity: ReplicaIdentity,
    set: PeerSet,
    settings: SenderSettings,
    stop: CancellationToken,
) {
    let client = match client_config(&identity) {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "peer hints: no client configuration; sending nothing");
            return;
        }
    };
    let mut running: HashMap<SocketAddr, CancellationToken> = HashMap::new();
    loop {
        let now = set.resolve().await;
        running.retain(|address, task| {
            let keep = now.contains(address);
            if !keep {
                tracing::info!(%address, "peer left the peer set");
                task.cancel();
            }
            keep
        });
        for address in now {
            if running.contains_key(&address) {
                continue;
            }
            tracing::info!(%address, "sending peer hints");
            let task = stop.child_token();
            running.insert(address, task.clone());
            tokio::spawn(send_to(
                peers.clone(),
                client.clone(),
                address,
                settings.clone(),
                task,
            ));
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(set.resolve_every) => {}
        }
    }
}

/// The QUIC client configuration a sender dials peers with.
pub fn client_config(identity: &ReplicaIdentity) -> anyhow::Result<quinn::ClientConfig> {
    let tls = identity.client_config()?;
    let crypto = QuicClientConfig::try_from(tls)?;
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
}

/// One peer's sender.
pub async fn send_to(
    peers: Arc<Peers>,
    client: quinn::ClientConfig,
    address: SocketAddr,
    settings: SenderSettings,
    stop: CancellationToken,
) {
    let mut changes = peers.subscribe();
    let mut link = Link {
        client,
        address,
        endpoint: None,
        connection: None,
    };
    let mut sent: HashMap<String, u64> = HashMap::new();
    let mut backoff = settings.backoff_base;
    // A peer that joins hears the newest sequence of every world at once.
    let mut retry = true;
    loop {
        if !retry {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
        }
        changes.borrow_and_update();
        retry = false;
        for world in peers.due(&sent) {
            let sent_one = tokio::select! {
                () = stop.cancelled() => return,
                sent_one = link.send(&peers, &world, &settings) => sent_one,
            };
            match sent_one {
                Ok(sequence) => {
                    peers.counters().sent(SENT_DELIVERED);
                    sent.insert(world, sequence);
                }
                Err(error) => {
                    peers.counters().sent(SENT_FAILED);
                    tracing::debug!(%address, %error, ?backoff, "peer hint not sent");
                    link.connection = None;
                    retry = true;
                    break;
                }
            }
        }
        if retry {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(settings.backoff_cap);
        } else {
            backoff = settings.backoff_base;
        }
    }
}

/// The connection to one peer, made when a hint needs it.
struct Link {
    client: quinn::ClientConfig,
    address: SocketAddr,
    endpoint: Option<Endpoint>,
    connection: Option<Connection>,
}

impl Link {
    async fn connection(&mut self, settings: &SenderSettings) -> anyhow::Result<Connection> {
        if let Some(connection) = &self.connection
            && connection.close_reason().is_none()
        {
            return Ok(connection.clone());
        }
        let endpoint = match &self.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => {
                let any = match self.address {
                    SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                };
                let mut endpoint = Endpoint::client(SocketAddr::new(any, 0))?;
                endpoint.set_default_client_config(self.client.clone());
                self.endpoint = Some(endpoint.clone());
                endpoint
            }
        };
        let connecting = endpoint.connect(self.address, PEER_SERVER_NAME)?;
        let connection = tokio::time::timeout(settings.dial_timeout, connecting)
            .await
            .map_err(|_| anyhow::anyhow!("no connection within {:?}", settings.dial_timeout))??;
        self.connection = Some(connection.clone());
        Ok(connection)
    }

    /// Sends `world`'s newest sequence, read once the stream is open; returns it.
    async fn send(
        &mut self,
        peers: &Peers,
        world: &str,
        settings: &SenderSettings,
    ) -> anyhow::Result<u64> {
        let connection = self.connection(settings).await?;
        tokio::time::timeout(settings.send_timeout, async {
            let mut stream = connection.open_uni().await?;
            let sequence = peers
                .newest(world)
                .ok_or_else(|| anyhow::anyhow!("nothing to send for {world}"))?;
            stream
                .write_all(encode_hint(world, sequence).as_bytes())
                .await?;
            stream.finish()?;
            if let Some(code) = stream.stopped().await? {
                anyhow::bail!("the peer stopped the hint stream ({code})");
            }
            Ok(sequence)
        })
        .await
        .map_err(|_| anyhow::anyhow!("hint not acknowledged within {:?}", settings.send_timeout))?
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(connection) = &self.connection {
            connection.close(VarInt::from_u32(0), b"done");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_not_its_own_peer() {
        let any: SocketAddr = "0.0.0.0:6310".parse().unwrap();
        let loopback: SocketAddr = "127.0.0.1:6310".parse().unwrap();
        assert!(is_self(loopback, any));
        assert!(is_self(loopback, loopback));
        assert!(!is_self("127.0.0.1:6311".parse().unwrap(), any));
        assert!(!is_self(
            "127.0.0.1:6310".parse().unwrap(),
            "127.0.0.2:6310".parse().unwrap()
        ));
        // TEST-NET-1 is never this machine's.
        assert!(!is_self("192.0.2.1:6310".parse().unwrap(), any));
    }
}
