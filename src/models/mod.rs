//! The model catalog: providers (upstream servers) and models (aliases with a
//! kind). Held in memory as an immutable snapshot, swapped on every change, so
//! routing a request never touches the database.

pub mod adapters;
pub mod anthropic;
pub mod direct;
pub mod observed;
pub mod requests;
pub mod retrieval;
pub mod routing;
pub mod upstream;

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::Error;
use crate::store::catalog::{ModelRow, ProviderRow, TargetRow};

use routing::{Attempts, Routing, Stage, Target};
pub use routing::{ModelForm, ModelPatch, ModelSpec, RoutingState, TargetSpec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderType {
    Openai,
    Tei,
    Cohere,
    Anthropic,
}

impl ProviderType {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "openai" => Some(Self::Openai),
            "tei" => Some(Self::Tei),
            "cohere" => Some(Self::Cohere),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Tei => "tei",
            Self::Cohere => "cohere",
            Self::Anthropic => "anthropic",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Chat,
    Embeddings,
    Scoring,
}

impl ModelKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "chat" => Some(Self::Chat),
            "embeddings" => Some(Self::Embeddings),
            "scoring" => Some(Self::Scoring),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Embeddings => "embeddings",
            Self::Scoring => "scoring",
        }
    }
    /// The advice given when a model of this kind is sent to the wrong route.
    pub fn advice(self) -> &'static str {
        match self {
            Self::Chat => "is a chat model: send it to /v1/chat/completions",
            Self::Embeddings => "is an embeddings model: send it to /v1/embeddings",
            Self::Scoring => "is a scoring (rerank) model: send it to /v1/rerank",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Provider {
    pub name: String,
    pub kind: ProviderType,
    /// Without a trailing slash.
    pub base_url: String,
    pub api_key: Option<String>,
    pub timeout_s: u64,
    /// How Responses requests reach it (`openai` providers).
    pub responses: ResponsesMode,
    /// `anthropic` providers: `anthropic-version` when the client sent none.
    pub anthropic_version: reqwest::header::HeaderValue,
    /// `anthropic` providers: what goes of a client's `anthropic-beta`.
    pub beta_headers: anthropic::BetaHeaders,
    /// What every request to it carries, made once instead of per request.
    pub wire: Wire,
}

/// How a provider answers Responses requests (`/v1/responses`): translated
/// to chat completions (`bridge`, the default) or passed to its own
/// `/responses` (`native`). Only `openai` providers take `native`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResponsesMode {
    #[default]
    Bridge,
    Native,
}

impl ResponsesMode {
    pub fn parse(s: &str) -> Option<ResponsesMode> {
        match s {
            "bridge" => Some(ResponsesMode::Bridge),
            "native" => Some(ResponsesMode::Native),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ResponsesMode::Bridge => "bridge",
            ResponsesMode::Native => "native",
        }
    }
}

/// A provider's upstream URLs (parsed once each: parsing a URL with its host
/// rules costs more than the rest of building the request) and its
/// `Authorization` value.
#[derive(Debug, Default)]
pub struct Wire {
    urls: parking_lot::RwLock<Vec<(&'static str, Arc<Endpoint>)>>,
    auth: std::sync::OnceLock<Option<reqwest::header::HeaderValue>>,
    api_key: std::sync::OnceLock<Option<reqwest::header::HeaderValue>>,
}

impl Clone for Wire {
    fn clone(&self) -> Wire {
        Wire::default()
    }
}

/// One upstream URL of a provider, and for an `http://` one where the lean
/// client sends it ([`direct::DirectTarget`]).
#[derive(Debug)]
pub struct Endpoint {
    pub url: reqwest::Url,
    pub direct: Option<direct::DirectTarget>,
}

impl Provider {
    /// `base_url` + `path` (`/chat/completions`, ...), parsed once.
    pub fn endpoint(&self, path: &'static str) -> Result<Arc<Endpoint>, String> {
        if let Some((_, e)) = self.wire.urls.read().iter().find(|(p, _)| *p == path) {
            return Ok(Arc::clone(e));
        }
        let url = reqwest::Url::parse(&format!("{}{}", self.base_url, path))
            .map_err(|e| e.to_string())?;
        let direct = match url.scheme() {
            "http" => Some(direct::DirectTarget::of(&url).map_err(|e| e.to_string())?),
            _ => None,
        };
        let endpoint = Arc::new(Endpoint { url, direct });
        let mut urls = self.wire.urls.write();
        // Paths are a handful of constants; the bound only guards the lock.
        if urls.len() < 16 {
            urls.push((path, Arc::clone(&endpoint)));
        }
        Ok(endpoint)
    }

