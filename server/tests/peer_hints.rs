//! Peer hints over real sockets: QUIC `mark-peer` between hint hubs on loopback (delivery,
//! coalescing while a send is in flight, refusal of foreign certificates on both ends, unknown
//! worlds and malformed hints counted, a down peer), and two real `quire serve` processes on
//! one bucket where a hint brings a write on one to a watcher on the other within a second
//! (without it, the other learns of the write from its log poll, every 5 s).
#![allow(
    clippy::disallowed_methods,
    reason = "real processes over real sockets: real time"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Endpoint, VarInt};
use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};
use quire_server::peers::listener;
use quire_server::peers::sender::{self, SenderSettings};
use quire_server::peers::{
    ALPN_PEER, Peers, RECEIVED_FOLLOWED, RECEIVED_FOREIGN_CERTIFICATE, RECEIVED_MALFORMED,
    RECEIVED_UNKNOWN_VERSION, RECEIVED_UNKNOWN_WORLD, ReplicaIdentity, SENT_DELIVERED, SENT_FAILED,
};
use reqwest::StatusCode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod common;

use common::process::Server;

const WORLD: &str = "5d2b9c1e-7a3f-4b6d-8e0c-1f9a2b3c4d5e";
const DEADLINE: Duration = Duration::from_secs(20);

/// A replica certificate and key written as PEM files under `dir` (prefix `name`).
fn write_identity(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["quire-peer".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.join(format!("{name}-cert.pem"));
    let key_path = dir.join(format!("{name}-key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

fn identity(dir: &Path, name: &str) -> ReplicaIdentity {
    let (cert, key) = write_identity(dir, name);
    ReplicaIdentity::from_files(&cert, &key).unwrap()
}

/// Fast backoff, so a test of a down peer sees several attempts.
fn settings() -> SenderSettings {
    SenderSettings {
        dial_timeout: Duration::from_secs(3),
        send_timeout: Duration::from_secs(5),
        backoff_base: Duration::from_millis(20),
        backoff_cap: Duration::from_millis(40),
    }
}

/// Polls `done` until it holds, failing at the deadline.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < give_up, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A hub with a hint listener on loopback whose world `WORLD` reports followed sequences.
struct Receiving {
    peers: Arc<Peers>,
    address: SocketAddr,
    followed: mpsc::UnboundedReceiver<u64>,
    stop: CancellationToken,
}

fn receiving(identity: &ReplicaIdentity) -> Receiving {
    let peers = Peers::new();
    let (tx, followed) = mpsc::unbounded_channel();
    peers.register(
        WORLD.to_owned(),
        Arc::new(move |sequence| {
            let _ = tx.send(sequence);
        }),
    );
    let endpoint = listener::bind("127.0.0.1:0".parse().unwrap(), identity, &peers).unwrap();
    let address = endpoint.local_addr().unwrap();
    let stop = CancellationToken::new();
    let until = stop.clone();
    tokio::spawn(listener::serve(endpoint, peers.clone(), async move {
        until.cancelled().await
    }));
    Receiving {
        peers,
        address,
        followed,
        stop,
    }
}

/// A hub sending to `to` with `identity`.
fn sending(identity: &ReplicaIdentity, to: SocketAddr) -> (Arc<Peers>, CancellationToken) {
    let peers = Peers::new();
    let stop = CancellationToken::new();
    tokio::spawn(sender::send_to(
        peers.clone(),
        sender::client_config(identity).unwrap(),
        to,
        settings(),
        stop.clone(),
    ));
    (peers, stop)
}

#[tokio::test]
async fn a_hint_reaches_the_peer_world_follower() {
    let dir = tempfile::tempdir().unwrap();
    let shared = identity(dir.path(), "replica");
    let mut b = receiving(&shared);
    let (a, stop) = sending(&shared, b.address);
    a.committed(WORLD, 5);
    let followed = tokio::time::timeout(DEADLINE, b.followed.recv()).await;
    assert_eq!(followed.unwrap(), Some(5));
    eventually("the send to be counted", || {
        a.counters().count("sent", SENT_DELIVERED) == 1
    })
    .await;
    assert_eq!(b.peers.counters().count("received", RECEIVED_FOLLOWED), 1);
    a.committed(WORLD, 9);
    let followed = tokio::time::timeout(DEADLINE, b.followed.recv()).await;
    assert_eq!(followed.unwrap(), Some(9), "the connection is reused");
    stop.cancel();
    b.stop.cancel();
}

#[tokio::test]
async fn hints_reported_while_a_send_is_in_flight_coalesce_into_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let shared = identity(dir.path(), "replica");
    // A peer that grants one stream at a time and reads only when told: the sender's second
    // stream cannot open until the first is read.
    let server_peers = Peers::new();
    let tls = shared.server_config(server_peers.counters()).unwrap();
    let mut config =
        quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(tls).unwrap()));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_uni_streams(VarInt::from_u32(1))
        .max_concurrent_bidi_streams(VarInt::from_u32(0));
    config.transport_config(Arc::new(transport));
    let endpoint = Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let (a, stop) = sending(&shared, endpoint.local_addr().unwrap());

    a.committed(WORLD, 1);
    let connection = endpoint.accept().await.unwrap().await.unwrap();
    eventually("the first hint to be acknowledged", || {
        a.counters().count("sent", SENT_DELIVERED) == 1
    })
    .await;
    // The sender wakes for 2 and waits for stream credit (no I/O on the way there).
    a.committed(WORLD, 2);
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    for sequence in 3..=10 {
        a.committed(WORLD, sequence);
    }
    let mut received = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::time::timeout(DEADLINE, connection.accept_uni())
            .await
            .unwrap()
            .unwrap();
        received.push(String::from_utf8(stream.read_to_end(256).await.unwrap()).unwrap());
    }
    assert_eq!(
        received,
        [
            format!("v1 commit {WORLD} 1\n"),
            format!("v1 commit {WORLD} 10\n")
        ]
    );
    eventually("the second hint to be acknowledged", || {
        a.counters().count("sent", SENT_DELIVERED) == 2
    })
    .await;
    assert_eq!(a.counters().count("sent", SENT_DELIVERED), 2);
    stop.cancel();
}

