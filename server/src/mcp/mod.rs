//! `quire mcp`: a Model Context Protocol server on standard input and output (the `rmcp`
//! crate), through which an LLM agent reads and writes one Quire server, over `mark://` or
//! `http://` ([`crate::remote`]).
//!
//! Tools, one per verb and a few built on them: `fetch` (current, a pinned version, or one
//! section by `#anchor`), `list` (paged), `versions` (with chain validity), `lookup`
//! (catalog or body, scope, filters, limit), `publish` (an expected version is required; on
//! a conflict, `on_conflict: merge` answers a three-way merge of the version the agent read,
//! the current version and the agent's body, [`merge`]), `append`, `archive`, `discover`
//! (the agent manifest) and `backlinks` (documents linking to a path, from a bounded walk,
//! [`walk`]). Every document is also a resource (its server URL), readable and subscribable:
//! a subscription is a WATCH on the document, and each change is sent to the client as
//! `notifications/resources/updated`.
//!
//! Every answer carries the Mark response as text (the metadata block with `status`, then
//! the body); an answer whose status is not `ok`, `created` or `not-modified` is a tool error,
//! so the agent sees the server's status and message. Each write carries the MCP client's
//! name (from `initialize`) as `agent` metadata; the server records it after the label of
//! the token that authorised the write, so the change feed says who wrote and for whom.

pub mod merge;
pub mod walk;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use rmcp::{tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::mark::client::Trust;
use crate::mark::{Request, Response, Status, Verb, WatchBlock};
use crate::remote::{Remote, RemoteWatch, WatchRefusal};

/// The agent manifest `discover` reads.
pub const AGENT_MANIFEST: &str = crate::auth::AGENT_MANIFEST_PATH;
/// The most documents a walk (backlinks, the resource list) visits by default.
pub const DEFAULT_WALK: usize = 500;
/// The most documents a walk may be asked to visit.
pub const MAX_WALK: usize = 5000;

/// Where `quire mcp` sends its requests.
#[derive(Debug)]
pub struct McpSettings {
    /// `mark://host[:port]` or `http://host[:port]`.
    pub server: String,
    pub token: Option<String>,
    pub trust: Trust,
}

/// Serves MCP on standard input and output until the client closes them.
pub async fn serve_stdio(settings: McpSettings) -> anyhow::Result<()> {
    let remote = Remote::new(&settings.server, &settings.trust).await?;
    let server = QuireMcp::new(remote, settings.token);
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

/// The MCP server: tools and resources over one Quire server.
#[derive(Clone, Debug)]
pub struct QuireMcp {
    shared: Arc<Shared>,
    tool_router: ToolRouter<QuireMcp>,
}

#[derive(Debug)]
struct Shared {
    remote: Remote,
    token: Option<String>,
    /// Open resource subscriptions by URI: the task following each one's WATCH.
    subscriptions: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Ok(subscriptions) = self.subscriptions.get_mut() {
            for (_, task) in subscriptions.drain() {
                task.abort();
            }
        }
    }
}

/// What `publish` does when the document moved past `expected_version`.
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    /// Answer the conflict (the current version number) and nothing else.
    #[default]
    Fail,
    /// Also answer a three-way merge of the version read, the current one and this body.
    Merge,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct FetchArgs {
    /// The document path, e.g. `/notes/hello.md`; a trailing `#anchor` picks one section.
    pub path: String,
    /// Read this version instead of the current one.
    #[serde(default)]
    pub version: Option<u64>,
    /// A section anchor (the same as `#anchor` on the path).
    #[serde(default)]
    pub section: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListArgs {
    /// The directory, e.g. `/notes/` (default `/`).
    #[serde(default)]
    pub path: Option<String>,
    /// Entries per page, 1 to 1000.
    #[serde(default)]
    pub page_size: Option<u32>,
    /// The `next-cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// List archived documents too.
    #[serde(default)]
    pub include_archived: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct PathArgs {
    /// The document path, e.g. `/notes/hello.md`.
    pub path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct LookupArgs {
    /// Words to find (at least two characters), or `*` for every document.
    pub query: String,
    /// The directory to search under (default `/`).
    #[serde(default)]
    pub scope: Option<String>,
    /// `key=value` clauses, comma separated: `tag=x`, `modified-after=2026-01-01`, any
    /// metadata key.
    #[serde(default)]
    pub filter: Option<String>,
    /// At most this many rows (default 10, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// `catalog` (titles, tags, metadata) or `body` (sections of the text, with snippets;
    /// answered from the catalog while the body index is not ready).
    #[serde(default, rename = "match")]
    pub match_mode: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct PublishArgs {
    /// The document path, ending in `.md`.
    pub path: String,
    /// The whole new body (markdown). An empty body unarchives.
    pub body: String,
    /// The version this edit starts from (from `fetch`); 0 creates a new document only.
    pub expected_version: u64,
    /// On a conflict: `fail` (default) or `merge` (answer a three-way merge to check and
    /// publish again with the current version).
    #[serde(default)]
    pub on_conflict: OnConflict,
    /// Publisher metadata (`title`, `tags`, any lower-case key).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AppendArgs {
    /// The document path.
    pub path: String,
    /// The text to add at the end.
    pub body: String,
    /// The current version (from `fetch`).
    pub expected_version: u64,
    /// Publisher metadata laid over the current version's.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct BacklinksArgs {
    /// The document others link to.
    pub path: String,
    /// Only documents under this directory (default `/`).
    #[serde(default)]
    pub scope: Option<String>,
    /// Visit at most this many documents (default 500, at most 5000).
    #[serde(default)]
    pub max_documents: Option<usize>,
}

/// Whether a Mark status is a success for a tool.
fn succeeded(status: Status) -> bool {
    matches!(status, Status::Ok | Status::Created | Status::NotModified)
}

/// A Mark response as a tool answer: its metadata block and body as text; a tool error when
/// the status is not a success.
fn answer(response: &Response) -> CallToolResult {
    let text = String::from_utf8_lossy(&response.encode()).into_owned();
    if succeeded(response.status) {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    }
}

fn unanswered(error: impl std::fmt::Display) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "no answer from the server: {error}"
    ))])
}

