//! One server process assembled from its configuration: [`run`] opens the worlds through
//! the wiring, registers the metrics, loads (or generates) the certificates, binds the QUIC
//! and HTTP listeners (and the peer-hint listener when replicas are configured), reloads
//! certificates and tokens on SIGHUP, and hands back a [`Running`] server. `quire serve` is
//! argument parsing plus this; tests start the same assembly in-process.
//!
//! Invariants: every listener is bound before [`run`] returns, so the addresses in
//! [`Running`] answer at once; [`Running::wait`] returns only after both listeners have
//! drained, the peer tasks have stopped and every world's store is closed. Dropping a
//! [`Running`] asks it to stop without waiting for the drain.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, PeersConfig};
use crate::metrics::Metrics;
use crate::peers::{Peers, ReplicaIdentity, listener, sender};
use crate::quic::{self, QuicSettings};
use crate::tls::ServerCertificates;
use crate::worlds::{DevelopmentToken, Worlds};
use crate::{http, reload, wiring};

/// A server [`run`] started: where it listens, what it generated, and how to stop it.
#[derive(Debug)]
pub struct Running {
    /// The bound HTTP address.
    pub http: SocketAddr,
    /// The bound QUIC (Mark) address.
    pub quic: SocketAddr,
    /// The bound peer-hint address, when replicas are configured.
    pub peer_hints: Option<SocketAddr>,
    /// The development tokens generated for worlds without a tokens file (shown once).
    pub development_tokens: Vec<DevelopmentToken>,
    /// The server certificate (configured, or a generated development one).
    pub certificates: Arc<ServerCertificates>,
    /// The worlds served.
    pub worlds: Arc<Worlds>,
    stop: watch::Sender<bool>,
    peer_stop: CancellationToken,
    quic_server: Option<JoinHandle<()>>,
    http_server: Option<JoinHandle<std::io::Result<()>>>,
    peer_server: Option<JoinHandle<()>>,
}

/// Assembles and starts the server `config` describes. `config_path` is the file it came
/// from, if any: a development certificate is written to `data/tls` beside it (else under
/// the working directory).
pub async fn run(config: Config, config_path: Option<&Path>) -> anyhow::Result<Running> {
    let peers = Peers::new();
    let (worlds, development_tokens) = match &config.peers {
        None => Worlds::open(&config, &wiring::Backends).await?,
        Some(_) => {
            let backends = wiring::HintingBackends {
                peers: peers.clone(),
            };
            Worlds::open(&config, &backends).await?
        }
    };
    if !development_tokens.is_empty() {
        for (transport, address) in config.listen.beyond_loopback() {
            tracing::warn!(
                "a world with a development token (publish everywhere) is served over {transport} on {address}, beyond this machine; anyone who sees the token can write every document"
            );
        }
    }
    let worlds = Arc::new(worlds);
    let mut metrics = Metrics::for_worlds(worlds.clone());
    peers.counters().register(metrics.registry_mut());
    let metrics = Arc::new(metrics);
    let peer_stop = CancellationToken::new();
    let (peer_hints, peer_server) = match &config.peers {
        None => (None, None),
        Some(peer_config) => {
            let (address, server) = start_peers(peer_config, peers.clone(), peer_stop.clone())?;
            (Some(address), Some(server))
        }
    };
    let certificates = Arc::new(server_certificates(&config, config_path)?);
    let settings = QuicSettings::from(&config.listen);
    let endpoint = quic::bind(&settings, &certificates, worlds.clone())
        .with_context(|| format!("bind {} (UDP)", settings.address))?;
    let quic_address = endpoint.local_addr()?;
    let listener = tokio::net::TcpListener::bind(config.listen.http)
        .await
        .with_context(|| format!("bind {}", config.listen.http))?;
    let http_address = listener.local_addr()?;
    reload_on_hangup(worlds.clone(), certificates.clone())?;
    let (stop, stopped) = watch::channel(false);
    let until_stopped = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let quic_server = tokio::spawn(quic::serve(
        endpoint,
        worlds.clone(),
        metrics.clone(),
        settings.clone(),
        until_stopped(stopped.clone()),
    ));
    let http_server = tokio::spawn(http::serve_with(
        listener,
        worlds.clone(),
        metrics,
        config.listen.http_settings(),
        until_stopped(stopped),
    ));
    Ok(Running {
        http: http_address,
        quic: quic_address,
        peer_hints,
        development_tokens,
        certificates,
        worlds,
        stop,
        peer_stop,
        quic_server: Some(quic_server),
        http_server: Some(http_server),
        peer_server,
    })
}

impl Running {
    /// Asks the listeners to drain (and the peer tasks to stop); [`Running::wait`] waits.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until the server has stopped: both listeners drained (after [`Running::stop`]),
    /// then the peer tasks stopped and every world's store closed.
    pub async fn wait(mut self) -> anyhow::Result<()> {
        if let Some(quic_server) = self.quic_server.take() {
            quic_server.await?;
        }
        if let Some(http_server) = self.http_server.take() {
            http_server.await??;
        }
        self.peer_stop.cancel();
        if let Some(peer_server) = self.peer_server.take() {
            peer_server.await?;
        }
        self.worlds.close().await;
        Ok(())
    }

    /// [`Running::stop`], then [`Running::wait`].
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stop();
        self.wait().await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.peer_stop.cancel();
    }
}

/// Binds the hint listener and starts the senders; both stop when `stop` is cancelled.
fn start_peers(
    config: &PeersConfig,
    peers: Arc<Peers>,
    stop: CancellationToken,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let identity = ReplicaIdentity::from_files(&config.cert, &config.key)?;
    let endpoint = listener::bind(config.listen, &identity, &peers)
        .with_context(|| format!("bind {} (UDP, peer hints)", config.listen))?;
    let own = endpoint.local_addr()?;
    let set = sender::PeerSet {
        addresses: config.addresses.clone(),
        dns: config.dns.clone(),
        resolve_every: config.resolve_every,
        own,
    };
    tokio::spawn(sender::run(
        peers.clone(),
        identity,
        set,
        sender::SenderSettings::default(),
        stop.clone(),
    ));
    let server = tokio::spawn(listener::serve(endpoint, peers, async move {
        stop.cancelled().await
    }));
    Ok((own, server))
}

/// The configured certificate, or a development certificate for every world's authorities
/// written to `data/tls` beside the configuration file (or under the working directory).
fn server_certificates(
    config: &Config,
    config_path: Option<&Path>,
) -> anyhow::Result<ServerCertificates> {
    let base = config_path.and_then(Path::parent).unwrap_or(Path::new("."));
    let development_dir = base.join("data").join("tls");
    let names: Vec<String> = config
        .worlds
        .iter()
        .flat_map(|world| world.authorities.iter().map(|a| a.as_str().to_owned()))
        .collect();
    Ok(ServerCertificates::from_config(
        config.tls.as_ref(),
        &development_dir,
        &names,
    )?)
}

/// On SIGHUP, reloads the certificates and every world's tokens file.
#[cfg(unix)]
fn reload_on_hangup(
    worlds: Arc<Worlds>,
    certificates: Arc<ServerCertificates>,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup()).context("listen for SIGHUP")?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            // Failures are logged by the reload and keep the old state.
            let _ = reload::reload(&worlds, Some(&certificates));
        }
    });
    Ok(())
}

#[cfg(not(unix))]
fn reload_on_hangup(
    _worlds: Arc<Worlds>,
    _certificates: Arc<ServerCertificates>,
) -> anyhow::Result<()> {
    Ok(())
}