    /// [`Provider::endpoint`] with a query string (not cached: it is the
    /// client's).
    pub fn endpoint_with_query(&self, path: &str, query: &str) -> Result<Arc<Endpoint>, String> {
        let url = reqwest::Url::parse(&format!("{}{}?{}", self.base_url, path, query))
            .map_err(|e| e.to_string())?;
        let direct = match url.scheme() {
            "http" => Some(direct::DirectTarget::of(&url).map_err(|e| e.to_string())?),
            _ => None,
        };
        Ok(Arc::new(Endpoint { url, direct }))
    }

    /// `Bearer <api_key>`, marked sensitive (never logged by the HTTP client).
    pub fn authorization(&self) -> Option<&reqwest::header::HeaderValue> {
        self.wire
            .auth
            .get_or_init(|| {
                let key = self.api_key.as_deref()?;
                let mut v =
                    reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).ok()?;
                v.set_sensitive(true);
                Some(v)
            })
            .as_ref()
    }

    /// The key as an `x-api-key` value (`anthropic` providers), marked sensitive.
    pub fn x_api_key(&self) -> Option<&reqwest::header::HeaderValue> {
        self.wire
            .api_key
            .get_or_init(|| {
                let mut v =
                    reqwest::header::HeaderValue::from_str(self.api_key.as_deref()?).ok()?;
                v.set_sensitive(true);
                Some(v)
            })
            .as_ref()
    }
}

/// A model: an alias clients send, its kind, and where it runs.
#[derive(Clone, Debug)]
pub struct Model {
    pub id: String,
    pub kind: ModelKind,
    /// At least one.
    pub targets: Vec<Target>,
    pub routing: Routing,
    /// Models of the same kind tried after every target failed, resolved
    /// when the catalog was built. Their own fallbacks are not followed.
    pub fallbacks: Vec<Arc<Model>>,
    /// Attempts in all, fallbacks included.
    pub max_attempts: u32,
    pub created_at: i64,
    /// Other names clients may send for it (exact, or ending in one `*`).
    pub aliases: Vec<String>,
    /// `max_tokens` for an `anthropic` target when a chat request has none.
    pub max_tokens_default: u32,
}

impl Model {
    /// The model, then its fallbacks: the stages of a request's attempts.
    pub fn chain(&self) -> Vec<&Model> {
        self.models().collect()
    }

    /// [`Model::chain`] without a vector.
    pub fn models(&self) -> impl Iterator<Item = &Model> + Clone {
        std::iter::once(self).chain(self.fallbacks.iter().map(|m| &**m))
    }

    /// A fresh [`Attempts`] over `chain` (from [`Model::chain`]).
    pub fn attempts<'a>(&self, chain: &[&'a Model]) -> Attempts<'a> {
        Attempts::new(
            chain
                .iter()
                .map(|m| Stage {
                    targets: &m.targets,
                    routing: m.routing,
                })
                .collect(),
            self.max_attempts,
        )
    }

    /// The provider of the first target (`owned_by` in `/v1/models`).
    pub fn first_provider(&self) -> &str {
        self.targets
            .first()
            .map_or("", |t| t.provider.name.as_str())
    }
}