/// The longest client name recorded as `agent` (metadata has a byte budget).
const MAX_AGENT: usize = 64;

/// The client's name from `initialize`, when it can be stored as metadata: one line, at
/// most [`MAX_AGENT`] characters.
fn agent_name(peer: &Peer<RoleServer>) -> Option<String> {
    let info = peer.peer_info()?;
    let name: String = info
        .client_info
        .name
        .trim()
        .chars()
        .take(MAX_AGENT)
        .collect();
    (!name.is_empty() && !name.chars().any(char::is_control)).then_some(name)
}

impl QuireMcp {
    pub fn new(remote: Remote, token: Option<String>) -> QuireMcp {
        QuireMcp {
            shared: Arc::new(Shared {
                remote,
                token,
                subscriptions: Mutex::new(HashMap::new()),
            }),
            tool_router: Self::tool_router(),
        }
    }

    fn request(&self, verb: Verb, path: impl Into<String>) -> Request {
        let mut request = Request::new(verb, path);
        if let Some(token) = &self.shared.token {
            request.metadata.insert("auth".into(), token.clone());
        }
        request
    }

    async fn call(&self, request: &Request) -> CallToolResult {
        match self.shared.remote.send(request).await {
            Ok(response) => answer(&response),
            Err(error) => unanswered(error),
        }
    }

    /// The body of `path` (a document or `doc.md/vN`) when the server has it.
    async fn body_of(&self, path: &str) -> Result<(Response, String), CallToolResult> {
        let response = self
            .shared
            .remote
            .send(&self.request(Verb::Fetch, path))
            .await
            .map_err(unanswered)?;
        if response.status != Status::Ok {
            return Err(answer(&response));
        }
        let body = String::from_utf8_lossy(&response.body).into_owned();
        Ok((response, body))
    }

    /// The world path a resource URI names.
    fn path_of_uri(&self, uri: &str) -> Option<String> {
        let root = self.shared.remote.url_of("/");
        let rest = uri.strip_prefix(root.trim_end_matches('/'))?;
        rest.starts_with('/').then(|| rest.to_owned())
    }

    /// Opens a WATCH on `path` (after `since`) and reads its acknowledgement, so no change
    /// committed after this returns is missed; answers the watch and its cursor.
    async fn open_watch(
        &self,
        path: &str,
        since: Option<String>,
    ) -> Result<(RemoteWatch, Option<String>), String> {
        let mut request = self.request(Verb::Watch, path);
        if let Some(cursor) = since {
            request.metadata.insert("since".into(), cursor);
        }
        let mut watch = match self.shared.remote.watch(&request).await {
            Ok(watch) => watch,
            Err(WatchRefusal::Refused(response)) => {
                return Err(format!(
                    "{}: {}",
                    response.status,
                    String::from_utf8_lossy(&response.body).trim()
                ));
            }
            Err(WatchRefusal::Failed(error)) => return Err(error.to_string()),
        };
        match watch.next().await {
            Ok(Some(WatchBlock::Control {
                status: Status::Ok | Status::Resync,
                cursor,
            })) => Ok((watch, cursor.map(|c| c.to_string()))),
            Ok(Some(block)) => Err(format!("the watch began with {block:?}")),
            Ok(None) => Err("the watch ended at once".into()),
            Err(error) => Err(error.to_string()),
        }
    }

