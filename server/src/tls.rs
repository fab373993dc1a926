//! TLS for the Mark protocol: the server's certificate (a configured PEM chain and key, or a
//! self-signed development certificate generated and written to disk so clients can pin it),
//! swapped whole on reload so open connections keep the certificate they started with, and
//! the rustls configuration the QUIC listener uses: TLS 1.3 only, ALPN `mark`, and SNI
//! checked against the served worlds at the handshake (a name no world answers to gets no
//! certificate, so the handshake fails).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsConfig;
use crate::worlds::Worlds;

/// The ALPN protocol id of the Mark protocol.
pub const ALPN_MARK: &[u8] = b"mark";
/// The development certificate's file name inside its directory.
pub const DEVELOPMENT_CERT_FILE: &str = "dev-cert.pem";
/// The development key's file name inside its directory.
pub const DEVELOPMENT_KEY_FILE: &str = "dev-key.pem";
/// The lock file that serialises writing the development pair.
const DEVELOPMENT_LOCK_FILE: &str = "dev.lock";
/// Names every development certificate covers besides the worlds' authorities.
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

quire_failure::names! {
    /// The operation a TLS [`Error`] came from.
    #[non_exhaustive]
    pub enum Op {
        LoadCertificate => "load certificate",
        LoadKey => "load key",
        Generate => "generate certificate",
        Write => "write certificate",
        Reload => "reload certificate",
        Configure => "configure tls",
    }
}

/// What went wrong: the file breaks its rules, or could not be read or written.
pub use quire_failure::FileKind as ErrorKind;

/// A TLS failure: `tls <op> "<key>": <kind>: <detail>`, the key being the file concerned.
pub type Error = quire_failure::Failure<Op, ErrorKind>;

impl quire_failure::Subject for Op {
    const SUBJECT: &'static str = "tls";
}

/// The one crypto provider (ring, the one the HTTP and S3 clients already use).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's certificate: where it comes from and the one currently served.
#[derive(Debug)]
pub struct ServerCertificates {
    cert: PathBuf,
    key: PathBuf,
    generated: bool,
    current: ArcSwap<CertifiedKey>,
}

impl ServerCertificates {
    /// The configured chain and key, or (without `[tls]`) a development certificate for
    /// `names` under `development_dir`.
    pub fn from_config(
        tls: Option<&TlsConfig>,
        development_dir: &Path,
        names: &[String],
    ) -> Result<ServerCertificates, Error> {
        match tls {
            Some(tls) => ServerCertificates::from_files(&tls.cert, &tls.key),
            None => ServerCertificates::development(development_dir, names),
        }
    }

    /// A PEM certificate chain (leaf first) and its PEM private key.
    pub fn from_files(cert: &Path, key: &Path) -> Result<ServerCertificates, Error> {
        let current = load_certified_key(cert, key, Op::LoadCertificate)?;
        Ok(ServerCertificates {
            cert: cert.to_owned(),
            key: key.to_owned(),
            generated: false,
            current: ArcSwap::from_pointee(current),
        })
    }

    /// The development certificate in `dir`: the one written there before when it still
    /// covers every name in `names` and the loopback names, else a new self-signed one
    /// written there (certificate and key), so clients can pin the certificate file.
    pub fn development(dir: &Path, names: &[String]) -> Result<ServerCertificates, Error> {
        let cert = dir.join(DEVELOPMENT_CERT_FILE);
        let key = dir.join(DEVELOPMENT_KEY_FILE);
        let mut wanted: Vec<String> = LOOPBACK_NAMES.iter().map(|n| (*n).to_owned()).collect();
        for name in names {
            let name = name.to_ascii_lowercase();
            if !wanted.contains(&name) {
                wanted.push(name);
            }
        }
        // Replicas sharing a data directory start together: one at a time loads or writes
        // the pair, so none loads a certificate beside another's key.
        let _lock = lock_development_dir(dir)?;
        let reusable = load_certified_key(&cert, &key, Op::LoadCertificate)
            .ok()
            .filter(|existing| covers(existing, &wanted));
        let current = match reusable {
            Some(existing) => existing,
            None => {
                write_development_certificate(dir, &cert, &key, &wanted)?;
                load_certified_key(&cert, &key, Op::LoadCertificate)?
            }
        };
        Ok(ServerCertificates {
            cert,
            key,
            generated: true,
            current: ArcSwap::from_pointee(current),
        })
    }

    /// The certificate file (for a development certificate: the file clients pin).
    pub fn cert_path(&self) -> &Path {
        &self.cert
    }

    pub fn key_path(&self) -> &Path {
        &self.key
    }

    /// Whether this is a generated development certificate.
    pub fn is_development(&self) -> bool {
        self.generated
    }