#[tokio::test]
async fn unknown_worlds_and_malformed_hints_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let shared = identity(dir.path(), "replica");
    let mut b = receiving(&shared);
    let (a, stop) = sending(&shared, b.address);
    let other = "00000000-0000-4000-8000-000000000000";
    a.committed(other, 3);
    eventually("the unknown world to be counted", || {
        b.peers.counters().count("received", RECEIVED_UNKNOWN_WORLD) == 1
    })
    .await;

    // A replica (the right certificate) sending junk on its streams.
    let mut client = Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    client.set_default_client_config(sender::client_config(&shared).unwrap());
    let connection = client
        .connect(b.address, "quire-peer")
        .unwrap()
        .await
        .unwrap();
    for junk in [
        b"v1 commit nope\n".to_vec(),
        vec![b'x'; 1000],
        format!("v1 commit {WORLD} 0\n").into_bytes(),
        // A hint without a version (the format before versions).
        format!("commit {WORLD} 4\n").into_bytes(),
        // A later format this replica does not read.
        format!("v2 commit {WORLD} 4\n").into_bytes(),
    ] {
        let mut stream = connection.open_uni().await.unwrap();
        // An over-long stream may be stopped by the listener before it is all written.
        let _ = stream.write_all(&junk).await;
        let _ = stream.finish();
        let _ = stream.stopped().await;
    }
    eventually(
        "four malformed hints and one of an unknown version to be counted",
        || {
            b.peers.counters().count("received", RECEIVED_MALFORMED) == 4
                && b.peers
                    .counters()
                    .count("received", RECEIVED_UNKNOWN_VERSION)
                    == 1
        },
    )
    .await;
    assert!(b.followed.try_recv().is_err(), "nothing was followed");
    assert_eq!(b.peers.counters().count("received", RECEIVED_FOLLOWED), 0);
    stop.cancel();
    b.stop.cancel();
}

/// Accepts any server certificate: a client that gets past the server check, so the
/// listener's own check of the client certificate is what is tested.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("no TLS 1.2".into()))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[tokio::test]
async fn foreign_certificates_are_refused_on_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let shared = identity(dir.path(), "replica");
    let mut b = receiving(&shared);

    // A client presenting another certificate: refused by the listener, counted.
    let (cert, key) = write_identity(dir.path(), "foreign");
    let chain = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_client_auth_cert(chain, key)
        .unwrap();
    tls.alpn_protocols = vec![ALPN_PEER.to_vec()];
    let mut client = Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    client.set_default_client_config(quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(tls).unwrap(),
    )));
    let connected = client.connect(b.address, "quire-peer").unwrap().await;
    // TLS 1.3: the client may finish its side before the server refuses its certificate;
    // then the first stream fails instead.
    if let Ok(connection) = connected {
        let sent = async {
            let mut stream = connection.open_uni().await?;
            stream
                .write_all(format!("v1 commit {WORLD} 4\n").as_bytes())
                .await?;
            stream.finish()?;
            stream.stopped().await?;
            anyhow::Ok(())
        };
        let _ = tokio::time::timeout(DEADLINE, sent).await;
    }
    eventually("the foreign certificate to be counted", || {
        b.peers
            .counters()
            .count("received", RECEIVED_FOREIGN_CERTIFICATE)
            == 1
    })
    .await;

    // A sender pinning another certificate refuses the listener's: its sends fail.
    let foreign = ReplicaIdentity::from_files(
        &dir.path().join("foreign-cert.pem"),
        &dir.path().join("foreign-key.pem"),
    )
    .unwrap();
    let (a, stop) = sending(&foreign, b.address);
    a.committed(WORLD, 7);
    eventually("two failed sends (a retry after backoff)", || {
        a.counters().count("sent", SENT_FAILED) >= 2
    })
    .await;
    assert_eq!(a.counters().count("sent", SENT_DELIVERED), 0);
    assert!(b.followed.try_recv().is_err(), "no hint was followed");
    assert_eq!(b.peers.counters().count("received", RECEIVED_FOLLOWED), 0);
    stop.cancel();
    b.stop.cancel();
}