    /// Tells the client of each change to `uri` the watch reports, opening it again after
    /// a `resync` (first saying the document may have changed), until the server closes the
    /// feed or the subscription ends.
    async fn follow(
        self,
        uri: String,
        path: String,
        peer: Peer<RoleServer>,
        mut watch: RemoteWatch,
        mut since: Option<String>,
    ) {
        let updated = || ResourceUpdatedNotificationParam::new(uri.clone());
        loop {
            match watch.next().await {
                Ok(Some(WatchBlock::Event(event))) => {
                    since = Some(event.cursor.to_string());
                    if peer.notify_resource_updated(updated()).await.is_err() {
                        return;
                    }
                }
                Ok(Some(WatchBlock::Control {
                    status: Status::Ok,
                    cursor,
                })) => since = cursor.map(|c| c.to_string()).or(since),
                Ok(Some(WatchBlock::Control {
                    status: Status::Resync,
                    cursor,
                })) => {
                    if peer.notify_resource_updated(updated()).await.is_err() {
                        return;
                    }
                    since = cursor.map(|c| c.to_string());
                    match self.open_watch(&path, since.clone()).await {
                        Ok((reopened, cursor)) => {
                            watch = reopened;
                            since = cursor.or(since);
                        }
                        Err(why) => {
                            tracing::warn!(%uri, %why, "subscription ended");
                            return;
                        }
                    }
                }
                Ok(Some(WatchBlock::Control { .. }) | None) => return,
                Err(error) => {
                    tracing::warn!(%uri, %error, "subscription ended");
                    return;
                }
            }
        }
    }
}