#[derive(Default)]
pub struct CatalogSnapshot {
    pub providers: Vec<Arc<Provider>>,
    pub models: HashMap<String, Arc<Model>>,
    pub model_order: Vec<String>,
    /// Exact aliases: name → model id.
    pub aliases: HashMap<String, String>,
    /// Wildcard aliases without their `*`: (prefix, model id), longest prefix first.
    pub wildcards: Vec<(String, String)>,
}

impl CatalogSnapshot {
    pub fn build(
        providers: Vec<ProviderRow>,
        models: Vec<ModelRow>,
        targets: Vec<TargetRow>,
        state: &RoutingState,
    ) -> Self {
        let providers: Vec<Arc<Provider>> = providers
            .into_iter()
            .filter_map(|p| {
                Some(Arc::new(Provider {
                    kind: ProviderType::parse(&p.kind)?,
                    base_url: p.base_url.trim_end_matches('/').to_string(),
                    api_key: p.api_key,
                    timeout_s: p.timeout_s.max(1) as u64,
                    responses: ResponsesMode::parse(&p.responses).unwrap_or_default(),
                    anthropic_version: p
                        .anthropic_version
                        .as_deref()
                        .and_then(|v| reqwest::header::HeaderValue::from_str(v).ok())
                        .unwrap_or(reqwest::header::HeaderValue::from_static(
                            anthropic::DEFAULT_VERSION,
                        )),
                    beta_headers: anthropic::BetaHeaders::from_stored(p.beta_headers.as_deref()),
                    name: p.name,
                    wire: Wire::default(),
                }))
            })
            .collect();
        let by_name: HashMap<&str, &Arc<Provider>> =
            providers.iter().map(|p| (p.name.as_str(), p)).collect();
        let mut targets_of: HashMap<String, Vec<TargetRow>> = HashMap::new();
        for t in targets {
            targets_of.entry(t.model_id.clone()).or_default().push(t);
        }
        let mut base: HashMap<String, Arc<Model>> = HashMap::new();
        let mut fallback_ids: Vec<(String, Vec<String>)> = Vec::new();
        let mut order = Vec::new();
        let mut aliases = HashMap::new();
        let mut wildcards = Vec::new();
        for m in models {
            let rows = targets_of.remove(&m.id).unwrap_or_default();
            let spec = spec_of(&m, rows);
            let Some(spec) = spec else { continue };
            let targets: Vec<Target> = spec
                .targets
                .iter()
                .filter_map(|t| {
                    let provider = by_name.get(t.provider.as_str())?;
                    Some(Target {
                        provider: Arc::clone(provider),
                        upstream_model: t.upstream_model.clone(),
                        weight: t.weight,
                        health: state.health.get(&t.provider, &t.upstream_model),
                        stats: state.stats.get(&t.provider),
                    })
                })
                .collect();
            if targets.is_empty() {
                continue;
            }
            order.push(m.id.clone());
            for a in &spec.aliases {
                match a.strip_suffix('*') {
                    Some(prefix) => wildcards.push((prefix.to_string(), m.id.clone())),
                    None => {
                        aliases.entry(a.clone()).or_insert_with(|| m.id.clone());
                    }
                }
            }
            if !spec.fallbacks.is_empty() {
                fallback_ids.push((m.id.clone(), spec.fallbacks));
            }
            base.insert(
                m.id.clone(),
                Arc::new(Model {
                    id: m.id,
                    kind: spec.kind,
                    targets,
                    routing: spec.routing,
                    fallbacks: Vec::new(),
                    max_attempts: spec.max_attempts,
                    created_at: m.created_at,
                    aliases: spec.aliases,
                    max_tokens_default: spec.max_tokens_default,
                }),
            );
        }
        let mut map = base.clone();
        for (id, fallbacks) in fallback_ids {
            let Some(m) = base.get(&id) else { continue };
            let resolved: Vec<Arc<Model>> = fallbacks
                .iter()
                .filter_map(|f| base.get(f))
                .filter(|f| f.kind == m.kind)
                .cloned()
                .collect();
            let mut with = Model::clone(m);
            with.fallbacks = resolved;
            map.insert(id, Arc::new(with));
        }
        // Longest prefix first; ties by name so every server picks the same.
        wildcards
            .sort_by(|a: &(String, String), b| b.0.len().cmp(&a.0.len()).then_with(|| a.cmp(b)));
        CatalogSnapshot {
            providers,
            models: map,
            model_order: order,
            aliases,
            wildcards,
        }
    }

