//! The world manager: every configured world opened through the backend contract by one
//! [`StoreFactory`], with its tokens and limits, found by name or by authority (the Host
//! header or SNI). It never names a concrete backend; `wiring` supplies the factory. Each
//! store is wrapped in its publish policy (`crate::policy`) as it opens.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use quire_backend::Store;

use crate::auth::{
    Authorizer, Operation, PathPattern, Token, TokenRegistry, TokenSecret, TokenStore,
};
use crate::config::{Config, WorldConfig};
use crate::handlers::World;

/// Why a world could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("world {world:?}: {detail}")]
pub struct OpenError {
    pub world: String,
    pub detail: String,
}

impl OpenError {
    pub fn new(world: impl Into<String>, detail: impl Into<String>) -> Self {
        OpenError {
            world: world.into(),
            detail: detail.into(),
        }
    }
}

/// Opens the store a world's configuration names. The one place a backend is chosen.
#[async_trait]
pub trait StoreFactory: Send + Sync + fmt::Debug {
    async fn open(&self, world: &WorldConfig) -> Result<Arc<dyn Store>, OpenError>;
}

/// A development token generated for a world, to print once.
#[derive(Debug)]
pub struct DevelopmentToken {
    pub world: String,
    pub secret: TokenSecret,
}

/// Every world the server serves.
#[derive(Debug)]
pub struct Worlds {
    by_name: BTreeMap<String, Arc<World>>,
    by_authority: BTreeMap<String, Arc<World>>,
    ready: AtomicBool,
}

impl Worlds {
    /// Opens every world of `config` through `factory`. Returns the development tokens made.
    pub async fn open(
        config: &Config,
        factory: &dyn StoreFactory,
    ) -> Result<(Worlds, Vec<DevelopmentToken>), OpenError> {
        let mut worlds = Worlds {
            by_name: BTreeMap::new(),
            by_authority: BTreeMap::new(),
            ready: AtomicBool::new(false),
        };
        let mut development = Vec::new();
        for world_config in &config.worlds {
            let name = world_config.name.as_str().to_owned();
            let store = factory.open(world_config).await?;
            let store = crate::policy::open(store, &world_config.policy, world_config.read_only)
                .await
                .map_err(|detail| OpenError::new(&name, detail))?;
            let (auth, token) = authorizer(world_config)?;
            if let Some(secret) = token {
                development.push(DevelopmentToken {
                    world: name.clone(),
                    secret,
                });
            }
            let world = Arc::new(
                World::new(name.clone(), store, auth)
                    .with_limits(world_config.limits.clone())
                    .with_read_only(world_config.read_only),
            );
            worlds.insert(world, world_config.authorities.iter().map(|a| a.as_str()));
        }
        worlds.ready.store(true, Ordering::SeqCst);
        Ok((worlds, development))
    }

    /// Worlds built in code (tests, embedding): each served under its name as authority.
    pub fn from_worlds(list: impl IntoIterator<Item = World>) -> Worlds {
        let mut worlds = Worlds {
            by_name: BTreeMap::new(),
            by_authority: BTreeMap::new(),
            ready: AtomicBool::new(true),
        };
        for world in list {
            worlds.insert(Arc::new(world), std::iter::empty());
        }
        worlds
    }

    fn insert<'a>(&mut self, world: Arc<World>, authorities: impl Iterator<Item = &'a str>) {
        for authority in authorities {
            self.by_authority
                .insert(authority.to_ascii_lowercase(), world.clone());
        }
        self.by_authority
            .entry(world.name.clone())
            .or_insert_with(|| world.clone());
        self.by_name.insert(world.name.clone(), world);
    }

    /// The world a host name (without port) chooses. With a single world, any host
    /// (`localhost`, `127.0.0.1`) chooses it.
    pub fn for_host(&self, host: &str) -> Option<Arc<World>> {
        let host = host.to_ascii_lowercase();
        if let Some(world) = self.by_authority.get(&host) {
            return Some(world.clone());
        }
        (self.by_name.len() == 1)
            .then(|| self.by_name.values().next().cloned())
            .flatten()
    }

    pub fn get(&self, name: &str) -> Option<Arc<World>> {
        self.by_name.get(name).cloned()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<World>> {
        self.by_name.values()
    }

    /// Whether every world has opened and none is closing.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Marks the server not ready and closes every store (reads keep working until exit).
    pub async fn close(&self) {
        self.ready.store(false, Ordering::SeqCst);
        for world in self.by_name.values() {
            world.store.close().await;
        }
    }
}

/// A world's authorizer from its auth config, and the development token if one was made.
fn authorizer(config: &WorldConfig) -> Result<(Authorizer, Option<TokenSecret>), OpenError> {
    let name = config.name.as_str();
    let fail = |detail: String| OpenError::new(name, detail);
    let mut tokens: Vec<Token> = Vec::new();
    let mut registry = None;
    if let Some(file) = &config.auth.tokens_file {
        let loaded = TokenRegistry::load(file.clone()).map_err(|e| fail(e.to_string()))?;
        if !config.auth.development_token {
            registry = Some(Arc::new(loaded));
        } else {
            tokens.extend(loaded.current().tokens().cloned());
        }
    }
    let mut secret = None;
    if config.auth.development_token {
        let generated = TokenSecret::generate().map_err(|e| fail(e.to_string()))?;
        let everything = PathPattern::parse("/**").map_err(fail)?;
        tokens.push(Token::new(
            "development",
            generated.hash(),
            [Operation::Publish],
            [everything],
            None,
        ));
        let store = TokenStore::new(tokens).map_err(|e| fail(e.to_string()))?;
        registry = Some(Arc::new(TokenRegistry::fixed(store)));
        secret = Some(generated);
    }
    Ok((Authorizer::new(registry), secret))
}
