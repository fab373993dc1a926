//! One Mark request to a Quire server over either transport, for programs that act for a
//! user (the MCP server): `mark://` URLs go over QUIC through [`crate::mark::client`], on one
//! connection made again when the server has closed it; `http://` and `https://` URLs go
//! through the HTTP gateway, mapped as docs/SPEC.md's table says (verb to method and query,
//! `auth` to a bearer header, `expected-version` and publisher metadata to headers, the
//! `Mark-*` response headers back to response metadata). Either way the caller sends a
//! [`Request`] and reads a [`Response`], so the answer's status and metadata are the
//! server's own.

use std::fmt;

use futures::StreamExt;
use tokio::sync::Mutex;

use crate::http::{EXPECTED_VERSION_HEADER, MARK_HEADER_PREFIX, META_HEADER_PREFIX, QUERY_KEYS};
use crate::mark::client::{self as mark_client, MarkConnection, MarkUrl, Trust};
use crate::mark::{Request, Response, Status, Verb, WatchBlock, WatchDecoder};

/// Request metadata that is neither publisher metadata nor a query key.
const CONTROL_KEYS: [&str; 4] = [
    "auth",
    "expected-version",
    "if-none-match",
    "if-modified-since",
];

/// A request that did not get an answer from the server.
#[derive(Debug)]
pub struct RemoteError(String);

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RemoteError {}

impl From<mark_client::Error> for RemoteError {
    fn from(error: mark_client::Error) -> Self {
        RemoteError(error.to_string())
    }
}

impl From<reqwest::Error> for RemoteError {
    fn from(error: reqwest::Error) -> Self {
        RemoteError(format!("http: {error}"))
    }
}

/// A server at a base URL (`mark://host[:port]` or `http://host[:port]`); request paths are
/// the world's paths.
#[derive(Debug)]
pub struct Remote {
    transport: Transport,
}

#[derive(Debug)]
enum Transport {
    Mark {
        url: MarkUrl,
        client: mark_client::Client,
        connection: Mutex<Option<MarkConnection>>,
    },
    Http {
        base: reqwest::Url,
        client: reqwest::Client,
    },
}

impl Remote {
    /// A client for `server`; `trust` is how a `mark://` server's certificate is checked.
    pub async fn new(server: &str, trust: &Trust) -> Result<Remote, RemoteError> {
        let transport = if server.starts_with(mark_client::SCHEME) {
            let url = MarkUrl::parse(server)?;
            let address = mark_client::resolve(&url).await?;
            let client = mark_client::Client::for_server(address, trust)?;
            Transport::Mark {
                url,
                client,
                connection: Mutex::new(None),
            }
        } else if server.starts_with("http://") || server.starts_with("https://") {
            let base = reqwest::Url::parse(server)
                .map_err(|error| RemoteError(format!("{server}: {error}")))?;
            Transport::Http {
                base,
                client: reqwest::Client::new(),
            }
        } else {
            return Err(RemoteError(format!(
                "{server}: the server URL must be mark://, http:// or https://"
            )));
        };
        Ok(Remote { transport })
    }

    /// The server's URL for a world path (what a person would open).
    pub fn url_of(&self, path: &str) -> String {
        match &self.transport {
            Transport::Mark { url, .. } => MarkUrl {
                path: path.to_owned(),
                ..url.clone()
            }
            .to_string(),
            Transport::Http { base, .. } => {
                let mut url = base.clone();
                url.set_path(path);
                url.to_string()
            }
        }
    }

    /// Sends one request and returns the server's answer, whatever its status.
    pub async fn send(&self, request: &Request) -> Result<Response, RemoteError> {
        match &self.transport {
            Transport::Mark {
                url,
                client,
                connection,
            } => {
                let open = self.mark_connection(url, client, connection).await?;
                match open.request(request).await {
                    Ok(response) => Ok(response),
                    Err(error) if error.kind() == mark_client::ErrorKind::Connection => {
                        // The server closed an idle connection: make a new one, once.
                        *connection.lock().await = None;
                        let open = self.mark_connection(url, client, connection).await?;
                        Ok(open.request(request).await?)
                    }
                    Err(error) => Err(error.into()),
                }
            }
            Transport::Http { base, client } => send_http(client, base, request).await,
        }
    }