    /// The certificate served to new connections.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// Re-reads the certificate and key files and serves them to new connections; open
    /// connections keep theirs. On failure the old certificate stays.
    pub fn reload(&self) -> Result<(), Error> {
        let fresh = load_certified_key(&self.cert, &self.key, Op::Reload)?;
        self.current.store(Arc::new(fresh));
        Ok(())
    }

    /// The rustls server configuration over these certificates: TLS 1.3 only, ALPN `mark`,
    /// and only names `worlds` serves accepted at the handshake.
    pub fn server_config(
        self: &Arc<Self>,
        worlds: Arc<Worlds>,
    ) -> Result<rustls::ServerConfig, Error> {
        let resolver = WorldResolver {
            certificates: self.clone(),
            worlds,
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|error| {
                Error::new(
                    Op::Configure,
                    "",
                    ErrorKind::Invalid,
                    format!("TLS 1.3: {error}"),
                )
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![ALPN_MARK.to_vec()];
        Ok(config)
    }
}

/// Hands out the current certificate when the client's SNI names a served world.
#[derive(Debug)]
struct WorldResolver {
    certificates: Arc<ServerCertificates>,
    worlds: Arc<Worlds>,
}

impl ResolvesServerCert for WorldResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = client_hello.server_name().unwrap_or("");
        if self.worlds.for_host(name).is_none() {
            tracing::debug!(sni = name, "handshake refused: no world at this name");
            return None;
        }
        Some(self.certificates.current())
    }
}

pub(crate) fn load_certified_key(cert: &Path, key: &Path, op: Op) -> Result<CertifiedKey, Error> {
    let cert_key = cert.display().to_string();
    let key_key = key.display().to_string();
    let chain_text = std::fs::read(cert)
        .map_err(|error| Error::new(op, &cert_key, ErrorKind::Io, error.to_string()))?;
    let chain = CertificateDer::pem_slice_iter(&chain_text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| Error::new(op, &cert_key, ErrorKind::Invalid, error.to_string()))?;
    if chain.is_empty() {
        return Err(Error::new(
            op,
            &cert_key,
            ErrorKind::Invalid,
            "no PEM certificate in the file",
        ));
    }
    let key_text = std::fs::read(key)
        .map_err(|error| Error::new(op, &key_key, ErrorKind::Io, error.to_string()))?;
    let private = PrivateKeyDer::from_pem_slice(&key_text)
        .map_err(|error| Error::new(op, &key_key, ErrorKind::Invalid, error.to_string()))?;
    let certified = CertifiedKey::from_der(chain, private, &provider())
        .map_err(|error| Error::new(op, &key_key, ErrorKind::Invalid, error.to_string()))?;
    Ok(certified)
}

/// Whether the leaf certificate is valid now for every name in `names`.
fn covers(certified: &CertifiedKey, names: &[String]) -> bool {
    let Some(leaf) = certified.cert.first() else {
        return false;
    };
    let mut roots = rustls::RootCertStore::empty();
    if roots.add(leaf.clone()).is_err() {
        return false;
    }
    let Ok(verifier) =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
    else {
        return false;
    };
    let now = rustls_pki_types::UnixTime::now();
    names.iter().all(|name| {
        rustls_pki_types::ServerName::try_from(name.as_str())
            .ok()
            .is_some_and(|server_name| {
                verifier
                    .verify_server_cert(leaf, &[], &server_name, &[], now)
                    .is_ok()
            })
    })
}

fn write_development_certificate(
    dir: &Path,
    cert: &Path,
    key: &Path,
    names: &[String],
) -> Result<(), Error> {
    let dir_key = dir.display().to_string();
    let generate = |detail: String| Error::new(Op::Generate, &dir_key, ErrorKind::Invalid, detail);
    let key_pair = rcgen::KeyPair::generate().map_err(|e| generate(e.to_string()))?;
    let mut params =
        rcgen::CertificateParams::new(names.to_vec()).map_err(|e| generate(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "quire development certificate");
    let certificate = params
        .self_signed(&key_pair)
        .map_err(|e| generate(e.to_string()))?;
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|error| {
            Error::new(
                Op::Write,
                path.display().to_string(),
                ErrorKind::Io,
                error.to_string(),
            )
        })
    };
    std::fs::create_dir_all(dir)
        .map_err(|error| Error::new(Op::Write, &dir_key, ErrorKind::Io, error.to_string()))?;
    write_private(key, &key_pair.serialize_pem())?;
    write(cert, &certificate.pem())?;
    tracing::info!(
        cert = %cert.display(),
        names = ?names,
        "generated a self-signed development certificate; clients pin it with --ca"
    );
    Ok(())
}

