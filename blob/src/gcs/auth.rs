//! Bearer tokens for the GCS driver: a static token, a service-account key (a signed RS256 JWT
//! exchanged at the key's token URI), or the GCE metadata server. Fetched tokens are cached
//! until shortly before they expire; one fetch runs at a time and the others wait for it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};

use super::GcsSetupError;

/// The scope requested for service-account tokens: objects and buckets, not IAM policies.
const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
const JWT_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long a signed assertion is valid (Google's maximum).
const ASSERTION_LIFETIME: Duration = Duration::from_secs(3600);
/// Refresh this long before a token expires, so a request never carries a just-expired token.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// The metadata server's address on GCE and GKE.
pub const DEFAULT_METADATA_URL: &str = "http://169.254.169.254";

/// Where the driver gets its bearer token.
#[derive(Clone)]
pub enum GcsAuth {
    /// A token used as is: for emulators (any value works) and tokens minted elsewhere. Never
    /// contacts a token service.
    StaticToken(String),
    /// A service-account key file (the JSON the console downloads): the driver signs an RS256
    /// assertion with its private key and exchanges it at the file's `token_uri`.
    ServiceAccountKey(PathBuf),
    /// The GCE/GKE metadata server at `base_url` ([`DEFAULT_METADATA_URL`] on Google's
    /// machines); contacted only when configured.
    MetadataServer { base_url: String },
}

impl GcsAuth {
    /// Credentials from the environment: `QUIRE_GCS_TOKEN` (a bearer token, e.g. for
    /// emulators), else the key file `GOOGLE_APPLICATION_CREDENTIALS` names, else the metadata
    /// server of the machine.
    pub fn from_env() -> Self {
        if let Ok(token) = std::env::var("QUIRE_GCS_TOKEN") {
            return GcsAuth::StaticToken(token);
        }
        if let Ok(path) = std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
            return GcsAuth::ServiceAccountKey(PathBuf::from(path));
        }
        GcsAuth::metadata_server()
    }

    /// The metadata server at its standard address.
    pub fn metadata_server() -> Self {
        GcsAuth::MetadataServer {
            base_url: DEFAULT_METADATA_URL.to_owned(),
        }
    }
}

impl fmt::Debug for GcsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GcsAuth::StaticToken(_) => f.write_str("StaticToken(<redacted>)"),
            GcsAuth::ServiceAccountKey(path) => {
                f.debug_tuple("ServiceAccountKey").field(path).finish()
            }
            GcsAuth::MetadataServer { base_url } => f
                .debug_struct("MetadataServer")
                .field("base_url", base_url)
                .finish(),
        }
    }
}

#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: Option<String>,
    #[serde(default)]
    token_uri: Option<String>,
}

struct ServiceAccount {
    client_email: String,
    key_id: Option<String>,
    token_uri: String,
    key: EncodingKey,
}

enum Source {
    Static(String),
    ServiceAccount(Box<ServiceAccount>),
    Metadata { token_url: String },
}

struct Cached {
    token: String,
    refresh_at: Instant,
}