#[tool_router]
impl QuireMcp {
    #[tool(
        description = "Read a document: the current version, a pinned `version`, or one section (`#anchor` on the path, or `section`). Answers the Mark metadata (version, etag, modified, publisher metadata) and the markdown body. A directory answers its index.md or a listing."
    )]
    async fn fetch(
        &self,
        Parameters(args): Parameters<FetchArgs>,
    ) -> Result<CallToolResult, McpError> {
        let (base, fragment) = match args.path.split_once('#') {
            Some((base, fragment)) => (base.to_owned(), Some(fragment.to_owned())),
            None => (args.path.clone(), None),
        };
        let anchor = args.section.or(fragment).filter(|a| !a.is_empty());
        let path = match args.version {
            Some(version) => format!("{base}/v{version}"),
            None => base.clone(),
        };
        let Some(anchor) = anchor else {
            return Ok(self.call(&self.request(Verb::Fetch, path)).await);
        };
        let (mut response, body) = match self.body_of(&path).await {
            Ok(found) => found,
            Err(answer) => return Ok(answer),
        };
        match crate::outline::section(&body, &anchor) {
            Some(range) => {
                response.body = body[range].to_owned().into();
                response.metadata.insert("section".into(), anchor);
                Ok(answer(&response))
            }
            None => Ok(answer(&Response::error(
                Status::NotFound,
                &format!("{base} has no section #{anchor}"),
            ))),
        }
    }

    #[tool(
        description = "List a directory: one page of entries (`name` or `name/` for a subdirectory). When `complete` is false, pass `next-cursor` as `cursor` for the next page."
    )]
    async fn list(
        &self,
        Parameters(args): Parameters<ListArgs>,
    ) -> Result<CallToolResult, McpError> {
        let mut request = self.request(Verb::List, args.path.unwrap_or_else(|| "/".into()));
        if let Some(size) = args.page_size {
            request
                .metadata
                .insert("page-size".into(), size.to_string());
        }
        if let Some(cursor) = args.cursor {
            request.metadata.insert("cursor".into(), cursor);
        }
        if args.include_archived {
            request
                .metadata
                .insert("include-archived".into(), "true".into());
        }
        Ok(self.call(&request).await)
    }

    #[tool(
        description = "A document's version history, newest first, with `total`, `current` and `chain-valid` (whether every version's hash chain checks; `chain-error` says where it breaks)."
    )]
    async fn versions(
        &self,
        Parameters(args): Parameters<PathArgs>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self.call(&self.request(Verb::Versions, args.path)).await)
    }

    #[tool(
        description = "Search under a directory: the catalog (titles, tags, metadata), or with `match: body` the sections of the text with snippets. Answers a markdown table of matches; `matches` counts them."
    )]
    async fn lookup(
        &self,
        Parameters(args): Parameters<LookupArgs>,
    ) -> Result<CallToolResult, McpError> {
        let mut request = self.request(Verb::Lookup, args.scope.unwrap_or_else(|| "/".into()));
        request.metadata.insert("query".into(), args.query);
        if let Some(filter) = args.filter {
            request.metadata.insert("filter".into(), filter);
        }
        if let Some(limit) = args.limit {
            request.metadata.insert("limit".into(), limit.to_string());
        }
        if let Some(mode) = args.match_mode {
            request.metadata.insert("match".into(), mode);
        }
        Ok(self.call(&request).await)
    }

    #[tool(
        description = "Publish a whole new body for a document. `expected_version` is the version you read (0 to create a new document only). If someone published in between, the answer is a `conflict` with `server-version`; with `on_conflict: merge` it also holds a three-way merge of the version you read, the current version and your body (`<<<<<<< ours` your lines, `>>>>>>> theirs` the current ones where both changed the same lines): check it, then publish it with `expected_version` = `server-version`."
    )]
    async fn publish(
        &self,
        Parameters(args): Parameters<PublishArgs>,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let mut request = self
            .request(Verb::Publish, args.path.clone())
            .with_body(args.body.clone());
        request
            .metadata
            .insert("expected-version".into(), args.expected_version.to_string());
        for (key, value) in &args.metadata {
            request.metadata.insert(key.clone(), value.clone());
        }
        if let Some(agent) = agent_name(&peer) {
            request.metadata.insert("agent".into(), agent);
        }
        let response = match self.shared.remote.send(&request).await {
            Ok(response) => response,
            Err(error) => return Ok(unanswered(error)),
        };
        if response.status != Status::Conflict || args.on_conflict == OnConflict::Fail {
            return Ok(answer(&response));
        }
        Ok(self.merge_answer(&args, response).await)
    }

    #[tool(
        description = "Append text to the end of a document. `expected_version` must be its current version; on a conflict, fetch it again and check whether your text already landed before retrying."
    )]
    async fn append(
        &self,
        Parameters(args): Parameters<AppendArgs>,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let mut request = self.request(Verb::Append, args.path).with_body(args.body);
        request
            .metadata
            .insert("expected-version".into(), args.expected_version.to_string());
        for (key, value) in args.metadata {
            request.metadata.insert(key, value);
        }
        if let Some(agent) = agent_name(&peer) {
            request.metadata.insert("agent".into(), agent);
        }
        Ok(self.call(&request).await)
    }

    #[tool(
        description = "Archive a document: it is no longer served or listed, its versions stay. Publishing an empty body unarchives it."
    )]
    async fn archive(
        &self,
        Parameters(args): Parameters<PathArgs>,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let mut request = self.request(Verb::Archive, args.path);
        if let Some(agent) = agent_name(&peer) {
            request.metadata.insert("agent".into(), agent);
        }
        Ok(self.call(&request).await)
    }

    #[tool(
        description = "Read the world's agent manifest (/.well-known/agent-manifest.md): what this world holds and how agents are asked to use it. Start here."
    )]
    async fn discover(&self) -> Result<CallToolResult, McpError> {
        Ok(self.call(&self.request(Verb::Fetch, AGENT_MANIFEST)).await)
    }

    #[tool(
        description = "Documents that link to `path` (relative or absolute markdown links and images), found by reading the documents under `scope`; `complete` is false when the walk stopped at `max_documents`."
    )]
    async fn backlinks(
        &self,
        Parameters(args): Parameters<BacklinksArgs>,
    ) -> Result<CallToolResult, McpError> {
        let max = args
            .max_documents
            .unwrap_or(DEFAULT_WALK)
            .clamp(1, MAX_WALK);
        let scope = args.scope.unwrap_or_else(|| "/".into());
        let Some(target) = crate::links::resolve("/", &args.path) else {
            return Ok(answer(&Response::error(
                Status::BadRequest,
                &format!("{} is not a world path", args.path),
            )));
        };
        let walked = match walk::documents(
            &self.shared.remote,
            self.shared.token.as_deref(),
            &scope,
            max,
        )
        .await
        {
            Ok(walked) => walked,
            Err(walk::WalkError::Refused(response)) => return Ok(answer(&response)),
            Err(walk::WalkError::Failed(error)) => return Ok(unanswered(error)),
        };
        let mut linking = Vec::new();
        for document in &walked.documents {
            if *document == target {
                continue;
            }
            match self.body_of(document).await {
                Ok((_, body)) if crate::links::links_to(document, &body, &target) => {
                    linking.push(document.clone());
                }
                // A document that cannot be read here (archived since, not readable) links
                // to nothing the caller may see.
                _ => {}
            }
        }
        let mut body = format!("\n# Backlinks to {target}\n\n");
        for document in &linking {
            body.push_str(&format!("- [{document}]({document})\n"));
        }
        let response = Response::new(Status::Ok)
            .with_meta("matches", linking.len().to_string())
            .with_meta("searched", walked.documents.len().to_string())
            .with_meta("complete", walked.complete.to_string())
            .with_body(body);
        Ok(answer(&response))
    }
}