/// Takes the development directory's lock file (created beside the pair, never through a
/// link), held until the returned file is dropped.
fn lock_development_dir(dir: &Path) -> Result<std::fs::File, Error> {
    use rustix::fs::{FlockOperation, OFlags, flock};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(DEVELOPMENT_LOCK_FILE);
    let failed = |error: std::io::Error| {
        Error::new(
            Op::Write,
            path.display().to_string(),
            ErrorKind::Io,
            error.to_string(),
        )
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(failed)?;
    flock(&file, FlockOperation::LockExclusive).map_err(|errno| failed(errno.into()))?;
    Ok(file)
}

/// Writes a private key readable by its owner only: created with mode 0600 under a fresh
/// name (never through an existing file or symbolic link), then renamed over `path`, which
/// replaces a link at `path` rather than writing where it points.
fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::io::Write as _;
    let failed = |at: &Path, error: std::io::Error| {
        Error::new(
            Op::Write,
            at.display().to_string(),
            ErrorKind::Io,
            error.to_string(),
        )
    };
    let mut fresh = path.as_os_str().to_owned();
    fresh.push(".new");
    let fresh = PathBuf::from(fresh);
    // A leftover of an interrupted write (or a planted link): removed, never followed.
    match std::fs::remove_file(&fresh) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(failed(&fresh, error)),
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(&fresh)
        .map_err(|error| failed(&fresh, error))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|error| failed(&fresh, error))?;
    drop(file);
    std::fs::rename(&fresh, path).map_err(|error| failed(path, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[cfg(unix)]
    #[test]
    fn the_development_key_is_private_and_never_written_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.txt");
        std::fs::write(&elsewhere, "untouched").unwrap();
        let tls = dir.path().join("tls");
        std::fs::create_dir_all(&tls).unwrap();
        let key = tls.join(DEVELOPMENT_KEY_FILE);
        std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tls.join(format!("{DEVELOPMENT_KEY_FILE}.new")))
            .unwrap();
        ServerCertificates::development(&tls, &names(&["docs.test"])).unwrap();
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched");
        let written = std::fs::symlink_metadata(&key).unwrap();
        assert!(written.file_type().is_file(), "the link was replaced");
        assert_eq!(written.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn replicas_starting_together_all_load_one_consistent_pair() {
        let dir = tempfile::tempdir().unwrap();
        let starts: Vec<_> = (0..8)
            .map(|_| {
                let dir = dir.path().to_owned();
                std::thread::spawn(move || {
                    ServerCertificates::development(&dir, &names(&[]))
                        .map(|certificates| certificates.current().cert[0].clone())
                })
            })
            .collect();
        let leaves: Vec<_> = starts
            .into_iter()
            .map(|start| start.join().unwrap().expect("every start loads the pair"))
            .collect();
        assert!(
            leaves.iter().all(|leaf| *leaf == leaves[0]),
            "one certificate for all"
        );
    }

    #[test]
    fn development_certificate_is_written_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = ServerCertificates::development(dir.path(), &names(&["docs.test"])).unwrap();
        assert!(first.is_development());
        assert!(dir.path().join(DEVELOPMENT_CERT_FILE).is_file());
        assert!(dir.path().join(DEVELOPMENT_KEY_FILE).is_file());
        let leaf = first.current().cert[0].clone();
        assert!(covers(
            &first.current(),
            &names(&["docs.test", "localhost", "127.0.0.1", "::1"])
        ));
        assert!(!covers(&first.current(), &names(&["other.test"])));

        let again = ServerCertificates::development(dir.path(), &names(&["docs.test"])).unwrap();
        assert_eq!(
            again.current().cert[0],
            leaf,
            "a covering certificate is reused"
        );

        let wider = ServerCertificates::development(dir.path(), &names(&["docs.test", "new.test"]))
            .unwrap();
        assert_ne!(
            wider.current().cert[0],
            leaf,
            "a new name needs a new certificate"
        );
        assert!(covers(&wider.current(), &names(&["new.test"])));
    }

    #[test]
    fn a_failed_reload_keeps_the_old_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let certs = ServerCertificates::development(dir.path(), &[]).unwrap();
        let before = certs.current().cert[0].clone();
        std::fs::write(certs.cert_path(), "not a certificate").unwrap();
        let error = certs.reload().unwrap_err();
        assert_eq!(error.op(), Op::Reload);
        assert_eq!(error.kind(), ErrorKind::Invalid);
        assert_eq!(error.key(), certs.cert_path().display().to_string());
        assert_eq!(certs.current().cert[0], before);
    }

    #[test]
    fn missing_files_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("missing.pem");
        let error = ServerCertificates::from_files(&cert, &cert).unwrap_err();
        assert_eq!(error.op(), Op::LoadCertificate);
        assert_eq!(error.kind(), ErrorKind::Io);
        assert_eq!(error.key(), cert.display().to_string());
    }
}
