//! The publish policy: a world's policy document at [`POLICY_PATH`], what it says
//! ([`Policy`]), and [`Enforce`], the store decorator that judges every write by it.
//!
//! # The policy document
//!
//! A markdown document whose body opens with a frontmatter block of directives; the prose
//! after the block is for people:
//!
//! ```markdown
//! ---
//! strictness: block              # warn | block | ask (required)
//! require_tags: domain           # each prefix needs a tag `prefix:value`
//! require_fields: title, owner   # each metadata key needs a non-empty value
//! applies_to: /docs/**, /notes/  # path patterns (the token language); default: everything
//! ---
//! # Publish policy
//! ```
//!
//! Values are strings; a list is comma-separated, a flow list (`[a, b]`) or `- item` lines
//! under the key. `#` starts a comment. Unknown or repeated keys, a missing or unknown
//! strictness, an empty tag prefix or a malformed field name or pattern make the document
//! invalid.
//!
//! # Enforcement
//!
//! [`Enforce`] gives every PUBLISH, APPEND and archive change a [`Precondition`], so the
//! store judges the write inside its commit against the world the write applies to: a write
//! rebased over a policy change (another replica won the slot) is judged by the new policy.
//! - A publish or append of a document the policy applies to is judged on its final
//!   metadata (an append inheriting compliant metadata passes; one overriding it with
//!   non-compliant tags fails). `warn` lets violations through (logged); `block` and `ask`
//!   refuse the write with [`ErrorKind::Rejected`](quire_backend::ErrorKind::Rejected)
//!   (`bad-request`) whose message lists them:
//!   `publish policy (block) refused this write:\n- missing-tag: domain`.
//! - The policy document is never judged by itself: publishing it requires a valid document
//!   (else `invalid publish policy: …`), and archiving it is refused while the policy is
//!   required.
//! - A required policy that is missing, archived or invalid refuses every other write. An
//!   optional one in that state imposes nothing.
//!
//! [`open`] wraps a world's store and publishes the configured seed file as the policy
//! document's first version when the world has none.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use quire_backend::{
    ArchiveRequest, ArchiveResult, ChangeHub, ChangeSource, Ctx, Document, ErrorKind, Follower, Op,
    Precondition, PreparedWrite, ReadView, Reader, Store, StoreStats, WriteRequest,
};
use quire_log::metadata::{Metadata, apply_default_type, split_tags};
use quire_log::{DocPath, Hash};

use crate::auth::PathPattern;
use crate::config::PolicyConfig;

/// Where a world's policy document lives (the only supported path).
pub(crate) const POLICY_PATH: &str = "/.well-known/demarkus/policy.md";

/// How a policy treats a write that breaks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strictness {
    /// Let it through; log the violations.
    Warn,
    /// Refuse it.
    Block,
    /// Refuse it: a person must approve it out of band.
    Ask,
}

impl Strictness {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Strictness::Warn => "warn",
            Strictness::Block => "block",
            Strictness::Ask => "ask",
        }
    }
}

/// One broken rule: a code and what it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    /// `missing-tag` or `missing-field`.
    pub code: &'static str,
    /// The tag prefix or field name.
    pub name: String,
}

/// A parsed policy document.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    pub strictness: Strictness,
    /// Tag prefixes: each needs a tag `prefix:value` with a non-empty value.
    pub require_tags: Vec<String>,
    /// Metadata keys that need a non-empty value.
    pub require_fields: Vec<String>,
    /// The paths the policy judges; empty: every document.
    pub applies_to: Vec<PathPattern>,
}