/// The driver's token provider.
pub(super) struct Auth {
    source: Source,
    cached: tokio::sync::Mutex<Option<Cached>>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Static(_) => "static token".to_owned(),
            Source::ServiceAccount(account) => format!("service account {}", account.client_email),
            Source::Metadata { token_url } => format!("metadata server {token_url}"),
        };
        f.debug_struct("Auth").field("source", &source).finish()
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl Auth {
    /// Prepares the provider; a key file is read and its key parsed now, so a bad file fails
    /// at construction rather than on the first request.
    pub(super) fn new(auth: &GcsAuth) -> Result<Self, GcsSetupError> {
        let source = match auth {
            GcsAuth::StaticToken(token) => Source::Static(token.clone()),
            GcsAuth::ServiceAccountKey(path) => {
                Source::ServiceAccount(Box::new(read_key_file(path)?))
            }
            GcsAuth::MetadataServer { base_url } => Source::Metadata {
                token_url: format!(
                    "{}/computeMetadata/v1/instance/service-accounts/default/token",
                    base_url.trim_end_matches('/')
                ),
            },
        };
        Ok(Auth {
            source,
            cached: tokio::sync::Mutex::new(None),
        })
    }

    /// The bearer token to send now, fetching a fresh one when the cached one is near expiry.
    pub(super) async fn bearer(&self, http: &reqwest::Client) -> Result<String, String> {
        if let Source::Static(token) = &self.source {
            return Ok(token.clone());
        }
        let mut cached = self.cached.lock().await;
        if let Some(current) = cached.as_ref()
            && Instant::now() < current.refresh_at
        {
            return Ok(current.token.clone());
        }
        let requested_at = Instant::now();
        let response = match &self.source {
            Source::Static(_) => unreachable!("handled above"),
            Source::ServiceAccount(account) => {
                let assertion = account.assertion()?;
                http.post(&account.token_uri)
                    .form(&[("grant_type", JWT_GRANT), ("assertion", assertion.as_str())])
                    .send()
                    .await
            }
            Source::Metadata { token_url } => {
                http.get(token_url)
                    .header("Metadata-Flavor", "Google")
                    .send()
                    .await
            }
        }
        .map_err(|e| format!("token request failed: {e}"))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("token response lost: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "token service answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        let parsed: TokenResponse = serde_json::from_slice(&body)
            .map_err(|e| format!("token service answered unreadable JSON: {e}"))?;
        let lifetime = Duration::from_secs(parsed.expires_in.unwrap_or(0));
        *cached = Some(Cached {
            token: parsed.access_token.clone(),
            refresh_at: requested_at + lifetime.saturating_sub(REFRESH_MARGIN),
        });
        Ok(parsed.access_token)
    }
}

impl ServiceAccount {
    #[allow(
        clippy::disallowed_methods,
        reason = "the JWT's claims are checked against real time"
    )]
    fn assertion(&self) -> Result<String, String> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_err(|_| "system clock before 1970".to_owned())?
            .as_secs();
        let claims = Claims {
            iss: &self.client_email,
            scope: SCOPE,
            aud: &self.token_uri,
            iat: now,
            exp: now + ASSERTION_LIFETIME.as_secs(),
        };
        let mut header = Header::new(Algorithm::RS256);
        header.kid = self.key_id.clone();
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map_err(|e| format!("signing the token assertion: {e}"))
    }
}

fn read_key_file(path: &Path) -> Result<ServiceAccount, GcsSetupError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        GcsSetupError::new(format!("reading service-account key {shown}")).with_source(e)
    })?;
    let file: KeyFile = serde_json::from_str(&text).map_err(|e| {
        GcsSetupError::new(format!("parsing service-account key {shown}")).with_source(e)
    })?;
    if let Some(kind) = &file.kind
        && kind != "service_account"
    {
        return Err(GcsSetupError::new(format!(
            "{shown} holds credentials of type {kind:?}, not a service-account key"
        )));
    }
    let key = EncodingKey::from_rsa_pem(file.private_key.as_bytes()).map_err(|e| {
        GcsSetupError::new(format!("private key in {shown} is not an RSA PEM key")).with_source(e)
    })?;
    Ok(ServiceAccount {
        client_email: file.client_email,
        key_id: file.private_key_id,
        token_uri: file
            .token_uri
            .unwrap_or_else(|| DEFAULT_TOKEN_URI.to_owned()),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_tokens_are_not_printed() {
        let shown = format!("{:?}", GcsAuth::StaticToken("secret-token".into()));
        assert!(!shown.contains("secret-token"), "{shown}");
    }

    #[test]
    fn bad_key_files_fail_at_construction() {
        let dir = tempfile::tempdir().unwrap();
        let missing = GcsAuth::ServiceAccountKey(dir.path().join("absent.json"));
        assert!(Auth::new(&missing).is_err());
        let path = dir.path().join("key.json");
        std::fs::write(
            &path,
            r#"{"type":"service_account","client_email":"a@b","private_key":"not a key"}"#,
        )
        .unwrap();
        let err = Auth::new(&GcsAuth::ServiceAccountKey(path.clone())).unwrap_err();
        assert!(err.to_string().contains("not an RSA PEM key"), "{err}");
        std::fs::write(
            &path,
            r#"{"type":"authorized_user","client_email":"a@b","private_key":""}"#,
        )
        .unwrap();
        let err = Auth::new(&GcsAuth::ServiceAccountKey(path)).unwrap_err();
        assert!(err.to_string().contains("authorized_user"), "{err}");
    }
}