    async fn mark_connection(
        &self,
        url: &MarkUrl,
        client: &mark_client::Client,
        connection: &Mutex<Option<MarkConnection>>,
    ) -> Result<MarkConnection, RemoteError> {
        let mut slot = connection.lock().await;
        if let Some(open) = slot.as_ref()
            && open.quic().close_reason().is_none()
        {
            return Ok(open.clone());
        }
        let open = client.connect_url(url).await?;
        *slot = Some(open.clone());
        Ok(open)
    }

    /// Opens a WATCH (`request.verb` should be WATCH). A refusal before subscription comes
    /// back as `Err(Ok(response))`.
    pub async fn watch(&self, request: &Request) -> Result<RemoteWatch, WatchRefusal> {
        match &self.transport {
            Transport::Mark {
                url,
                client,
                connection,
            } => {
                let open = self
                    .mark_connection(url, client, connection)
                    .await
                    .map_err(WatchRefusal::Failed)?;
                let stream = open
                    .watch(request)
                    .await
                    .map_err(|error| WatchRefusal::Failed(error.into()))?;
                Ok(RemoteWatch {
                    inner: WatchInner::Mark(Box::new(stream)),
                })
            }
            Transport::Http { base, client } => {
                let http = http_request(client, base, request).map_err(WatchRefusal::Failed)?;
                let answer = http
                    .send()
                    .await
                    .map_err(|error| WatchRefusal::Failed(error.into()))?;
                if !answer.status().is_success() {
                    let response = read_http_response(answer)
                        .await
                        .map_err(WatchRefusal::Failed)?;
                    return Err(WatchRefusal::Refused(response));
                }
                Ok(RemoteWatch {
                    inner: WatchInner::Http {
                        body: Box::pin(answer.bytes_stream()),
                        decoder: WatchDecoder::new(),
                    },
                })
            }
        }
    }
}

/// Why a WATCH did not open.
#[derive(Debug)]
pub enum WatchRefusal {
    /// The server answered with an ordinary response (its status says why).
    Refused(Response),
    /// No answer.
    Failed(RemoteError),
}

type ByteStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// An open WATCH on either transport.
pub struct RemoteWatch {
    inner: WatchInner,
}

enum WatchInner {
    Mark(Box<mark_client::WatchStream>),
    Http {
        body: ByteStream,
        decoder: WatchDecoder,
    },
}

impl fmt::Debug for RemoteWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteWatch").finish_non_exhaustive()
    }
}

impl RemoteWatch {
    /// The next block; `None` once the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<WatchBlock>, RemoteError> {
        match &mut self.inner {
            WatchInner::Mark(stream) => Ok(stream.next().await?),
            WatchInner::Http { body, decoder } => loop {
                if let Some(block) = decoder
                    .next_block()
                    .map_err(|error| RemoteError(error.to_string()))?
                {
                    return Ok(Some(block));
                }
                match body.next().await {
                    Some(chunk) => decoder.push(&chunk?),
                    None if decoder.has_partial() => {
                        return Err(RemoteError("the watch ended inside a block".into()));
                    }
                    None => return Ok(None),
                }
            },
        }
    }
}

/// The gateway's method and verb-marking query key for a verb.
fn http_method(verb: Verb) -> (reqwest::Method, Option<&'static str>) {
    match verb {
        Verb::Fetch => (reqwest::Method::GET, None),
        Verb::List => (reqwest::Method::GET, Some("list")),
        Verb::Versions => (reqwest::Method::GET, Some("versions")),
        Verb::Lookup => (reqwest::Method::GET, Some("lookup")),
        Verb::Watch => (reqwest::Method::GET, Some("watch")),
        Verb::Publish => (reqwest::Method::PUT, None),
        Verb::Append => (reqwest::Method::POST, Some("append")),
        Verb::Archive => (reqwest::Method::POST, Some("archive")),
    }
}

