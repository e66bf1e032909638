//! The model catalog: providers (upstream servers) and models (aliases with a
//! kind). Held in memory as an immutable snapshot, swapped on every change, so
//! routing a request never touches the database.

pub mod adapters;
pub mod requests;
pub mod retrieval;
pub mod upstream;

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::Error;
use crate::store::catalog::{ModelRow, ProviderRow};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderType {
    Openai,
    Tei,
    Cohere,
}

impl ProviderType {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "openai" => Some(Self::Openai),
            "tei" => Some(Self::Tei),
            "cohere" => Some(Self::Cohere),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Tei => "tei",
            Self::Cohere => "cohere",
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
}

#[derive(Clone, Debug)]
pub struct Model {
    pub id: String,
    pub kind: ModelKind,
    pub upstream_model: String,
    pub provider: Arc<Provider>,
    pub created_at: i64,
}

#[derive(Default)]
pub struct CatalogSnapshot {
    pub providers: Vec<Arc<Provider>>,
    pub models: HashMap<String, Arc<Model>>,
    pub model_order: Vec<String>,
}

impl CatalogSnapshot {
    pub fn build(providers: Vec<ProviderRow>, models: Vec<ModelRow>) -> Self {
        let providers: Vec<Arc<Provider>> = providers
            .into_iter()
            .filter_map(|p| {
                Some(Arc::new(Provider {
                    kind: ProviderType::parse(&p.kind)?,
                    base_url: p.base_url.trim_end_matches('/').to_string(),
                    api_key: p.api_key,
                    timeout_s: p.timeout_s.max(1) as u64,
                    name: p.name,
                }))
            })
            .collect();
        let by_name: HashMap<&str, &Arc<Provider>> =
            providers.iter().map(|p| (p.name.as_str(), p)).collect();
        let mut map = HashMap::new();
        let mut order = Vec::new();
        for m in models {
            let (Some(kind), Some(provider)) =
                (ModelKind::parse(&m.kind), by_name.get(m.provider.as_str()))
            else {
                continue;
            };
            order.push(m.id.clone());
            map.insert(
                m.id.clone(),
                Arc::new(Model {
                    id: m.id,
                    kind,
                    upstream_model: m.upstream_model,
                    provider: Arc::clone(provider),
                    created_at: m.created_at,
                }),
            );
        }
        CatalogSnapshot {
            providers,
            models: map,
            model_order: order,
        }
    }

    pub fn model(&self, id: &str) -> Option<&Arc<Model>> {
        self.models.get(id)
    }
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
}

#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct NewModel {
    pub id: String,
    pub kind: String,
    pub provider: String,
    pub upstream_model: String,
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
            Error::validation("type", "'type' must be one of openai, tei, cohere.")
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
        Ok(ProviderRow {
            name: self.name.clone(),
            kind: kind.as_str().to_string(),
            base_url: url.trim_end_matches('/').to_string(),
            api_key: self.api_key.clone().filter(|k| !k.is_empty()),
            timeout_s: timeout,
            created_at: 0,
        })
    }
}

impl NewModel {
    pub fn validate(&self) -> Result<ModelRow, Error> {
        check_name("id", &self.id, 128)?;
        let kind = ModelKind::parse(&self.kind).ok_or_else(|| {
            Error::validation("kind", "'kind' must be one of chat, embeddings, scoring.")
        })?;
        if self.upstream_model.trim().is_empty() || self.upstream_model.len() > 256 {
            return Err(Error::validation(
                "upstream_model",
                "'upstream_model' must be 1 to 256 characters.",
            ));
        }
        Ok(ModelRow {
            id: self.id.clone(),
            kind: kind.as_str().to_string(),
            provider: self.provider.clone(),
            upstream_model: self.upstream_model.clone(),
            created_at: 0,
        })
    }
}