impl QuireMcp {
    /// The conflict answer with a three-way merge: ancestor = the version the agent read.
    async fn merge_answer(&self, args: &PublishArgs, conflict: Response) -> CallToolResult {
        let ancestor = if args.expected_version == 0 {
            String::new()
        } else {
            match self
                .body_of(&format!("{}/v{}", args.path, args.expected_version))
                .await
            {
                Ok((_, body)) => body,
                Err(answer) => return answer,
            }
        };
        let (current, theirs) = match self.body_of(&args.path).await {
            Ok(found) => found,
            Err(answer) => return answer,
        };
        let merged = merge::three_way(&ancestor, &args.body, &theirs);
        let mut response = conflict;
        if let Some(version) = current.metadata.get("version") {
            response
                .metadata
                .insert("server-version".into(), version.clone());
        }
        response.metadata.insert(
            "merge".into(),
            if merged.conflicts {
                "conflicts"
            } else {
                "clean"
            }
            .into(),
        );
        response.body = merged.text.into();
        answer(&response)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for QuireMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("quire", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Quire keeps versioned markdown documents. Call `discover` first, then `list`, \
             `lookup` and `fetch` to read; `publish` with the version you read, `append`, \
             `archive` to write. Documents are also resources you can subscribe to.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let walked = walk::documents(
            &self.shared.remote,
            self.shared.token.as_deref(),
            "/",
            MAX_WALK,
        )
        .await
        .map_err(|error| match error {
            walk::WalkError::Refused(response) => {
                McpError::internal_error(format!("the server answered {}", response.status), None)
            }
            walk::WalkError::Failed(error) => McpError::internal_error(error.to_string(), None),
        })?;
        let resources = walked
            .documents
            .iter()
            .map(|path| {
                Resource::new(self.shared.remote.url_of(path), path.clone())
                    .with_mime_type("text/markdown")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let root = self.shared.remote.url_of("/");
        let template = format!("{root}{{+path}}");
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(template, "document")
                .with_description("A document by its path")
                .with_mime_type("text/markdown"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let Some(path) = self.path_of_uri(&request.uri) else {
            return Err(McpError::invalid_params(
                format!("{} is not a document of this server", request.uri),
                None,
            ));
        };
        let response = self
            .shared
            .remote
            .send(&self.request(Verb::Fetch, path.clone()))
            .await
            .map_err(|error| McpError::internal_error(error.to_string(), None))?;
        if response.status != Status::Ok {
            let message = format!(
                "{}: {}",
                response.status,
                String::from_utf8_lossy(&response.body).trim()
            );
            return Err(if response.status == Status::NotFound {
                McpError::resource_not_found(message, None)
            } else {
                McpError::invalid_params(message, None)
            });
        }
        let text = String::from_utf8_lossy(&response.body).into_owned();
        let contents = ResourceContents::TextResourceContents {
            uri: request.uri,
            mime_type: Some("text/markdown".into()),
            text,
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let Some(path) = self.path_of_uri(&request.uri) else {
            return Err(McpError::invalid_params(
                format!("{} is not a document of this server", request.uri),
                None,
            ));
        };
        let (watch, since) = self
            .open_watch(&path, None)
            .await
            .map_err(|why| McpError::invalid_params(format!("{}: {why}", request.uri), None))?;
        let task = tokio::spawn(self.clone().follow(
            request.uri.clone(),
            path,
            context.peer,
            watch,
            since,
        ));
        let previous = self
            .shared
            .subscriptions
            .lock()
            .expect("subscriptions lock")
            .insert(request.uri, task.abort_handle());
        if let Some(previous) = previous {
            previous.abort();
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Some(task) = self
            .shared
            .subscriptions
            .lock()
            .expect("subscriptions lock")
            .remove(&request.uri)
        {
            task.abort();
        }
        Ok(())
    }
}