impl Policy {
    /// Parses a policy document's body; the error says what is wrong.
    pub(crate) fn parse(body: &str) -> Result<Policy, String> {
        let pairs = frontmatter(body)?;
        let mut strictness = None;
        let mut require_tags = Vec::new();
        let mut require_fields = Vec::new();
        let mut applies_to = Vec::new();
        for (key, values) in pairs {
            match key.as_str() {
                "strictness" => {
                    let [value] = values.as_slice() else {
                        return Err("strictness takes one value".into());
                    };
                    strictness = Some(match value.as_str() {
                        "warn" => Strictness::Warn,
                        "block" => Strictness::Block,
                        "ask" => Strictness::Ask,
                        other => {
                            return Err(format!(
                                "strictness {other:?} is not one of warn, block, ask"
                            ));
                        }
                    });
                }
                "require_tags" => {
                    for prefix in values {
                        let prefix = prefix.strip_suffix(':').unwrap_or(&prefix).to_owned();
                        if prefix.is_empty() || prefix.contains([':', ',']) {
                            return Err(format!("require_tags: {prefix:?} is not a tag prefix"));
                        }
                        require_tags.push(prefix);
                    }
                }
                "require_fields" => {
                    for field in values {
                        let valid = field.starts_with(|c: char| c.is_ascii_lowercase())
                            && field.chars().all(|c| {
                                c.is_ascii_lowercase() || c.is_ascii_digit() || "-._".contains(c)
                            });
                        if !valid {
                            return Err(format!("require_fields: {field:?} is not a metadata key"));
                        }
                        require_fields.push(field);
                    }
                }
                "applies_to" => {
                    for pattern in values {
                        applies_to.push(
                            PathPattern::parse(&pattern)
                                .map_err(|why| format!("applies_to: {why}"))?,
                        );
                    }
                }
                other => return Err(format!("unknown directive {other:?}")),
            }
        }
        Ok(Policy {
            strictness: strictness.ok_or("strictness is missing")?,
            require_tags,
            require_fields,
            applies_to,
        })
    }

    /// Whether the policy judges writes to `path`.
    pub(crate) fn applies_to(&self, path: &DocPath) -> bool {
        path.as_str() != POLICY_PATH
            && (self.applies_to.is_empty()
                || self.applies_to.iter().any(|p| p.matches(path.as_str())))
    }

    /// The rules `metadata` breaks, tags first, each in declared order.
    pub(crate) fn judge(&self, metadata: &Metadata) -> Vec<Violation> {
        let tags: Vec<&str> = metadata
            .get("tags")
            .map_or_else(Vec::new, |t| split_tags(t).collect());
        let tagged = |prefix: &str| {
            tags.iter().any(|tag| {
                tag.split_once(':').is_some_and(|(p, value)| {
                    p.trim().eq_ignore_ascii_case(prefix) && !value.trim().is_empty()
                })
            })
        };
        let tag_violations = self
            .require_tags
            .iter()
            .filter(|prefix| !tagged(prefix))
            .map(|prefix| Violation {
                code: "missing-tag",
                name: prefix.clone(),
            });
        let field_violations = self
            .require_fields
            .iter()
            .filter(|field| metadata.get(*field).is_none_or(|v| v.trim().is_empty()))
            .map(|field| Violation {
                code: "missing-field",
                name: field.clone(),
            });
        tag_violations.chain(field_violations).collect()
    }

    /// The message a refused write answers with.
    pub(crate) fn refusal(&self, violations: &[Violation]) -> String {
        let mut message = format!(
            "publish policy ({}) refused this write:",
            self.strictness.as_str()
        );
        for violation in violations {
            message.push_str(&format!("\n- {}: {}", violation.code, violation.name));
        }
        message
    }
}

/// The directives of a body's opening frontmatter block: key and values, in order.
fn frontmatter(body: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut lines = body.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("the document does not open with a frontmatter block (---)".into());
    }
    let mut pairs: Vec<(String, Vec<String>)> = Vec::new();
    let mut closed = false;
    for (index, raw) in lines.enumerate() {
        let number = index + 2;
        let line = strip_comment(raw).trim_end();
        if line == "---" {
            closed = true;
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let trimmed = line.trim_start();
        if let Some(item) = trimmed.strip_prefix('-')
            && (item.is_empty() || item.starts_with(' '))
        {
            let Some((_, values)) = pairs.last_mut() else {
                return Err(format!("line {number}: a list item outside a key"));
            };
            values.push(unquote(item.trim()).to_owned());
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("line {number}: expected `key: value`"));
        };
        let key = key.trim();
        if key.is_empty() || trimmed.len() != line.len() {
            return Err(format!("line {number}: expected `key: value`"));
        }
        if pairs.iter().any(|(k, _)| k == key) {
            return Err(format!("line {number}: {key} is repeated"));
        }
        pairs.push((key.to_owned(), list(value.trim())));
    }
    if !closed {
        return Err("the frontmatter block is not closed (---)".into());
    }
    for (key, values) in &mut pairs {
        values.retain(|v| !v.is_empty());
        if values.is_empty() {
            return Err(format!("{key} has no value"));
        }
    }
    Ok(pairs)
}

/// A line without its `#` comment (one at the start, or after whitespace, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return &line[..at],
            _ => {}
        }
        previous = c;
    }
    line
}

fn unquote(value: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner;
        }
    }
    value
}

