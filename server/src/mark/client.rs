//! The Mark protocol client over QUIC: `mark://host[:port]/path` URLs, the trust a client
//! puts in the server certificate (the system roots, a pinned PEM file such as the
//! development certificate `quire serve` writes, or, for development only, none), and one
//! request per bidirectional stream on a reusable connection.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use quinn::crypto::rustls::QuicClientConfig;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::mark::{
    Request, Response, ResponseLimits, WatchBlock, WatchDecoder, read_response, read_watch_block,
};
use crate::tls::{ALPN_MARK, provider};

/// The Mark protocol's default port (UDP).
pub const DEFAULT_PORT: u16 = 6309;
/// The URL scheme of the Mark protocol.
pub const SCHEME: &str = "mark://";

quire_failure::names! {
    /// The operation a client [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        ParseUrl => "parse url",
        LoadTrust => "load trust",
        Configure => "configure",
        Connect => "connect",
        Request => "request",
    }
}

quire_failure::names! {
    /// What went wrong.
    #[non_exhaustive]
    pub enum ErrorKind {
        /// The URL or a trust file is not usable.
        Invalid => "invalid",
        /// The connection could not be made or was lost (this includes a refused handshake).
        Connection => "connection",
        /// The server's answer broke the protocol.
        Protocol => "protocol",
    }
}

/// A client failure: `mark client <op> "<key>": <kind>: <detail>`; the key is the URL,
/// server or path concerned.
pub type Error = quire_failure::Failure<Op, ErrorKind>;

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "mark client";
}

/// A parsed `mark://host[:port]/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkUrl {
    /// The host as written (brackets of an IPv6 literal removed), lower-cased.
    pub host: String,
    pub port: u16,
    /// The path, starting with `/` (`/` when the URL has none), passed on as written.
    pub path: String,
}

impl MarkUrl {
    pub fn parse(text: &str) -> Result<MarkUrl, Error> {
        let invalid = |detail: &str| Error::new(Op::ParseUrl, text, ErrorKind::Invalid, detail);
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| invalid("not a mark:// URL"))?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            return Err(invalid("user information is not allowed in a mark:// URL"));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| invalid("unclosed `[` in the host"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(invalid("the URL names no host"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|port| *port != 0)
                .ok_or_else(|| invalid("the port is not a number from 1 to 65535"))?,
        };
        if path.contains(['?', '#']) {
            return Err(invalid("a mark:// URL has no query or fragment"));
        }
        Ok(MarkUrl {
            host: host.to_ascii_lowercase(),
            port,
            path: path.to_owned(),
        })
    }
}