fn http_request(
    client: &reqwest::Client,
    base: &reqwest::Url,
    request: &Request,
) -> Result<reqwest::RequestBuilder, RemoteError> {
    let (method, marker) = http_method(request.verb);
    let mut url = base.clone();
    url.set_path(&request.path);
    url.set_query(None);
    {
        let mut pairs = url.query_pairs_mut();
        if let Some(marker) = marker {
            pairs.append_key_only(marker);
        }
        for (key, value) in &request.metadata {
            if QUERY_KEYS.contains(&key.as_str()) {
                pairs.append_pair(key, value);
            }
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    let mut http = client.request(method, url);
    let header_value = |key: &str, value: &str| {
        reqwest::header::HeaderValue::from_str(value).map_err(|_| {
            RemoteError(format!(
                "metadata {key:?}: the value cannot be sent as an HTTP header (use a mark:// server)"
            ))
        })
    };
    for (key, value) in &request.metadata {
        match key.as_str() {
            "auth" => http = http.bearer_auth(value),
            "expected-version" => {
                http = http.header(EXPECTED_VERSION_HEADER, header_value(key, value)?)
            }
            "if-none-match" => {
                http = http.header(reqwest::header::IF_NONE_MATCH, header_value(key, value)?)
            }
            "if-modified-since" => {
                http = http.header(
                    reqwest::header::IF_MODIFIED_SINCE,
                    header_value(key, value)?,
                )
            }
            _ if QUERY_KEYS.contains(&key.as_str()) || CONTROL_KEYS.contains(&key.as_str()) => {}
            _ if request.verb.is_write() => {
                http = http.header(
                    format!("{META_HEADER_PREFIX}{key}"),
                    header_value(key, value)?,
                );
            }
            _ => {}
        }
    }
    if request.verb.is_write() {
        http = http.body(request.body.clone());
    }
    Ok(http)
}

async fn send_http(
    client: &reqwest::Client,
    base: &reqwest::Url,
    request: &Request,
) -> Result<Response, RemoteError> {
    let answer = http_request(client, base, request)?.send().await?;
    read_http_response(answer).await
}

/// A gateway answer as the Mark response it carries.
async fn read_http_response(answer: reqwest::Response) -> Result<Response, RemoteError> {
    let code = answer.status();
    let mut status = None;
    let mut metadata = crate::mark::Metadata::new();
    for (name, value) in answer.headers() {
        let Some(key) = name.as_str().strip_prefix(MARK_HEADER_PREFIX) else {
            continue;
        };
        let Ok(value) = value.to_str() else { continue };
        if key == "status" {
            status = Status::from_name(value);
        } else {
            metadata.insert(key.to_owned(), value.to_owned());
        }
    }
    let body = answer.bytes().await?;
    let status = status.ok_or_else(|| {
        RemoteError(format!(
            "the server answered HTTP {code} without a Mark status: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
        ))
    })?;
    let mut response = Response::new(status).with_body(body);
    response.metadata = metadata;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(request: &Request) -> reqwest::Request {
        let base = reqwest::Url::parse("http://127.0.0.1:6309").unwrap();
        http_request(&reqwest::Client::new(), &base, request)
            .unwrap()
            .build()
            .unwrap()
    }

    #[test]
    fn verbs_map_to_the_gateway_table() {
        let list = built(
            &Request::new(Verb::List, "/notes/")
                .with_meta("page-size", "2")
                .with_meta("auth", "quire_x"),
        );
        assert_eq!(list.method(), reqwest::Method::GET);
        assert_eq!(
            list.url().as_str(),
            "http://127.0.0.1:6309/notes/?list&page-size=2"
        );
        assert_eq!(
            list.headers().get("authorization").unwrap(),
            "Bearer quire_x"
        );
        let publish = built(
            &Request::new(Verb::Publish, "/notes/a.md")
                .with_meta("expected-version", "3")
                .with_meta("agent", "claude")
                .with_body("# A"),
        );
        assert_eq!(publish.method(), reqwest::Method::PUT);
        assert_eq!(publish.url().as_str(), "http://127.0.0.1:6309/notes/a.md");
        assert_eq!(publish.headers().get("expected-version").unwrap(), "3");
        assert_eq!(publish.headers().get("meta-agent").unwrap(), "claude");
        let append = built(&Request::new(Verb::Append, "/a.md").with_body("x"));
        assert_eq!(
            (append.method().as_str(), append.url().query()),
            ("POST", Some("append"))
        );
        // Reads never send publisher metadata.
        let fetch = built(&Request::new(Verb::Fetch, "/a.md").with_meta("agent", "x"));
        assert!(fetch.headers().get("meta-agent").is_none());
        assert_eq!(fetch.url().query(), None);
    }

    #[test]
    fn a_value_no_header_can_carry_is_refused() {
        let base = reqwest::Url::parse("http://127.0.0.1:6309").unwrap();
        let request = Request::new(Verb::Publish, "/a.md").with_meta("title", "é\u{7f}");
        let error = http_request(&reqwest::Client::new(), &base, &request).unwrap_err();
        assert!(error.to_string().contains("\"title\""), "{error}");
    }
}