/// A value as a list: `[a, b]`, `a, b`, or one scalar.
fn list(value: &str) -> Vec<String> {
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(value);
    inner
        .split(',')
        .map(|item| unquote(item.trim()).trim().to_owned())
        .filter(|item| !item.is_empty())
        .collect()
}

/// The policy as a write finds it.
enum Standing {
    Missing,
    Archived,
    Invalid(String),
    Valid(Arc<Policy>),
}

/// A policy body parsed: the policy, or why it is invalid.
type Parsed = Result<Arc<Policy>, String>;

/// The precondition every write carries: judges it by the policy in the state it applies to.
struct PolicyCheck {
    required: bool,
    policy_path: DocPath,
    /// The last policy body parsed, by body hash: a policy changes rarely, and a write
    /// queued behind a policy publish in the same batch finds it here before its bytes are
    /// stored.
    parsed: Mutex<Option<(Hash, Parsed)>>,
}

impl fmt::Debug for PolicyCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyCheck")
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

impl PolicyCheck {
    fn parse(&self, body_hash: Hash, body: &str) -> Parsed {
        let parsed = Policy::parse(body).map(Arc::new);
        *self.parsed.lock().expect("policy cache poisoned") = Some((body_hash, parsed.clone()));
        parsed
    }

    fn cached(&self, body_hash: &Hash) -> Option<Parsed> {
        let parsed = self.parsed.lock().expect("policy cache poisoned");
        parsed
            .as_ref()
            .filter(|(hash, _)| hash == body_hash)
            .map(|(_, policy)| policy.clone())
    }

    async fn standing(&self, ctx: &Ctx, state: &dyn Reader) -> quire_backend::Result<Standing> {
        let current = match state.current(ctx, POLICY_PATH).await {
            Ok(current) => current,
            Err(e) if e.is_not_found() => return Ok(Standing::Missing),
            Err(e) => return Err(e),
        };
        if current.archived {
            return Ok(Standing::Archived);
        }
        let parsed = match self.cached(&current.body_hash) {
            Some(parsed) => parsed,
            None => {
                let doc = state.get(ctx, POLICY_PATH, 0).await?;
                self.parse(current.body_hash, &doc.content)
            }
        };
        Ok(match parsed {
            Ok(policy) => Standing::Valid(policy),
            Err(why) => Standing::Invalid(why),
        })
    }
}

#[async_trait]
impl Precondition for PolicyCheck {
    async fn check(
        &self,
        ctx: &Ctx,
        state: &dyn Reader,
        write: &PreparedWrite,
    ) -> quire_backend::Result<()> {
        let op = if write.archived.is_some() {
            Op::Archive
        } else {
            Op::Publish
        };
        let key = write.path.as_str();
        let refuse = |message: String| Err(quire_backend::Error::rejected(op, key, message));
        if write.path == self.policy_path {
            if let Some((body, _)) = &write.content
                && let Err(why) = self.parse(Hash::of(body.as_bytes()), body)
            {
                return refuse(format!("invalid publish policy: {why}"));
            }
            if write.archived == Some(true) && self.required {
                return refuse(format!(
                    "{POLICY_PATH} is the world's required publish policy; it cannot be archived"
                ));
            }
            return Ok(());
        }
        let policy = match self.standing(ctx, state).await? {
            Standing::Valid(policy) => policy,
            other => {
                let why = match &other {
                    Standing::Missing => format!("{POLICY_PATH} does not exist"),
                    Standing::Archived => format!("{POLICY_PATH} is archived"),
                    Standing::Invalid(why) => format!("{POLICY_PATH} is invalid: {why}"),
                    Standing::Valid(_) => unreachable!("handled above"),
                };
                if self.required {
                    return refuse(format!("this world requires a publish policy: {why}"));
                }
                if matches!(other, Standing::Invalid(_)) {
                    tracing::warn!(%why, "publish policy ignored");
                }
                return Ok(());
            }
        };
        let Some((_, metadata)) = &write.content else {
            return Ok(());
        };
        if !policy.applies_to(&write.path) {
            return Ok(());
        }
        let violations = policy.judge(metadata);
        if violations.is_empty() {
            return Ok(());
        }
        let message = policy.refusal(&violations);
        if policy.strictness == Strictness::Warn {
            tracing::info!(path = key, %message, "publish policy warning");
            return Ok(());
        }
        refuse(message)
    }
}

/// Runs two preconditions, the caller's first.
#[derive(Debug)]
struct Both(Arc<dyn Precondition>, Arc<dyn Precondition>);

