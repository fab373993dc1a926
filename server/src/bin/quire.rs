//! The `quire` command: `serve` runs the knowledge server, `token new` makes a capability
//! token, `world` verifies, exports or imports a configured world, and the client verbs talk
//! to a server over its HTTP gateway.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use quire_server::auth::{Operation, TokenEntrySpec, TokenSecret};
use quire_server::config::Config;
use quire_server::worlds::Worlds;
use quire_server::{http, wiring, world_tools};

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

#[derive(Debug, Args)]
struct Target {
    /// `http://host[:port]/path`.
    url: String,
    /// A capability token (or QUIRE_TOKEN).
    #[arg(long)]
    token: Option<String>,
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
        Command::Serve { config, http } => serve(config, http).await,
        Command::Token { command } => token(command),
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
) -> anyhow::Result<ExitCode> {
    let mut config = match &config_path {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default(),
    };
    if let Some(address) = http_address {
        config.listen.http = address;
    }
    let (worlds, development) = Worlds::open(&config, &wiring::Backends).await?;
    for token in &development {
        println!(
            "development token for world {:?} (shown once): {}",
            token.world,
            token.secret.as_str()
        );
    }
    let worlds = Arc::new(worlds);
    let listener = tokio::net::TcpListener::bind(config.listen.http)
        .await
        .with_context(|| format!("bind {}", config.listen.http))?;
    println!("serving HTTP on http://{}", listener.local_addr()?);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    http::serve(listener, worlds.clone(), shutdown).await?;
    worlds.close().await;
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
    if !target.url.starts_with("http://") && !target.url.starts_with("https://") {
        bail!(
            "{}: only http:// and https:// URLs are served by this client",
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
    let token = target
        .token
        .clone()
        .or_else(|| std::env::var("QUIRE_TOKEN").ok());
    if let Some(token) = &token {
        request = request.bearer_auth(token);
    }
    let mut body = body;
    if let Some(write) = write {
        if let Some(version) = write.expected_version {
            request = request.header(http::EXPECTED_VERSION_HEADER, version.to_string());
        }
        for pair in &write.meta {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("--meta {pair:?} is not key=value"))?;
            request = request.header(format!("{}{key}", http::META_HEADER_PREFIX), value);
        }
        body = Some(match &write.file {
            Some(file) => {
                std::fs::read(file).with_context(|| format!("read {}", file.display()))?
            }
            None => {
                let mut buffer = Vec::new();
                std::io::stdin().read_to_end(&mut buffer)?;
                buffer
            }
        });
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