#[tokio::test]
async fn a_down_peer_costs_failed_sends_and_hears_the_newest_when_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let shared = identity(dir.path(), "replica");
    // A port nobody listens on yet.
    let address = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (a, stop) = sending(&shared, address);
    a.committed(WORLD, 1);
    eventually("a failed send", || {
        a.counters().count("sent", SENT_FAILED) >= 1
    })
    .await;
    a.committed(WORLD, 2);
    // The peer comes up on that port; the sender's next attempt reaches it.
    let peers = Peers::new();
    let (tx, mut followed) = mpsc::unbounded_channel();
    peers.register(
        WORLD.to_owned(),
        Arc::new(move |sequence| {
            let _ = tx.send(sequence);
        }),
    );
    let endpoint = listener::bind(address, &shared, &peers).unwrap();
    let up = CancellationToken::new();
    let until = up.clone();
    tokio::spawn(listener::serve(endpoint, peers.clone(), async move {
        until.cancelled().await
    }));
    let got = tokio::time::timeout(DEADLINE, followed.recv())
        .await
        .unwrap();
    assert_eq!(got, Some(2), "only the newest sequence is sent");
    stop.cancel();
    up.cancel();
}

// ---------------------------------------------------------------------------------------
// Two real processes.

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(dir: &Path, name: &str, hint_port: u16, peer_port: u16) -> Server {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"[listen]
http = "127.0.0.1:0"
quic = "127.0.0.1:0"

[peers]
listen = "127.0.0.1:{hint_port}"
addresses = ["127.0.0.1:{peer_port}"]
cert = "replica-cert.pem"
key = "replica-key.pem"

[[worlds]]
name = "shared"

[worlds.backend]
kind = "bucket"
driver = "file"
location = "bucket"
world_id = "{WORLD}"

[worlds.auth]
tokens_file = "tokens.toml"
"#
        ),
    )
    .unwrap();
    Server::start(dir, &config, name)
}

// The count of one hint outcome in a server's /metrics.
async fn hints_counted(
    client: &reqwest::Client,
    server: &Server,
    direction: &str,
    outcome: &str,
) -> u64 {
    let text = client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series =
        format!("quire_peer_hints_total{{direction=\"{direction}\",outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_brings_a_write_to_a_watcher_on_the_other_process_before_its_poll() {
    let dir = tempfile::tempdir().unwrap();
    // The replica certificate as an operator makes it.
    let generated = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["peers", "cert"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
    let again = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["peers", "cert"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        !again.status.success(),
        "quire peers cert overwrote the replica certificate"
    );
    let secret = TokenSecret::generate().unwrap();
    let entry = TokenEntrySpec {
        hash: secret.hash().to_string(),
        operations: vec![Operation::Publish],
        paths: vec!["/**".to_owned()],
        expires: None,
    };
    std::fs::write(dir.path().join("tokens.toml"), entry.to_toml("writer")).unwrap();
    let (port_a, port_b) = (free_udp_port(), free_udp_port());
    let a = start(dir.path(), "a", port_a, port_b);
    let b = start(dir.path(), "b", port_b, port_a);
    let client = reqwest::Client::new();
    let mut watch = client
        .get(format!("{}/?watch", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    let mut seen = String::new();

    // Without a hint, b learns of a's commits from its log poll for watchers, every 5 s:
    // each write would reach b's watcher within a second only by luck.
    for round in 1..=3u64 {
        let path = format!("/notes/note-{round}.md");
        let followed = hints_counted(&client, &b, "received", RECEIVED_FOLLOWED).await;
        let written = Instant::now();
        let response = client
            .put(format!("{}{path}", a.base))
            .bearer_auth(secret.as_str())
            .body(format!("# Note {round}\n"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        while !seen.contains(&path) {
            let chunk = tokio::time::timeout(DEADLINE, watch.chunk())
                .await
                .expect("b's watch shows the write")
                .unwrap()
                .expect("b's watch stays open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        let elapsed = written.elapsed();
        assert!(
            elapsed < Duration::from_secs(1),
            "round {round}: b's watcher saw {path} after {elapsed:?}"
        );
        // The counter moves once the follow returns, which may be just after the watcher
        // was woken: read it until it does (another process's metrics, nothing to await).
        let counted = tokio::time::timeout(DEADLINE, async {
            loop {
                let now = hints_counted(&client, &b, "received", RECEIVED_FOLLOWED).await;
                if now > followed {
                    return now;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(counted.is_ok(), "round {round}: b counted no followed hint");
    }
    assert_eq!(
        hints_counted(&client, &b, "received", RECEIVED_UNKNOWN_WORLD).await,
        0
    );
    assert_eq!(hints_counted(&client, &a, "sent", SENT_FAILED).await, 0);
}
