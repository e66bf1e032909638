//! The admin API and TOML form of a model, with several targets or one, and
//! its validation into a [`ModelSpec`].
//!
//! `{"id", "kind", "targets": [{"provider", "upstream_model", "weight"?: 1}],
//! "routing"?: "weighted" | "least_busy", "fallbacks"?: [model ids],
//! "max_attempts"?: 3}`, or the one-target form `{"id", "kind", "provider",
//! "upstream_model"}`. Validation needs to know which providers and models
//! exist; it takes them as functions so it stays plain.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Routing;
use crate::models::ModelKind;

pub const MAX_TARGETS: usize = 16;
pub const MAX_FALLBACKS: usize = 8;
pub const MAX_WEIGHT: i64 = 1000;
pub const MAX_ATTEMPTS: i64 = 10;
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
pub const MAX_ALIASES: usize = 32;
pub const MAX_ALIAS_CHARS: usize = 256;
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
pub const MAX_MAX_TOKENS: i64 = 1_000_000;

/// A refused form: 400 with `code` (`validation_error` or `model_kind_mismatch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormError {
    pub code: &'static str,
    pub param: String,
    pub message: String,
}

impl FormError {
    fn validation(param: impl Into<String>, message: impl Into<String>) -> Self {
        FormError {
            code: "validation_error",
            param: param.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for FormError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.param)
    }
}

/// One target as given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TargetForm {
    pub provider: String,
    pub upstream_model: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

/// A model as given to `POST /api/admin/models` or in the TOML file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelForm {
    pub id: String,
    pub kind: String,
    /// The one-target form (with `upstream_model`), instead of `targets`.
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub upstream_model: Option<String>,
    #[serde(default)]
    pub targets: Option<Vec<TargetForm>>,
    /// `weighted` (default) or `least_busy`.
    #[serde(default)]
    pub routing: Option<String>,
    /// Models of the same kind, tried in order when every target failed.
    #[serde(default)]
    pub fallbacks: Option<Vec<String>>,
    /// Attempts in all, fallbacks included (1 to 10; default 3).
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// Other names clients may send (at most 32; exact, or ending in one `*`).
    #[serde(default)]
    pub aliases: Option<Vec<String>>,
    /// `max_tokens` for an anthropic target when a chat request has none (1 to 1,000,000; default 4096).
    #[serde(default)]
    pub max_tokens_default: Option<i64>,
}

/// `PATCH /api/admin/models/{id}`: any of these; the rest stays.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelPatch {
    /// Only the model's own kind is accepted (a kind cannot change).
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub upstream_model: Option<String>,
    #[serde(default)]
    pub targets: Option<Vec<TargetForm>>,
    #[serde(default)]
    pub routing: Option<String>,
    #[serde(default)]
    pub fallbacks: Option<Vec<String>>,
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// `[]` removes them.
    #[serde(default)]
    pub aliases: Option<Vec<String>>,
    #[serde(default)]
    pub max_tokens_default: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSpec {
    pub provider: String,
    pub upstream_model: String,
    pub weight: u32,
}

/// A valid model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    pub id: String,
    pub kind: ModelKind,
    /// At least one.
    pub targets: Vec<TargetSpec>,
    pub routing: Routing,
    pub fallbacks: Vec<String>,
    pub max_attempts: u32,
    pub aliases: Vec<String>,
    pub max_tokens_default: u32,
}

fn check_name(field: &str, v: &str, max: usize) -> Result<(), FormError> {
    let ok = !v.is_empty()
        && v.len() <= max
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/' | '@'));
    if ok {
        Ok(())
    } else {
        Err(FormError::validation(
            field,
            format!("'{field}' must be 1 to {max} characters of letters, digits and . _ - : / @"),
        ))
    }
}

fn check_upstream_model(param: &str, v: &str) -> Result<(), FormError> {
    if v.trim().is_empty() || v.len() > 256 {
        return Err(FormError::validation(
            param,
            format!("'{param}' must be 1 to 256 characters."),
        ));
    }
    Ok(())
}