impl fmt::Display for MarkUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{SCHEME}[{}]:{}{}", self.host, self.port, self.path)
        } else {
            write!(f, "{SCHEME}{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// Which server certificates a client accepts.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Certificates that chain to the system's trusted roots.
    SystemRoots,
    /// Certificates that chain to (or are) one of these, e.g. a pinned development
    /// certificate.
    Roots(Vec<CertificateDer<'static>>),
    /// Any certificate: for development only, it gives up the server's authentication.
    Insecure,
}

impl Trust {
    /// The certificates of a PEM file.
    pub fn from_pem_file(path: &Path) -> Result<Trust, Error> {
        let key = path.display().to_string();
        let fail = |detail: String| Error::new(Op::LoadTrust, &key, ErrorKind::Invalid, detail);
        let text = std::fs::read(path).map_err(|error| fail(error.to_string()))?;
        let certificates = CertificateDer::pem_slice_iter(&text)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| fail(error.to_string()))?;
        if certificates.is_empty() {
            return Err(fail("no PEM certificate in the file".into()));
        }
        Ok(Trust::Roots(certificates))
    }

    fn client_config(&self) -> Result<rustls::ClientConfig, Error> {
        let fail = |detail: String| Error::new(Op::Configure, "", ErrorKind::Invalid, detail);
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|error| fail(error.to_string()))?;
        let mut config = match self {
            Trust::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
                .with_no_client_auth(),
            Trust::SystemRoots | Trust::Roots(_) => {
                let mut roots = rustls::RootCertStore::empty();
                let certificates = match self {
                    Trust::Roots(certificates) => certificates.clone(),
                    _ => {
                        let found = rustls_native_certs::load_native_certs();
                        for error in &found.errors {
                            tracing::debug!(%error, "a system root certificate was skipped");
                        }
                        found.certs
                    }
                };
                let (added, _ignored) = roots.add_parsable_certificates(certificates);
                if added == 0 {
                    return Err(fail("no usable trusted certificate".into()));
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
        };
        config.alpn_protocols = vec![ALPN_MARK.to_vec()];
        Ok(config)
    }
}

/// A QUIC endpoint that makes Mark connections.
#[derive(Debug)]
pub struct Client {
    endpoint: quinn::Endpoint,
}

impl Client {
    /// A client on an ephemeral port of the unspecified address of `family` (the server's).
    pub fn for_server(server: SocketAddr, trust: &Trust) -> Result<Client, Error> {
        let local = match server.ip() {
            IpAddr::V4(_) if server.ip().is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) if server.ip().is_loopback() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        Client::bind(SocketAddr::new(local, 0), trust)
    }

    /// A client bound to `local`.
    pub fn bind(local: SocketAddr, trust: &Trust) -> Result<Client, Error> {
        let key = local.to_string();
        let tls = trust.client_config()?;
        let crypto = QuicClientConfig::try_from(tls).map_err(|error| {
            Error::new(Op::Configure, &key, ErrorKind::Invalid, error.to_string())
        })?;
        let mut endpoint = quinn::Endpoint::client(local).map_err(|error| {
            Error::new(
                Op::Configure,
                &key,
                ErrorKind::Connection,
                error.to_string(),
            )
        })?;
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
        Ok(Client { endpoint })
    }

    /// Connects to `address`, asking for (and verifying the certificate against)
    /// `server_name`: a DNS name is sent as SNI and chooses the world; an IP address is not.
    pub async fn connect(
        &self,
        address: SocketAddr,
        server_name: &str,
    ) -> Result<MarkConnection, Error> {
        let key = format!("{server_name} at {address}");
        let fail = |detail: String| Error::new(Op::Connect, &key, ErrorKind::Connection, detail);
        let connecting = self
            .endpoint
            .connect(address, server_name)
            .map_err(|error| fail(error.to_string()))?;
        let connection = connecting.await.map_err(|error| fail(error.to_string()))?;
        Ok(MarkConnection { connection })
    }

    /// Resolves the URL's host and connects to it.
    pub async fn connect_url(&self, url: &MarkUrl) -> Result<MarkConnection, Error> {
        let address = resolve(url).await?;
        self.connect(address, &url.host).await
    }

    /// Waits until every connection of this client is closed.
    pub async fn wait_idle(&self) {
        self.endpoint.wait_idle().await;
    }
}

/// The first address the URL's host resolves to.
pub async fn resolve(url: &MarkUrl) -> Result<SocketAddr, Error> {
    let key = url.to_string();
    let mut addresses = tokio::net::lookup_host((url.host.as_str(), url.port))
        .await
        .map_err(|error| Error::new(Op::Connect, &key, ErrorKind::Connection, error.to_string()))?;
    addresses.next().ok_or_else(|| {
        Error::new(
            Op::Connect,
            &key,
            ErrorKind::Connection,
            "the host resolves to no address",
        )
    })
}

/// An open WATCH on its stream.
#[derive(Debug)]
pub struct WatchStream {
    recv: quinn::RecvStream,
    /// Kept so the stream stays open while the watch runs.
    _send: quinn::SendStream,
    decoder: WatchDecoder,
    key: String,
}

impl WatchStream {
    /// The next block as the server sends it; `None` once the server finished the stream.
    pub async fn next(&mut self) -> Result<Option<WatchBlock>, Error> {
        read_watch_block(&mut self.recv, &mut self.decoder)
            .await
            .map_err(|error| {
                Error::new(
                    Op::Request,
                    &self.key,
                    ErrorKind::Protocol,
                    error.to_string(),
                )
            })
    }
}

/// One connection to a server: each request runs on its own bidirectional stream.
#[derive(Clone, Debug)]
pub struct MarkConnection {
    connection: quinn::Connection,
}

impl MarkConnection {
    /// Sends `request` and reads its response.
    pub async fn request(&self, request: &Request) -> Result<Response, Error> {
        let bytes = request.encode().map_err(|error| {
            Error::new(
                Op::Request,
                &request.path,
                ErrorKind::Invalid,
                error.to_string(),
            )
        })?;
        self.exchange(&bytes, &request.path).await
    }

    /// Sends raw request bytes (which need not be a valid request) and reads the response.
    /// The server may answer before it has read everything and stop the send side: the
    /// answer still counts. `key` names the request in errors.
    pub async fn exchange(&self, bytes: &[u8], key: &str) -> Result<Response, Error> {
        let fail = |kind: ErrorKind, detail: String| Error::new(Op::Request, key, kind, detail);
        let (mut send, mut recv) = self
            .connection
            .open_bi()
            .await
            .map_err(|error| fail(ErrorKind::Connection, error.to_string()))?;
        let write = async move {
            // A stopped send side means the server has answered early; the answer tells why.
            if send.write_all(bytes).await.is_ok() {
                let _ = send.finish();
            }
        };
        let read = read_response(&mut recv, ResponseLimits::default());
        let ((), response) = tokio::join!(write, read);
        response.map_err(|error| fail(ErrorKind::Protocol, error.to_string()))
    }

    /// Opens a WATCH: sends `request` (its verb should be WATCH) and returns the stream of
    /// blocks. A refusal before subscription is an ordinary response, whose frontmatter
    /// reads as a terminal control block with the refusal's status.
    pub async fn watch(&self, request: &Request) -> Result<WatchStream, Error> {
        let key = request.path.clone();
        let fail = |kind: ErrorKind, detail: String| Error::new(Op::Request, &key, kind, detail);
        let bytes = request
            .encode()
            .map_err(|error| fail(ErrorKind::Invalid, error.to_string()))?;
        let (mut send, recv) = self
            .connection
            .open_bi()
            .await
            .map_err(|error| fail(ErrorKind::Connection, error.to_string()))?;
        send.write_all(&bytes)
            .await
            .map_err(|error| fail(ErrorKind::Connection, error.to_string()))?;
        let _ = send.finish();
        Ok(WatchStream {
            recv,
            _send: send,
            decoder: WatchDecoder::new(),
            key,
        })
    }

    /// The certificate chain the server presented.
    pub fn peer_certificates(&self) -> Vec<CertificateDer<'static>> {
        self.connection
            .peer_identity()
            .and_then(|identity| identity.downcast::<Vec<CertificateDer<'static>>>().ok())
            .map(|chain| *chain)
            .unwrap_or_default()
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.connection.close(quinn::VarInt::from_u32(0), b"done");
    }

    /// The QUIC connection underneath.
    pub fn quic(&self) -> &quinn::Connection {
        &self.connection
    }
}

/// Accepts every certificate but still checks the handshake signatures (so the session keys
/// belong to whoever holds the certificate's key).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let url = MarkUrl::parse("mark://Docs.Example.com/a/b.md").unwrap();
        assert_eq!(
            url,
            MarkUrl {
                host: "docs.example.com".into(),
                port: DEFAULT_PORT,
                path: "/a/b.md".into()
            }
        );
        let url = MarkUrl::parse("mark://127.0.0.1:7000").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.path.as_str()),
            ("127.0.0.1", 7000, "/")
        );
        let url = MarkUrl::parse("mark://[::1]:7000/x.md").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("::1", 7000));
        assert_eq!(url.to_string(), "mark://[::1]:7000/x.md");
        for bad in [
            "http://host/a.md",
            "mark://user@host/a.md",
            "mark:///a.md",
            "mark://host:0/a.md",
            "mark://host:99999/a.md",
            "mark://host/a.md?x=1",
            "mark://[::1/a.md",
        ] {
            let error = MarkUrl::parse(bad).unwrap_err();
            assert_eq!(error.op(), Op::ParseUrl, "{bad}");
            assert_eq!(error.key(), bad);
        }
    }
}