    /// Forgets the health of targets no model of this snapshot names (call
    /// it only for the snapshot in use: an older one would drop newer targets).
    pub fn forget_unused_health(&self, state: &RoutingState) {
        let in_use: std::collections::HashSet<(&str, &str)> = self
            .models
            .values()
            .flat_map(|m| m.targets.iter())
            .map(|t| (t.provider.name.as_str(), t.upstream_model.as_str()))
            .collect();
        state.health.retain(|p, u| in_use.contains(&(p, u)));
    }

    /// A snapshot of what the database holds now, with health of its own
    /// (for checks at start, not for routing).
    pub async fn load(store: &crate::store::Store) -> Result<Self, sqlx::Error> {
        Ok(Self::build(
            store.list_providers().await?,
            store.list_models().await?,
            store.list_model_targets().await?,
            &RoutingState::new(std::time::Duration::ZERO),
        ))
    }

    /// The model a client's name stands for: a model id, else an exact
    /// alias, else the longest matching wildcard alias.
    pub fn model(&self, name: &str) -> Option<&Arc<Model>> {
        if let Some(m) = self.models.get(name) {
            return Some(m);
        }
        let id = match self.aliases.get(name) {
            Some(id) => id,
            None => {
                &self
                    .wildcards
                    .iter()
                    .find(|(prefix, _)| {
                        name.len() > prefix.len() && name.starts_with(prefix.as_str())
                    })?
                    .1
            }
        };
        self.models.get(id)
    }
}

/// A stored model as a spec: its target rows (or, written by a server of
/// the version before targets, its own provider and upstream model), its
/// routing, fallbacks and attempts. None for a kind this version does not know.
pub fn spec_of(m: &ModelRow, targets: Vec<TargetRow>) -> Option<ModelSpec> {
    let kind = ModelKind::parse(&m.kind)?;
    let targets = if targets.is_empty() {
        vec![TargetSpec {
            provider: m.provider.clone(),
            upstream_model: m.upstream_model.clone(),
            weight: 1,
        }]
    } else {
        targets
            .into_iter()
            .map(|t| TargetSpec {
                provider: t.provider,
                upstream_model: t.upstream_model,
                weight: u32::try_from(t.weight).unwrap_or(1).max(1),
            })
            .collect()
    };
    Some(ModelSpec {
        id: m.id.clone(),
        kind,
        targets,
        routing: Routing::parse(&m.routing).unwrap_or_default(),
        fallbacks: m
            .fallbacks
            .as_deref()
            .and_then(|f| serde_json::from_str(f).ok())
            .unwrap_or_default(),
        max_attempts: u32::try_from(m.max_attempts).unwrap_or(3).max(1),
        aliases: m
            .aliases
            .as_deref()
            .and_then(|a| serde_json::from_str(a).ok())
            .unwrap_or_default(),
        max_tokens_default: u32::try_from(m.max_tokens_default)
            .ok()
            .filter(|n| *n >= 1)
            .unwrap_or(routing::form::DEFAULT_MAX_TOKENS),
    })
}

/// The rows that store a spec.
pub fn rows_of(spec: &ModelSpec) -> (ModelRow, Vec<TargetRow>) {
    let first = spec.targets.first();
    let row = ModelRow {
        id: spec.id.clone(),
        kind: spec.kind.as_str().to_string(),
        provider: first.map(|t| t.provider.clone()).unwrap_or_default(),
        upstream_model: first.map(|t| t.upstream_model.clone()).unwrap_or_default(),
        created_at: 0,
        routing: spec.routing.as_str().to_string(),
        fallbacks: (!spec.fallbacks.is_empty())
            .then(|| serde_json::to_string(&spec.fallbacks).unwrap_or_else(|_| "[]".into())),
        max_attempts: i64::from(spec.max_attempts),
        aliases: (!spec.aliases.is_empty())
            .then(|| serde_json::to_string(&spec.aliases).unwrap_or_else(|_| "[]".into())),
        max_tokens_default: i64::from(spec.max_tokens_default),
    };
    let targets = spec
        .targets
        .iter()
        .enumerate()
        .map(|(i, t)| TargetRow {
            model_id: spec.id.clone(),
            ordinal: i as i64,
            provider: t.provider.clone(),
            upstream_model: t.upstream_model.clone(),
            weight: i64::from(t.weight),
        })
        .collect();
    (row, targets)
}