impl ModelForm {
    /// Checks everything; `provider_exists` and `model_kind` tell what the
    /// catalog holds (the model itself need not be in it).
    pub fn validate(
        &self,
        provider_exists: impl Fn(&str) -> bool,
        model_kind: impl Fn(&str) -> Option<ModelKind>,
    ) -> Result<ModelSpec, FormError> {
        check_name("id", &self.id, 128)?;
        let kind = ModelKind::parse(&self.kind).ok_or_else(|| {
            FormError::validation("kind", "'kind' must be one of chat, embeddings, scoring.")
        })?;
        let targets = self.targets(&provider_exists)?;
        let routing = match self.routing.as_deref() {
            None => Routing::default(),
            Some(r) => Routing::parse(r).ok_or_else(|| {
                FormError::validation("routing", "'routing' must be weighted or least_busy.")
            })?,
        };
        let max_attempts = match self.max_attempts {
            None => DEFAULT_MAX_ATTEMPTS,
            Some(n) if (1..=MAX_ATTEMPTS).contains(&n) => n as u32,
            Some(_) => {
                return Err(FormError::validation(
                    "max_attempts",
                    format!("'max_attempts' must be between 1 and {MAX_ATTEMPTS}."),
                ))
            }
        };
        let fallbacks = self.fallbacks(kind, &model_kind)?;
        let aliases = check_aliases(self.aliases.as_deref().unwrap_or_default())?;
        let max_tokens_default = match self.max_tokens_default {
            None => DEFAULT_MAX_TOKENS,
            Some(n) if (1..=MAX_MAX_TOKENS).contains(&n) => n as u32,
            Some(_) => {
                return Err(FormError::validation(
                    "max_tokens_default",
                    format!("'max_tokens_default' must be between 1 and {MAX_MAX_TOKENS}."),
                ))
            }
        };
        Ok(ModelSpec {
            id: self.id.clone(),
            kind,
            targets,
            routing,
            fallbacks,
            max_attempts,
            aliases,
            max_tokens_default,
        })
    }

    fn targets(
        &self,
        provider_exists: &impl Fn(&str) -> bool,
    ) -> Result<Vec<TargetSpec>, FormError> {
        let given: Vec<(String, TargetForm)> = match (
            &self.targets,
            &self.provider,
            &self.upstream_model,
        ) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => return Err(FormError::validation(
                "targets",
                "Give either 'targets' or 'provider' and 'upstream_model' (one target), not both.",
            )),
            (Some(ts), None, None) => {
                if ts.is_empty() || ts.len() > MAX_TARGETS {
                    return Err(FormError::validation(
                        "targets",
                        format!("'targets' must hold 1 to {MAX_TARGETS} targets."),
                    ));
                }
                ts.iter()
                    .enumerate()
                    .map(|(i, t)| (format!("targets[{i}]."), t.clone()))
                    .collect()
            }
            (None, Some(p), Some(m)) => vec![(
                String::new(),
                TargetForm {
                    provider: p.clone(),
                    upstream_model: m.clone(),
                    weight: None,
                },
            )],
            (None, None, None) => {
                return Err(FormError::validation(
                    "targets",
                    "A model needs 'targets' (or 'provider' and 'upstream_model' for one target).",
                ))
            }
            (None, None, Some(_)) => {
                return Err(FormError::validation(
                    "provider",
                    "'provider' is required with 'upstream_model'.",
                ))
            }
            (None, Some(_), None) => {
                return Err(FormError::validation(
                    "upstream_model",
                    "'upstream_model' is required with 'provider'.",
                ))
            }
        };
        let mut out: Vec<TargetSpec> = Vec::with_capacity(given.len());
        for (prefix, t) in given {
            let param = |f: &str| format!("{prefix}{f}");
            if !provider_exists(&t.provider) {
                return Err(FormError::validation(
                    param("provider"),
                    format!("There is no provider named '{}'.", t.provider),
                ));
            }
            check_upstream_model(&param("upstream_model"), &t.upstream_model)?;
            let weight = match t.weight {
                None => 1,
                Some(w) if (1..=MAX_WEIGHT).contains(&w) => w as u32,
                Some(_) => {
                    return Err(FormError::validation(
                        param("weight"),
                        format!("'weight' must be a whole number from 1 to {MAX_WEIGHT}."),
                    ))
                }
            };
            if out
                .iter()
                .any(|o| o.provider == t.provider && o.upstream_model == t.upstream_model)
            {
                return Err(FormError::validation(
                    param("provider"),
                    format!(
                        "The target '{}' / '{}' is given twice; give it a higher 'weight' instead.",
                        t.provider, t.upstream_model
                    ),
                ));
            }
            out.push(TargetSpec {
                provider: t.provider,
                upstream_model: t.upstream_model,
                weight,
            });
        }
        Ok(out)
    }

    fn fallbacks(
        &self,
        kind: ModelKind,
        model_kind: &impl Fn(&str) -> Option<ModelKind>,
    ) -> Result<Vec<String>, FormError> {
        let given = self.fallbacks.as_deref().unwrap_or_default();
        if given.len() > MAX_FALLBACKS {
            return Err(FormError::validation(
                "fallbacks",
                format!("'fallbacks' may name at most {MAX_FALLBACKS} models."),
            ));
        }
        for (i, id) in given.iter().enumerate() {
            let param = format!("fallbacks[{i}]");
            if *id == self.id {
                return Err(FormError::validation(
                    param,
                    "A model cannot be its own fallback.",
                ));
            }
            if given[..i].contains(id) {
                return Err(FormError::validation(
                    param,
                    format!("The fallback '{id}' is named twice."),
                ));
            }
            let Some(fk) = model_kind(id) else {
                return Err(FormError::validation(
                    param,
                    format!("There is no model '{id}' to fall back on."),
                ));
            };
            if fk != kind {
                return Err(FormError {
                    code: "model_kind_mismatch",
                    param,
                    message: format!(
                        "The fallback '{id}' is a {} model; a {} model can only fall back on {} models.",
                        fk.as_str(),
                        kind.as_str(),
                        kind.as_str()
                    ),
                });
            }
        }
        Ok(given.to_vec())
    }
}

