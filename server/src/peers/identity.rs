//! The replica certificate: every replica of a deployment holds the same certificate and key,
//! presents it on both ends of a hint connection, and accepts exactly that certificate from
//! the other end (byte for byte; the TLS 1.3 handshake proves the other end holds its key).
//! Anything else fails the handshake and is counted ([`super::PeerCounters`]).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::ResolvesServerCert;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::{ALPN_PEER, PeerCounters};
use crate::tls::{self, Error};

/// The one certificate every replica presents and accepts.
#[derive(Clone)]
pub struct ReplicaIdentity {
    certified: Arc<CertifiedKey>,
    provider: Arc<CryptoProvider>,
}

impl fmt::Debug for ReplicaIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaIdentity").finish_non_exhaustive()
    }
}

/// The name inside a generated replica certificate (senders ask for it; the certificate is
/// pinned, so it is never checked).
pub const REPLICA_NAME: &str = "quire-peer";

/// Generates a replica certificate (self-signed, ECDSA P-256) and its key as PEM files at
/// `cert` and `key`, the key readable by its owner only (`quire peers cert`). Copy both to
/// every replica. Refuses to overwrite either file.
pub fn generate(cert: &Path, key: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let key_pair = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![REPLICA_NAME.to_owned()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "quire replica certificate");
    let certificate = params.self_signed(&key_pair)?;
    let create = |path: &Path, private: bool| -> anyhow::Result<std::fs::File> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        #[cfg(not(unix))]
        let _ = private;
        options
            .open(path)
            .map_err(|error| anyhow::anyhow!("creating {}: {error}", path.display()))
    };
    for path in [cert, key] {
        if path.exists() {
            anyhow::bail!("{} exists; not overwriting it", path.display());
        }
    }
    let mut key_file = create(key, true)?;
    key_file.write_all(key_pair.serialize_pem().as_bytes())?;
    key_file.sync_all()?;
    let mut cert_file = create(cert, false)?;
    cert_file.write_all(certificate.pem().as_bytes())?;
    cert_file.sync_all()?;
    Ok(())
}

impl ReplicaIdentity {
    /// The PEM certificate (leaf first) and PEM key shared by every replica.
    pub fn from_files(cert: &Path, key: &Path) -> Result<ReplicaIdentity, Error> {
        let certified = tls::load_certified_key(cert, key, tls::Op::LoadCertificate)?;
        Ok(ReplicaIdentity {
            certified: Arc::new(certified),
            provider: tls::provider(),
        })
    }

    fn leaf(&self) -> &CertificateDer<'static> {
        &self.certified.cert[0]
    }

    /// The listener's TLS: TLS 1.3, ALPN `mark-peer`, a client certificate required and only
    /// the replica certificate accepted.
    pub fn server_config(&self, counters: &PeerCounters) -> Result<rustls::ServerConfig, Error> {
        let verifier = Arc::new(OnlyReplica {
            identity: self.clone(),
            counters: Some(counters.clone()),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(configure)?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(Presented(self.certified.clone())));
        config.alpn_protocols = vec![ALPN_PEER.to_vec()];
        Ok(config)
    }

    /// The sender's TLS: presents the replica certificate and accepts only it from the peer.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, Error> {
        let verifier = Arc::new(OnlyReplica {
            identity: self.clone(),
            counters: None,
        });
        let mut config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(configure)?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_cert_resolver(Arc::new(Presented(self.certified.clone())));
        config.alpn_protocols = vec![ALPN_PEER.to_vec()];
        Ok(config)
    }
}

fn configure(error: rustls::Error) -> Error {
    Error::new(
        tls::Op::Configure,
        "",
        tls::ErrorKind::Invalid,
        format!("TLS 1.3: {error}"),
    )
}

/// Presents the replica certificate, whatever the other end asks for.
#[derive(Debug)]
struct Presented(Arc<CertifiedKey>);

impl ResolvesServerCert for Presented {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl ResolvesClientCert for Presented {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Accepts exactly the replica certificate; counts what it refuses on the listener side.
struct OnlyReplica {
    identity: ReplicaIdentity,
    counters: Option<PeerCounters>,
}

impl fmt::Debug for OnlyReplica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnlyReplica").finish_non_exhaustive()
    }
}

impl OnlyReplica {
    fn check(&self, presented: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if presented.as_ref() == self.identity.leaf().as_ref() {
            return Ok(());
        }
        if let Some(counters) = &self.counters {
            counters.refused_certificate();
        }
        Err(rustls::Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn verify13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.identity.provider.signature_verification_algorithms,
        )
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.identity
            .provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// TLS 1.2 is never negotiated (both configurations are TLS 1.3 only).
fn no_tls12() -> Result<HandshakeSignatureValid, rustls::Error> {
    Err(rustls::Error::PeerIncompatible(
        rustls::PeerIncompatible::Tls12NotOffered,
    ))
}

impl ClientCertVerifier for OnlyReplica {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        no_tls12()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verify13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

impl ServerCertVerifier for OnlyReplica {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        no_tls12()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verify13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_replica_certificate_loads_and_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        generate(&cert, &key).unwrap();
        let identity = ReplicaIdentity::from_files(&cert, &key).unwrap();
        identity.client_config().unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the key is its owner's only");
        }
        let before = std::fs::read(&cert).unwrap();
        let error = generate(&cert, &key).unwrap_err();
        assert!(error.to_string().contains("exists"), "{error}");
        assert_eq!(std::fs::read(&cert).unwrap(), before);
        // Another pair is another identity: its certificate differs.
        let (cert2, key2) = (dir.path().join("c2.pem"), dir.path().join("k2.pem"));
        generate(&cert2, &key2).unwrap();
        assert_ne!(std::fs::read(&cert2).unwrap(), before);
    }
}
