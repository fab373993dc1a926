//! The `quire` command: `serve` runs the knowledge server, `token new` makes a capability
//! token, `peers cert` makes the replica certificate peer hints use, `world` verifies, exports or imports a configured world, and the client verbs talk
//! to a server over the Mark protocol on QUIC (`mark://` URLs) or over its HTTP gateway
//! (`http://` URLs); `mcp` serves the Model Context Protocol on standard input and output
//! for an LLM agent, over either.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};
use quire_server::config::Config;
use quire_server::mark::client::{self as mark_client, MarkUrl, Trust};
use quire_server::mark::{Request as MarkRequest, Status, Verb};
use quire_server::{http, wiring, world_tools};

/// jemalloc, with background threads handing back pages freed for a second (the decay is
/// set where it is built, in `.cargo/config.toml`): glibc's allocator keeps a replica's peak
/// after a cold start or a section index build or download: about a third more resident
/// memory at a million documents.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    name = "quire",
    version,
    about = "A versioned-markdown knowledge server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the configured worlds (without --config: one world `local` under ./data).
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override the HTTP gateway address.
        #[arg(long)]
        http: Option<std::net::SocketAddr>,
        /// Override the Mark protocol (QUIC, UDP) address.
        #[arg(long)]
        quic: Option<std::net::SocketAddr>,
    },
    /// Verify, export or import a configured world.
    World {
        #[command(subcommand)]
        command: world_tools::WorldCommand,
    },
    /// Capability tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Peer hints between replicas (`[peers]`).
    Peers {
        #[command(subcommand)]
        command: PeersCommand,
    },
    /// Read a document, a pinned version (`/doc.md/vN`) or a directory.
    Fetch(Target),
    /// List a directory.
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        page_size: Option<u32>,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        include_archived: bool,
    },
    /// A document's version history.
    Versions(Target),
    /// Publish a document from a file (or standard input).
    Publish {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Append to a document.
    Append {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Archive a document (publish an empty body to unarchive).
    Archive(Target),
    /// Follow committed changes of a document, or of every document under a path ending in
    /// `/`, printing each block as it arrives until the server ends the watch.
    Watch {
        #[command(flatten)]
        target: Target,
        /// Resume after this cursor (from an earlier event).
        #[arg(long)]
        since: Option<String>,
    },
    /// Serve the Model Context Protocol on standard input and output, for an LLM agent's
    /// host: tools and resources over the server at --server.
    Mcp {
        /// `mark://host[:port]` (QUIC) or `http://host[:port]`.
        #[arg(long, default_value = "http://127.0.0.1:6309")]
        server: String,
        /// A capability token (or QUIRE_TOKEN).
        #[arg(long)]
        token: Option<String>,
        /// mark:// only: trust the server certificates in this PEM file.
        #[arg(long, value_name = "FILE")]
        ca: Option<PathBuf>,
        /// mark:// only, for development: accept any server certificate.
        #[arg(long, conflicts_with = "ca")]
        insecure: bool,
    },
    /// Search the catalog under a directory.
    Lookup {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        query: String,
        #[arg(long)]
        filter: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Print a new token and the tokens-file entry holding its hash.
    New {
        #[arg(long, default_value = "writer")]
        label: String,
        /// Path patterns (`/docs/**`).
        #[arg(long = "path", default_values_t = ["/**".to_owned()])]
        paths: Vec<String>,
        /// `publish` and/or `read`.
        #[arg(long = "operation", default_values_t = ["publish".to_owned()])]
        operations: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum PeersCommand {
    /// Generate the replica certificate and key every replica shares (copy both files to
    /// each and name them in `[peers] cert` and `key`). Refuses to overwrite either file.
    Cert {
        #[arg(long, default_value = "replica-cert.pem")]
        cert: PathBuf,
        #[arg(long, default_value = "replica-key.pem")]
        key: PathBuf,
    },
}

#[derive(Debug, Args)]
struct Target {
    /// `mark://host[:port]/path` (QUIC, port 6309 by default) or `http://host[:port]/path`.
    url: String,
    /// A capability token (or QUIRE_TOKEN).
    #[arg(long)]
    token: Option<String>,
    /// mark:// only: trust the server certificates in this PEM file (e.g. the development
    /// certificate `quire serve` writes) instead of the system roots.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// mark:// only, for development: accept any server certificate.
    #[arg(long, conflicts_with = "ca")]
    insecure: bool,
}

#[derive(Debug, Args)]
struct WriteArgs {
    /// The body; standard input when absent.
    #[arg(long)]
    file: Option<PathBuf>,
    #[arg(long)]
    expected_version: Option<u64>,
    /// Publisher metadata, `key=value` (repeatable).
    #[arg(long = "meta")]
    meta: Vec<String>,
}

impl WriteArgs {
    /// The `--meta` pairs, split at their first `=`.
    fn metadata(&self) -> anyhow::Result<Vec<(&str, &str)>> {
        self.meta
            .iter()
            .map(|pair| {
                pair.split_once('=')
                    .with_context(|| format!("--meta {pair:?} is not key=value"))
            })
            .collect()
    }

    /// The body: `--file`, or standard input.
    fn body(&self) -> anyhow::Result<Vec<u8>> {
        match &self.file {
            Some(file) => std::fs::read(file).with_context(|| format!("read {}", file.display())),
            None => {
                let mut buffer = Vec::new();
                std::io::stdin().read_to_end(&mut buffer)?;
                Ok(buffer)
            }
        }
    }
}

impl Target {
    /// `--token`, or QUIRE_TOKEN.
    fn token(&self) -> Option<String> {
        self.token
            .clone()
            .or_else(|| std::env::var("QUIRE_TOKEN").ok())
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("quire: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("quire: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve { config, http, quic } => serve(config, http, quic).await,
        Command::Token { command } => token(command),
        Command::Peers {
            command: PeersCommand::Cert { cert, key },
        } => {
            quire_server::peers::identity::generate(&cert, &key)?;
            println!(
                "wrote the replica certificate {} and its key {}; copy both to every replica",
                cert.display(),
                key.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::World { command } => world_tools::run(command, &wiring::Backends).await,
        Command::Fetch(target) => call(reqwest::Method::GET, &target, &[], None, None).await,
        Command::List {
            target,
            page_size,
            cursor,
            include_archived,
        } => {
            let mut query = vec![("list".to_owned(), String::new())];
            if let Some(size) = page_size {
                query.push(("page-size".into(), size.to_string()));
            }
            if let Some(cursor) = cursor {
                query.push(("cursor".into(), cursor));
            }
            if include_archived {
                query.push(("include-archived".into(), "true".into()));
            }
            call(reqwest::Method::GET, &target, &query, None, None).await
        }
        Command::Versions(target) => {
            let query = [("versions".to_owned(), String::new())];
            call(reqwest::Method::GET, &target, &query, None, None).await
        }
        Command::Publish { target, write } => {
            call(reqwest::Method::PUT, &target, &[], Some(&write), None).await
        }
        Command::Append { target, write } => {
            let query = [("append".to_owned(), String::new())];
            call(reqwest::Method::POST, &target, &query, Some(&write), None).await
        }
        Command::Archive(target) => {
            let query = [("archive".to_owned(), String::new())];
            call(
                reqwest::Method::POST,
                &target,
                &query,
                None,
                Some(Vec::new()),
            )
            .await
        }
        Command::Watch { target, since } => watch(&target, since).await,
        Command::Mcp {
            server,
            token,
            ca,
            insecure,
        } => {
            let trust = if insecure {
                Trust::Insecure
            } else if let Some(ca) = &ca {
                Trust::from_pem_file(ca)?
            } else {
                Trust::SystemRoots
            };
            let settings = quire_server::mcp::McpSettings {
                server,
                token: token.or_else(|| std::env::var("QUIRE_TOKEN").ok()),
                trust,
            };
            quire_server::mcp::serve_stdio(settings).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Lookup {
            target,
            query,
            filter,
            limit,
        } => {
            let mut params = vec![
                ("lookup".to_owned(), String::new()),
                ("query".into(), query),
            ];
            if let Some(filter) = filter {
                params.push(("filter".into(), filter));
            }
            if let Some(limit) = limit {
                params.push(("limit".into(), limit.to_string()));
            }
            call(reqwest::Method::GET, &target, &params, None, None).await
        }
    }
}

async fn serve(
    config_path: Option<PathBuf>,
    http_address: Option<std::net::SocketAddr>,
    quic_address: Option<std::net::SocketAddr>,
) -> anyhow::Result<ExitCode> {
    let mut config = match &config_path {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default(),
    };
    if let Some(address) = http_address {
        config.listen.http = address;
    }
    if let Some(address) = quic_address {
        config.listen.quic = address;
    }
    let beyond_loopback = config.listen.beyond_loopback();
    let running = quire_server::run(config, config_path.as_deref()).await?;
    for token in &running.development_tokens {
        println!(
            "development token for world {:?} (shown once): {}",
            token.world,
            token.secret.as_str()
        );
    }
    if !running.development_tokens.is_empty() {
        for (transport, address) in beyond_loopback {
            eprintln!(
                "WARNING: a world with a development token (publish everywhere) is served over {transport} on {address}, beyond this machine; anyone who sees the token can write every document"
            );
        }
    }
    if let Some(address) = running.peer_hints {
        println!("serving peer hints on {address}");
    }
    if running.certificates.is_development() {
        println!(
            "development certificate (pin it with --ca): {}",
            running.certificates.cert_path().display()
        );
    }
    println!("serving Mark over QUIC on mark://{}", running.quic);
    println!("serving HTTP on http://{}", running.http);
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

fn token(command: TokenCommand) -> anyhow::Result<ExitCode> {
    let TokenCommand::New {
        label,
        paths,
        operations,
    } = command;
    let operations = operations
        .iter()
        .map(|op| match op.as_str() {
            "read" => Ok(Operation::Read),
            "publish" => Ok(Operation::Publish),
            other => bail!("unknown operation {other:?} (read or publish)"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for path in &paths {
        quire_server::auth::PathPattern::parse(path)
            .map_err(|why| anyhow::anyhow!("path pattern {path:?}: {why}"))?;
    }
    let secret = TokenSecret::generate()?;
    let entry = TokenEntrySpec {
        hash: secret.hash().to_string(),
        operations,
        paths,
        expires: None,
    };
    println!("token: {}", secret.as_str());
    println!();
    print!("{}", entry.to_toml(&label));
    Ok(ExitCode::SUCCESS)
}

async fn call(
    method: reqwest::Method,
    target: &Target,
    query: &[(String, String)],
    write: Option<&WriteArgs>,
    body: Option<Vec<u8>>,
) -> anyhow::Result<ExitCode> {
    if target.url.starts_with(mark_client::SCHEME) {
        return call_mark(&method, target, query, write, body).await;
    }
    if !target.url.starts_with("http://") && !target.url.starts_with("https://") {
        bail!(
            "{}: only mark://, http:// and https:// URLs are served by this client",
            target.url
        );
    }
    let client = reqwest::Client::new();
    let mut url = reqwest::Url::parse(&target.url).context("parse the URL")?;
    if !query.is_empty() {
        let mut pairs = url.query_pairs_mut();
        for (key, value) in query {
            if value.is_empty() {
                pairs.append_key_only(key);
            } else {
                pairs.append_pair(key, value);
            }
        }
    }
    let mut request = client.request(method, url);
    let token = target.token();
    if let Some(token) = &token {
        request = request.bearer_auth(token);
    }
    let mut body = body;
    if let Some(write) = write {
        if let Some(version) = write.expected_version {
            request = request.header(http::EXPECTED_VERSION_HEADER, version.to_string());
        }
        for (key, value) in write.metadata()? {
            request = request.header(format!("{}{key}", http::META_HEADER_PREFIX), value);
        }
        body = Some(write.body()?);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request.send().await?;
    let ok = response.status().is_success() || response.status().as_u16() == 304;
    for (name, value) in response.headers() {
        if let Some(key) = name.as_str().strip_prefix(http::MARK_HEADER_PREFIX) {
            eprintln!("{key}: {}", value.to_str().unwrap_or("?"));
        }
    }
    let text = response.text().await?;
    print!("{text}");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// WATCH over either transport: every block is printed as the server sends it.
async fn watch(target: &Target, since: Option<String>) -> anyhow::Result<ExitCode> {
    let token = target.token();
    if target.url.starts_with(mark_client::SCHEME) {
        let url = MarkUrl::parse(&target.url)?;
        let mut request = MarkRequest::new(Verb::Watch, url.path.clone());
        if let Some(since) = since {
            request.metadata.insert("since".into(), since);
        }
        if let Some(token) = token {
            request.metadata.insert("auth".into(), token);
        }
        let trust = trust(target)?;
        let address = mark_client::resolve(&url).await?;
        let client = mark_client::Client::for_server(address, &trust)?;
        let connection = client.connect(address, &url.host).await?;
        let mut stream = connection.watch(&request).await?;
        let mut last = None;
        while let Some(block) = stream.next().await? {
            print!("{}", String::from_utf8_lossy(&block.encode()?));
            last = Some(block);
        }
        connection.close();
        client.wait_idle().await;
        let ended_well = matches!(
            last,
            Some(quire_server::mark::WatchBlock::Control {
                status: Status::Closing | Status::Resync,
                ..
            })
        );
        return Ok(if ended_well {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let mut url = reqwest::Url::parse(&target.url).context("parse the URL")?;
    {
        let mut pairs = url.query_pairs_mut();
        pairs.append_key_only("watch");
        if let Some(since) = &since {
            pairs.append_pair("since", since);
        }
    }
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = &token {
        request = request.bearer_auth(token);
    }
    let mut response = request.send().await?;
    let ok = response.status().is_success();
    if !ok {
        eprintln!("status: {}", response.status());
    }
    while let Some(chunk) = response.chunk().await? {
        print!("{}", String::from_utf8_lossy(&chunk));
        use std::io::Write as _;
        std::io::stdout().flush()?;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// How a mark:// client verifies the server (`--insecure`, `--ca`, or the system roots).
fn trust(target: &Target) -> anyhow::Result<Trust> {
    Ok(if target.insecure {
        eprintln!("warning: --insecure: the server certificate is not verified");
        Trust::Insecure
    } else if let Some(ca) = &target.ca {
        Trust::from_pem_file(ca)?
    } else {
        Trust::SystemRoots
    })
}

/// The query keys that only say which verb an HTTP call is.
const VERB_MARKERS: [&str; 5] = ["list", "versions", "lookup", "append", "archive"];

/// A client verb over the Mark protocol: the same arguments as over HTTP, sent as one Mark
/// request on a QUIC stream.
async fn call_mark(
    method: &reqwest::Method,
    target: &Target,
    query: &[(String, String)],
    write: Option<&WriteArgs>,
    body: Option<Vec<u8>>,
) -> anyhow::Result<ExitCode> {
    let url = MarkUrl::parse(&target.url)?;
    let has = |key: &str| query.iter().any(|(k, _)| k == key);
    let verb = match *method {
        reqwest::Method::PUT => Verb::Publish,
        reqwest::Method::POST if has("append") => Verb::Append,
        reqwest::Method::POST => Verb::Archive,
        _ if has("versions") => Verb::Versions,
        _ if has("list") => Verb::List,
        _ if has("lookup") => Verb::Lookup,
        _ => Verb::Fetch,
    };
    let mut request = MarkRequest::new(verb, url.path.clone());
    for (key, value) in query {
        if !VERB_MARKERS.contains(&key.as_str()) {
            request.metadata.insert(key.clone(), value.clone());
        }
    }
    if let Some(token) = target.token() {
        request.metadata.insert("auth".into(), token);
    }
    let mut body = body;
    if let Some(write) = write {
        if let Some(version) = write.expected_version {
            request
                .metadata
                .insert("expected-version".into(), version.to_string());
        }
        for (key, value) in write.metadata()? {
            request.metadata.insert(key.to_owned(), value.to_owned());
        }
        body = Some(write.body()?);
    }
    if let Some(body) = body {
        request.body = body.into();
    }
    let trust = trust(target)?;
    let address = mark_client::resolve(&url).await?;
    let client = mark_client::Client::for_server(address, &trust)?;
    let connection = client.connect(address, &url.host).await?;
    let response = connection.request(&request).await?;
    connection.close();
    client.wait_idle().await;
    eprintln!("status: {}", response.status);
    for (key, value) in &response.metadata {
        eprintln!("{key}: {value}");
    }
    print!("{}", String::from_utf8_lossy(&response.body));
    let ok = matches!(
        response.status,
        Status::Ok | Status::Created | Status::NotModified
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