#[async_trait]
impl Precondition for Both {
    async fn check(
        &self,
        ctx: &Ctx,
        state: &dyn Reader,
        write: &PreparedWrite,
    ) -> quire_backend::Result<()> {
        self.0.check(ctx, state, write).await?;
        self.1.check(ctx, state, write).await
    }
}

/// A store whose writes are judged by the world's publish policy.
pub(crate) struct Enforce {
    inner: Arc<dyn Store>,
    check: Arc<PolicyCheck>,
}

impl fmt::Debug for Enforce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enforce")
            .field("inner", &self.inner)
            .field("required", &self.check.required)
            .finish()
    }
}

impl Enforce {
    /// Wraps `inner`; `required` refuses writes while the policy is missing, archived or
    /// invalid.
    pub(crate) fn new(inner: Arc<dyn Store>, required: bool) -> Enforce {
        Enforce {
            inner,
            check: Arc::new(PolicyCheck {
                required,
                policy_path: policy_path(),
                parsed: Mutex::new(None),
            }),
        }
    }

    fn precondition(&self, own: Option<Arc<dyn Precondition>>) -> Arc<dyn Precondition> {
        let check: Arc<dyn Precondition> = self.check.clone();
        match own {
            Some(own) => Arc::new(Both(own, check)),
            None => check,
        }
    }
}

/// [`POLICY_PATH`] as a document path.
pub(crate) fn policy_path() -> DocPath {
    DocPath::parse(POLICY_PATH).expect("the policy path is a document path")
}

#[async_trait]
impl Store for Enforce {
    async fn open_view(&self, ctx: &Ctx) -> quire_backend::Result<Box<dyn ReadView>> {
        self.inner.open_view(ctx).await
    }

    async fn publish(
        &self,
        ctx: &Ctx,
        mut request: WriteRequest,
    ) -> quire_backend::Result<Document> {
        request.precondition = Some(self.precondition(request.precondition.take()));
        self.inner.publish(ctx, request).await
    }

    async fn append(
        &self,
        ctx: &Ctx,
        mut request: WriteRequest,
    ) -> quire_backend::Result<Document> {
        request.precondition = Some(self.precondition(request.precondition.take()));
        self.inner.append(ctx, request).await
    }

    async fn set_archived(
        &self,
        ctx: &Ctx,
        mut request: ArchiveRequest,
    ) -> quire_backend::Result<ArchiveResult> {
        request.precondition = Some(self.precondition(request.precondition.take()));
        self.inner.set_archived(ctx, request).await
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }
}

impl ChangeSource for Enforce {
    fn changes(&self) -> Option<Arc<ChangeHub>> {
        self.inner.changes()
    }
}

impl Follower for Enforce {
    fn follow(&self, sequence: u64) {
        self.inner.follow(sequence);
    }
}

/// A world's store as its policy configuration asks: wrapped in [`Enforce`] when enforced,
/// with the seed file published as the policy document's first version when the world has
/// none (never on a read-only world).
pub(crate) async fn open(
    store: Arc<dyn Store>,
    config: &PolicyConfig,
    read_only: bool,
) -> Result<Arc<dyn Store>, String> {
    let store: Arc<dyn Store> = if config.enforce {
        Arc::new(Enforce::new(store, config.required))
    } else {
        store
    };
    if let Some(file) = &config.seed_file
        && !read_only
    {
        seed(store.as_ref(), file).await?;
    }
    Ok(store)
}

/// Publishes `file` as the policy document unless one exists (archived included); whether
/// it did.
pub(crate) async fn seed(store: &dyn Store, file: &Path) -> Result<bool, String> {
    let body = std::fs::read_to_string(file)
        .map_err(|e| format!("policy seed file {}: {e}", file.display()))?;
    Policy::parse(&body).map_err(|why| format!("policy seed file {}: {why}", file.display()))?;
    let ctx = Ctx::new();
    let view = store.open_view(&ctx).await.map_err(|e| e.to_string())?;
    let existing = view.current(&ctx, POLICY_PATH).await;
    view.close();
    match existing {
        Ok(_) => return Ok(false),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.to_string()),
    }
    let mut metadata = Metadata::new();
    apply_default_type(&policy_path(), &mut metadata);
    let request = WriteRequest::new(POLICY_PATH, body)
        .metadata(metadata)
        .expected(0);
    match store.publish(&ctx, request).await {
        Ok(_) => Ok(true),
        // Another replica seeded it first.
        Err(e) if e.kind() == ErrorKind::Conflict => Ok(false),
        Err(e) => Err(format!("seeding {POLICY_PATH}: {e}")),
    }
}

#[cfg(test)]
mod tests;