/// The `model` a client named in an OpenAI-shaped body.
pub fn requested_model(body: &serde_json::Map<String, serde_json::Value>) -> Result<&str, Error> {
    match body.get("model") {
        Some(serde_json::Value::String(m)) if !m.is_empty() => Ok(m),
        Some(serde_json::Value::String(_)) => Err(Error::validation(
            "model",
            "'model' must not be empty; GET /v1/models lists the models.",
        )),
        None | Some(serde_json::Value::Null) => Err(Error::validation(
            "model",
            "'model' is required: the id of a model (GET /v1/models lists them).",
        )),
        Some(_) => Err(Error::validation(
            "model",
            "'model' must be a string: the id of a model.",
        )),
    }
}

/// Looks the model up and checks its kind; the errors are the contract's.
pub fn resolve(catalog: &CatalogSnapshot, id: &str, want: ModelKind) -> Result<Arc<Model>, Error> {
    let model = catalog.model(id).ok_or_else(|| {
        Error::not_found(
            "model_not_found",
            format!("The model '{id}' does not exist; GET /v1/models lists the models."),
        )
        .with_param("model")
    })?;
    if model.kind != want {
        return Err(Error::bad_request(
            "model_kind_mismatch",
            format!("The model '{id}' {}.", model.kind.advice()),
        )
        .with_param("model"));
    }
    Ok(Arc::clone(model))
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct NewProvider {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub base_url: String,
    #[serde(default)]
    pub api_key: Option<String>,
    #[serde(default)]
    pub timeout_s: Option<i64>,
    /// `bridge` (default) or `native`: how Responses requests reach an
    /// `openai` provider; refused on other types.
    #[serde(default)]
    pub responses: Option<String>,
    /// `anthropic` providers: sent as `anthropic-version` when the client sent none (default 2023-06-01).
    #[serde(default)]
    pub anthropic_version: Option<String>,
    /// `anthropic` providers: `"forward"` (default), `"drop"`, or a list of allowed beta names.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub beta_headers: Option<serde_json::Value>,
}

pub const DEFAULT_TIMEOUT_S: i64 = 120;

fn check_name(field: &str, v: &str, max: usize) -> Result<(), Error> {
    let ok = !v.is_empty()
        && v.len() <= max
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/' | '@'));
    if ok {
        Ok(())
    } else {
        Err(Error::validation(
            field,
            format!("'{field}' must be 1 to {max} characters of letters, digits and . _ - : / @"),
        ))
    }
}

impl NewProvider {
    pub fn validate(&self) -> Result<ProviderRow, Error> {
        check_name("name", &self.name, 64)?;
        let kind = ProviderType::parse(&self.kind).ok_or_else(|| {
            Error::validation(
                "type",
                "'type' must be one of openai, anthropic, tei, cohere.",
            )
        })?;
        let url = self.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || reqwest::Url::parse(url).is_err()
        {
            return Err(Error::validation(
                "base_url",
                "'base_url' must be an http:// or https:// URL.",
            ));
        }
        let timeout = self.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
        if !(1..=3600).contains(&timeout) {
            return Err(Error::validation(
                "timeout_s",
                "'timeout_s' must be between 1 and 3600 seconds.",
            ));
        }
        let responses = match (&self.responses, kind) {
            (None, _) => ResponsesMode::Bridge,
            (Some(r), ProviderType::Openai) => ResponsesMode::parse(r).ok_or_else(|| {
                Error::validation("responses", "'responses' must be bridge or native.")
            })?,
            (Some(_), _) => {
                return Err(Error::validation(
                    "responses",
                    format!(
                    "'responses' is a setting of openai providers; a {} provider does not take it.",
                    kind.as_str()
                ),
                ))
            }
        };
        let (anthropic_version, beta_headers) = self.anthropic_settings(kind)?;
        Ok(ProviderRow {
            name: self.name.clone(),
            kind: kind.as_str().to_string(),
            base_url: url.trim_end_matches('/').to_string(),
            api_key: self.api_key.clone().filter(|k| !k.is_empty()),
            timeout_s: timeout,
            created_at: 0,
            responses: responses.as_str().to_string(),
            anthropic_version,
            beta_headers,
        })
    }

    /// `anthropic_version` and `beta_headers` as stored: only for `anthropic` providers.
    fn anthropic_settings(
        &self,
        kind: ProviderType,
    ) -> Result<(Option<String>, Option<String>), Error> {
        if kind != ProviderType::Anthropic {
            for (field, given) in [
                ("anthropic_version", self.anthropic_version.is_some()),
                ("beta_headers", self.beta_headers.is_some()),
            ] {
                if given {
                    return Err(Error::validation(
                        field,
                        format!("'{field}' is a setting of anthropic providers only."),
                    ));
                }
            }
            return Ok((None, None));
        }
        if let Some(v) = &self.anthropic_version {
            anthropic::check_version(v)?;
        }
        let beta = match &self.beta_headers {
            None => anthropic::BetaHeaders::Forward,
            Some(v) => anthropic::BetaHeaders::from_json(v)?,
        };
        Ok((
            Some(
                self.anthropic_version
                    .clone()
                    .unwrap_or_else(|| anthropic::DEFAULT_VERSION.to_string()),
            ),
            Some(beta.stored()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, aliases: &[&str]) -> ModelRow {
        ModelRow {
            id: id.into(),
            kind: "chat".into(),
            provider: "p".into(),
            upstream_model: format!("up-{id}"),
            created_at: 0,
            routing: "weighted".into(),
            fallbacks: None,
            max_attempts: 3,
            aliases: Some(serde_json::to_string(aliases).unwrap()),
            max_tokens_default: 4096,
        }
    }

    #[test]
    fn a_name_resolves_to_an_id_then_an_exact_alias_then_the_longest_wildcard() {
        let provider = ProviderRow {
            name: "p".into(),
            kind: "anthropic".into(),
            base_url: "http://127.0.0.1:9".into(),
            api_key: None,
            timeout_s: 5,
            created_at: 0,
            anthropic_version: None,
            beta_headers: None,
            responses: "bridge".into(),
        };
        let c = CatalogSnapshot::build(
            vec![provider],
            vec![
                row("sonnet", &["claude-sonnet-*", "fixed"]),
                row("sonnet-45", &["claude-sonnet-4-5*"]),
                row("any", &["claude-*", "claude-sonnet-4-5-exact"]),
            ],
            Vec::new(),
            &RoutingState::new(std::time::Duration::ZERO),
        );
        let id = |name: &str| c.model(name).map(|m| m.id.clone());
        assert_eq!(id("sonnet").as_deref(), Some("sonnet"));
        assert_eq!(id("fixed").as_deref(), Some("sonnet"));
        assert_eq!(id("claude-sonnet-4-5-exact").as_deref(), Some("any"));
        assert_eq!(id("claude-sonnet-4-5-2025").as_deref(), Some("sonnet-45"));
        assert_eq!(id("claude-sonnet-4").as_deref(), Some("sonnet"));
        assert_eq!(id("claude-haiku").as_deref(), Some("any"));
        // A wildcard needs at least one character after its prefix.
        assert_eq!(id("claude-"), None);
        assert_eq!(id("gpt-4"), None);
        assert_eq!(c.providers[0].anthropic_version, "2023-06-01");
    }
}