impl ModelSpec {
    /// The form that gives this spec back (targets form).
    pub fn to_form(&self) -> ModelForm {
        ModelForm {
            id: self.id.clone(),
            kind: self.kind.as_str().to_string(),
            provider: None,
            upstream_model: None,
            targets: Some(
                self.targets
                    .iter()
                    .map(|t| TargetForm {
                        provider: t.provider.clone(),
                        upstream_model: t.upstream_model.clone(),
                        weight: Some(i64::from(t.weight)),
                    })
                    .collect(),
            ),
            routing: Some(self.routing.as_str().to_string()),
            fallbacks: Some(self.fallbacks.clone()),
            max_attempts: Some(i64::from(self.max_attempts)),
            aliases: Some(self.aliases.clone()),
            max_tokens_default: Some(i64::from(self.max_tokens_default)),
        }
    }

    /// The rules that need the rest of the catalog: no alias equal to a
    /// model's id or to another model's alias, no id equal to another
    /// model's alias (`others`: every other model's id and aliases), and no
    /// embeddings or scoring model on an `anthropic` provider.
    pub fn check_catalog<'a>(
        &self,
        others: impl Iterator<Item = (&'a str, &'a [String])> + Clone,
        provider_type: impl Fn(&str) -> Option<crate::models::ProviderType>,
    ) -> Result<(), FormError> {
        for (i, a) in self.aliases.iter().enumerate() {
            let param = format!("aliases[{i}]");
            if *a == self.id || others.clone().any(|(id, _)| id == a) {
                return Err(FormError::validation(
                    param,
                    format!("'aliases': '{a}' is the id of a model."),
                ));
            }
            if let Some((owner, _)) = others.clone().find(|(_, al)| al.contains(a)) {
                return Err(FormError::validation(
                    param,
                    format!("'aliases': '{a}' is already an alias of the model '{owner}'."),
                ));
            }
        }
        if let Some((owner, _)) = others.clone().find(|(_, al)| al.contains(&self.id)) {
            return Err(FormError::validation(
                "id",
                format!(
                    "'id': '{}' is already an alias of the model '{owner}'.",
                    self.id
                ),
            ));
        }
        if self.kind != ModelKind::Chat {
            for (i, t) in self.targets.iter().enumerate() {
                if provider_type(&t.provider) == Some(crate::models::ProviderType::Anthropic) {
                    let param = if self.targets.len() == 1 {
                        "provider".to_string()
                    } else {
                        format!("targets[{i}].provider")
                    };
                    return Err(FormError::validation(
                        param,
                        format!(
                            "The provider '{}' is an anthropic provider, which serves chat models only.",
                            t.provider
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Checks an `aliases` list: at most [`MAX_ALIASES`] names of 1 to
/// [`MAX_ALIAS_CHARS`] characters, each exact or ending in one `*` after at
/// least one character, none twice.
pub fn check_aliases(given: &[String]) -> Result<Vec<String>, FormError> {
    if given.len() > MAX_ALIASES {
        return Err(FormError::validation(
            "aliases",
            format!("'aliases' may hold at most {MAX_ALIASES} names."),
        ));
    }
    for (i, a) in given.iter().enumerate() {
        let param = format!("aliases[{i}]");
        let chars = a.chars().count();
        if chars == 0
            || chars > MAX_ALIAS_CHARS
            || a.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(FormError::validation(
                param,
                format!("'aliases': each name must be 1 to {MAX_ALIAS_CHARS} characters without spaces."),
            ));
        }
        let stars = a.matches('*').count();
        if stars > 1 || (stars == 1 && (!a.ends_with('*') || chars < 2)) {
            return Err(FormError::validation(
                param,
                "'aliases': a '*' may only end a name, after at least one character (claude-sonnet-*).",
            ));
        }
        if given[..i].contains(a) {
            return Err(FormError::validation(
                param,
                format!("'aliases': '{a}' is given twice."),
            ));
        }
    }
    Ok(given.to_vec())
}

impl ModelPatch {
    /// The whole form after this patch, to validate again.
    pub fn apply(&self, current: &ModelSpec) -> Result<ModelForm, FormError> {
        if let Some(k) = &self.kind {
            if k != current.kind.as_str() {
                return Err(FormError::validation(
                    "kind",
                    "A model's kind cannot change; create a new model instead.",
                ));
            }
        }
        let mut form = current.to_form();
        match (&self.targets, &self.provider, &self.upstream_model) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => return Err(FormError::validation(
                "targets",
                "Give either 'targets' or 'provider' and 'upstream_model' (one target), not both.",
            )),
            (Some(ts), None, None) => form.targets = Some(ts.clone()),
            (None, None, None) => {}
            (None, p, m) => {
                // Changes the one target; with several it would be a guess.
                let [only] = current.targets.as_slice() else {
                    return Err(FormError::validation(
                        "targets",
                        "This model has several targets: change them with 'targets'.",
                    ));
                };
                form.targets = Some(vec![TargetForm {
                    provider: p.clone().unwrap_or_else(|| only.provider.clone()),
                    upstream_model: m.clone().unwrap_or_else(|| only.upstream_model.clone()),
                    weight: Some(i64::from(only.weight)),
                }]);
            }
        }
        if let Some(r) = &self.routing {
            form.routing = Some(r.clone());
        }
        if let Some(f) = &self.fallbacks {
            form.fallbacks = Some(f.clone());
        }
        if let Some(n) = self.max_attempts {
            form.max_attempts = Some(n);
        }
        if let Some(a) = &self.aliases {
            form.aliases = Some(a.clone());
        }
        if let Some(n) = self.max_tokens_default {
            form.max_tokens_default = Some(n);
        }
        Ok(form)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn providers(name: &str) -> bool {
        matches!(name, "vllm-1" | "vllm-2" | "vllm-3" | "openai")
    }

    fn models(id: &str) -> Option<ModelKind> {
        match id {
            "gpt-mini" | "chat-b" => Some(ModelKind::Chat),
            "embed" => Some(ModelKind::Embeddings),
            _ => None,
        }
    }

    fn check(v: Value) -> Result<ModelSpec, FormError> {
        let form: ModelForm = serde_json::from_value(v).expect("form shape");
        form.validate(providers, models)
    }

    fn err(v: Value) -> (&'static str, String) {
        let e = check(v).expect_err("refused");
        (e.code, e.param)
    }

    #[test]
    fn the_one_target_form_stays_valid_with_the_defaults() {
        let s = check(json!({"id": "llama", "kind": "chat", "provider": "vllm-1", "upstream_model": "meta/llama"}))
            .expect("valid");
        assert_eq!(
            s,
            ModelSpec {
                id: "llama".into(),
                kind: ModelKind::Chat,
                targets: vec![TargetSpec {
                    provider: "vllm-1".into(),
                    upstream_model: "meta/llama".into(),
                    weight: 1
                }],
                routing: Routing::Weighted,
                fallbacks: vec![],
                max_attempts: 3,
                aliases: Vec::new(),
                max_tokens_default: DEFAULT_MAX_TOKENS,
            }
        );
    }

    #[test]
    fn the_targets_form_takes_weights_routing_fallbacks_and_max_attempts() {
        let s = check(json!({"id": "llama", "kind": "chat",
            "targets": [{"provider": "vllm-1", "upstream_model": "l", "weight": 2},
                        {"provider": "vllm-2", "upstream_model": "l"}],
            "routing": "least_busy", "fallbacks": ["gpt-mini", "chat-b"], "max_attempts": 5}))
        .expect("valid");
        assert_eq!(s.targets.len(), 2);
        assert_eq!((s.targets[0].weight, s.targets[1].weight), (2, 1));
        assert_eq!(s.routing, Routing::LeastBusy);
        assert_eq!(s.fallbacks, ["gpt-mini", "chat-b"]);
        assert_eq!(s.max_attempts, 5);
    }

    #[test]
    fn an_unknown_provider_is_a_validation_error_naming_the_target() {
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "targets": [
                {"provider": "vllm-1", "upstream_model": "l"},
                {"provider": "nope", "upstream_model": "l"}]})),
            ("validation_error", "targets[1].provider".into())
        );
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "provider": "nope", "upstream_model": "l"})),
            ("validation_error", "provider".into())
        );
    }

    #[test]
    fn weights_must_be_positive_whole_numbers_within_bounds() {
        for w in [0, -1, -100, MAX_WEIGHT + 1] {
            assert_eq!(
                err(
                    json!({"id": "m", "kind": "chat", "targets": [{"provider": "vllm-1", "upstream_model": "l", "weight": w}]})
                ),
                ("validation_error", "targets[0].weight".into()),
                "{w}"
            );
        }
        assert!(check(json!({"id": "m", "kind": "chat", "targets": [{"provider": "vllm-1", "upstream_model": "l", "weight": MAX_WEIGHT}]})).is_ok());
    }

    #[test]
    fn a_fallback_of_another_kind_is_a_kind_mismatch() {
        assert_eq!(
            err(
                json!({"id": "m", "kind": "chat", "provider": "vllm-1", "upstream_model": "l", "fallbacks": ["gpt-mini", "embed"]})
            ),
            ("model_kind_mismatch", "fallbacks[1]".into())
        );
    }

    #[test]
    fn fallbacks_must_exist_differ_from_the_model_and_not_repeat() {
        let base = |f: Value| json!({"id": "m", "kind": "chat", "provider": "vllm-1", "upstream_model": "l", "fallbacks": f});
        assert_eq!(
            err(base(json!(["ghost"]))),
            ("validation_error", "fallbacks[0]".into())
        );
        assert_eq!(
            err(base(json!(["m"]))),
            ("validation_error", "fallbacks[0]".into())
        );
        assert_eq!(
            err(base(json!(["gpt-mini", "gpt-mini"]))),
            ("validation_error", "fallbacks[1]".into())
        );
        let many: Vec<String> = (0..=MAX_FALLBACKS).map(|i| format!("f{i}")).collect();
        assert_eq!(
            err(base(json!(many))),
            ("validation_error", "fallbacks".into())
        );
    }

    #[test]
    fn max_attempts_is_between_one_and_ten() {
        let base = |n: i64| json!({"id": "m", "kind": "chat", "provider": "vllm-1", "upstream_model": "l", "max_attempts": n});
        for n in [0, -1, MAX_ATTEMPTS + 1] {
            assert_eq!(
                err(base(n)),
                ("validation_error", "max_attempts".into()),
                "{n}"
            );
        }
        assert_eq!(check(base(1)).expect("1").max_attempts, 1);
        assert_eq!(check(base(MAX_ATTEMPTS)).expect("10").max_attempts, 10);
    }

    #[test]
    fn targets_and_the_one_target_form_exclude_each_other_and_one_is_needed() {
        let t = json!([{"provider": "vllm-1", "upstream_model": "l"}]);
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "targets": t, "provider": "vllm-2"})),
            ("validation_error", "targets".into())
        );
        assert_eq!(
            err(json!({"id": "m", "kind": "chat"})),
            ("validation_error", "targets".into())
        );
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "targets": []})),
            ("validation_error", "targets".into())
        );
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "provider": "vllm-1"})),
            ("validation_error", "upstream_model".into())
        );
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "upstream_model": "l"})),
            ("validation_error", "provider".into())
        );
        let many: Vec<Value> = (0..=MAX_TARGETS)
            .map(|i| json!({"provider": "vllm-1", "upstream_model": format!("l{i}")}))
            .collect();
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "targets": many})),
            ("validation_error", "targets".into())
        );
    }

    #[test]
    fn a_target_given_twice_is_refused() {
        assert_eq!(
            err(json!({"id": "m", "kind": "chat", "targets": [
                {"provider": "vllm-1", "upstream_model": "l"},
                {"provider": "vllm-1", "upstream_model": "l", "weight": 3}]})),
            ("validation_error", "targets[1].provider".into())
        );
    }

    #[test]
    fn id_kind_routing_and_upstream_model_are_checked() {
        assert_eq!(
            err(json!({"id": "", "kind": "chat", "provider": "vllm-1", "upstream_model": "l"})),
            ("validation_error", "id".into())
        );
        assert_eq!(
            err(json!({"id": "m", "kind": "image", "provider": "vllm-1", "upstream_model": "l"})),
            ("validation_error", "kind".into())
        );
        assert_eq!(
            err(
                json!({"id": "m", "kind": "chat", "provider": "vllm-1", "upstream_model": "l", "routing": "random"})
            ),
            ("validation_error", "routing".into())
        );
        assert_eq!(
            err(
                json!({"id": "m", "kind": "chat", "targets": [{"provider": "vllm-1", "upstream_model": " "}]})
            ),
            ("validation_error", "targets[0].upstream_model".into())
        );
    }

    #[test]
    fn the_form_reads_from_toml() {
        let form: ModelForm = toml::from_str(
            r#"
            id = "llama"
            kind = "chat"
            routing = "least_busy"
            fallbacks = ["gpt-mini"]
            targets = [
              { provider = "vllm-1", upstream_model = "l", weight = 2 },
              { provider = "vllm-2", upstream_model = "l" },
            ]
            "#,
        )
        .expect("toml");
        let s = form.validate(providers, models).expect("valid");
        assert_eq!((s.targets.len(), s.routing), (2, Routing::LeastBusy));
    }

    fn spec(targets: &[(&str, u32)]) -> ModelSpec {
        ModelSpec {
            id: "m".into(),
            kind: ModelKind::Chat,
            targets: targets
                .iter()
                .map(|(p, w)| TargetSpec {
                    provider: p.to_string(),
                    upstream_model: "l".into(),
                    weight: *w,
                })
                .collect(),
            routing: Routing::Weighted,
            fallbacks: vec!["gpt-mini".into()],
            max_attempts: 3,
            aliases: Vec::new(),
            max_tokens_default: DEFAULT_MAX_TOKENS,
        }
    }

    fn patch(v: Value) -> ModelPatch {
        serde_json::from_value(v).expect("patch shape")
    }

    #[test]
    fn a_patch_changes_only_what_it_names() {
        let cur = spec(&[("vllm-1", 2), ("vllm-2", 1)]);
        let s = patch(json!({"routing": "least_busy", "max_attempts": 4}))
            .apply(&cur)
            .expect("applies")
            .validate(providers, models)
            .expect("valid");
        assert_eq!(s.targets, cur.targets);
        assert_eq!(s.fallbacks, cur.fallbacks);
        assert_eq!((s.routing, s.max_attempts), (Routing::LeastBusy, 4));

        let s = patch(json!({"fallbacks": []}))
            .apply(&cur)
            .expect("applies")
            .validate(providers, models)
            .expect("valid");
        assert!(s.fallbacks.is_empty());
    }

    #[test]
    fn a_patch_of_provider_changes_the_only_target_and_keeps_its_weight() {
        let s = patch(json!({"provider": "vllm-3"}))
            .apply(&spec(&[("vllm-1", 5)]))
            .expect("applies")
            .validate(providers, models)
            .expect("valid");
        assert_eq!(
            s.targets,
            [TargetSpec {
                provider: "vllm-3".into(),
                upstream_model: "l".into(),
                weight: 5
            }]
        );
        let e = patch(json!({"provider": "vllm-3"}))
            .apply(&spec(&[("vllm-1", 1), ("vllm-2", 1)]))
            .expect_err("ambiguous");
        assert_eq!(e.param, "targets");
    }

    #[test]
    fn a_patch_cannot_change_the_kind_and_is_validated_again() {
        let cur = spec(&[("vllm-1", 1)]);
        assert_eq!(
            patch(json!({"kind": "embeddings"}))
                .apply(&cur)
                .expect_err("kind")
                .param,
            "kind"
        );
        assert!(patch(json!({"kind": "chat"})).apply(&cur).is_ok());
        let e = patch(json!({"fallbacks": ["embed"]}))
            .apply(&cur)
            .expect("applies")
            .validate(providers, models)
            .expect_err("wrong kind");
        assert_eq!(e.code, "model_kind_mismatch");
        let e =
            patch(json!({"targets": [{"provider": "vllm-1", "upstream_model": "l", "weight": 0}]}))
                .apply(&cur)
                .expect("applies")
                .validate(providers, models)
                .expect_err("weight");
        assert_eq!(e.param, "targets[0].weight");
    }

    #[test]
    fn a_spec_turns_back_into_an_equal_form() {
        let cur = spec(&[("vllm-1", 2), ("vllm-2", 1)]);
        assert_eq!(
            cur.to_form().validate(providers, models).expect("valid"),
            cur
        );
    }

    #[test]
    fn aliases_are_exact_or_one_trailing_star_at_most_32_of_at_most_256_characters() {
        let names = |n: usize| (0..n).map(|i| format!("a{i}")).collect::<Vec<_>>();
        assert!(check_aliases(&names(MAX_ALIASES)).is_ok());
        assert_eq!(
            check_aliases(&names(MAX_ALIASES + 1)).unwrap_err().param,
            "aliases"
        );
        assert!(check_aliases(&["x".repeat(MAX_ALIAS_CHARS)]).is_ok());
        assert!(check_aliases(&["x".repeat(MAX_ALIAS_CHARS + 1)]).is_err());
        assert!(check_aliases(&["claude-*".into(), "c*".into()]).is_ok());
        for bad in ["*", "a*b", "a**", "*a", "", "a b"] {
            let e = check_aliases(&[bad.to_string()]).unwrap_err();
            assert_eq!(e.param, "aliases[0]", "{bad}");
            assert!(e.message.contains("'aliases'"), "{bad}: {}", e.message);
        }
        assert_eq!(
            check_aliases(&["x".into(), "x".into()]).unwrap_err().param,
            "aliases[1]"
        );
    }

    #[test]
    fn aliases_clash_with_ids_and_other_aliases_and_anthropic_serves_chat_only() {
        use crate::models::ProviderType;
        let mut s = spec(&[("vllm-1", 1)]);
        s.aliases = vec!["claude-*".into()];
        let others = [("other", vec!["o-1".to_string()])];
        let it = || others.iter().map(|(id, a)| (*id, a.as_slice()));
        let kind = |p: &str| (p == "claude").then_some(ProviderType::Anthropic);
        assert!(s.check_catalog(it(), kind).is_ok());
        for (alias, why) in [("other", "an id"), ("o-1", "an alias"), ("m", "its own id")] {
            let mut bad = s.clone();
            bad.aliases = vec![alias.into()];
            let e = bad.check_catalog(it(), kind).unwrap_err();
            assert_eq!(e.param, "aliases[0]", "{why}");
        }
        let mut bad = s.clone();
        bad.id = "o-1".into();
        assert_eq!(bad.check_catalog(it(), kind).unwrap_err().param, "id");
        let mut emb = s.clone();
        emb.kind = ModelKind::Embeddings;
        assert!(emb.check_catalog(it(), kind).is_ok());
        emb.targets[0].provider = "claude".into();
        assert_eq!(emb.check_catalog(it(), kind).unwrap_err().param, "provider");
        let mut chat = emb.clone();
        chat.kind = ModelKind::Chat;
        assert!(chat.check_catalog(it(), kind).is_ok());
    }
}
