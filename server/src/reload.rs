//! What a reload (SIGHUP on `quire serve`) re-reads: the server certificate and every
//! world's tokens file. Each part swaps in whole or not at all: a part that fails keeps what
//! it had, the failure is logged, and the other parts still reload. Open connections and
//! requests in flight keep what they started with.

use std::fmt;

use crate::tls::ServerCertificates;
use crate::worlds::Worlds;

/// One part that failed to reload.
#[derive(Debug)]
pub enum ReloadFailure {
    Certificates(crate::tls::Error),
    Tokens {
        world: String,
        error: crate::auth::Error,
    },
}

impl fmt::Display for ReloadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadFailure::Certificates(error) => write!(f, "{error}"),
            ReloadFailure::Tokens { world, error } => write!(f, "world {world:?}: {error}"),
        }
    }
}

/// Every part that failed to reload (each kept its old state).
#[derive(Debug, thiserror::Error)]
#[error("reload failed: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct ReloadError(pub Vec<ReloadFailure>);

/// Reloads the certificates (when the server has any) and every world's tokens file.
pub fn reload(
    worlds: &Worlds,
    certificates: Option<&ServerCertificates>,
) -> Result<(), ReloadError> {
    let mut failures = Vec::new();
    if let Some(certificates) = certificates {
        match certificates.reload() {
            Ok(()) => {
                tracing::info!(cert = %certificates.cert_path().display(), "certificate reloaded")
            }
            Err(error) => {
                tracing::error!(%error, "certificate reload failed; the old certificate stays");
                failures.push(ReloadFailure::Certificates(error));
            }
        }
    }
    for world in worlds.iter() {
        let Some(registry) = world.auth.registry() else {
            continue;
        };
        match registry.reload() {
            Ok(tokens) => {
                tracing::info!(world = %world.name, tokens = tokens.len(), "tokens reloaded")
            }
            Err(error) => {
                tracing::error!(world = %world.name, %error, "token reload failed; the old tokens stay");
                failures.push(ReloadFailure::Tokens {
                    world: world.name.clone(),
                    error,
                });
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(ReloadError(failures))
    }
}
