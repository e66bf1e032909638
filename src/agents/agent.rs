//! An agent: its address, model, tool and PII rules, and who may sign in.
//! Input is parsed here once into an [`Agent`]; nothing invalid gets further.

use std::fmt;

use gatehouse_pii::{Mode as PiiMode, Scanner};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::error::Error;
use crate::models::{CatalogSnapshot, ModelKind};
use crate::store::agents::AgentRow;
use crate::time::rfc3339;

pub const MAX_ADDRESS_LEN: usize = 64;
pub const MAX_NAME_LEN: usize = 200;
pub use crate::wire::MAX_TOOL_NAME_LEN;
/// A contract longer than any manifest could offer is a mistake, not a policy.
pub const MAX_CONTRACT_TOOLS: usize = 1000;
pub const MAX_INSTRUCTIONS_CHARS: usize = 65_536;
pub const MAX_ALLOWED_USERS: usize = 10_000;

/// An agent's address: 1 to 64 of lower-case letters, digits, `.` `_` `-` `@`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AgentAddress(String);

impl AgentAddress {
    pub fn parse(s: &str) -> Option<AgentAddress> {
        let ok = !s.is_empty()
            && s.len() <= MAX_ADDRESS_LEN
            && s.bytes().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || matches!(c, b'.' | b'_' | b'-' | b'@')
            });
        ok.then(|| AgentAddress(s.to_string()))
    }

    /// Parses a request field; the error names the field.
    pub fn parse_field(field: &str, s: &str) -> Result<AgentAddress, Error> {
        Self::parse(s).ok_or_else(|| {
            Error::validation(
                field,
                format!(
                    "'{field}' must be 1 to {MAX_ADDRESS_LEN} characters of lower-case letters, digits and . _ - @"
                ),
            )
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tool name: 1 to 64 of `A-Za-z0-9_-`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ToolName(String);

impl ToolName {
    pub fn parse(s: &str) -> Option<ToolName> {
        crate::wire::is_tool_name(s).then(|| ToolName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How tools are offered upstream in a chat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    Off,
    ReadOnly,
    #[default]
    Ask,
    Auto,
}

impl ToolMode {
    pub const ALL: [ToolMode; 4] = [
        ToolMode::Off,
        ToolMode::ReadOnly,
        ToolMode::Ask,
        ToolMode::Auto,
    ];

    pub fn parse(s: &str) -> Option<ToolMode> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolMode::Off => "off",
            ToolMode::ReadOnly => "read_only",
            ToolMode::Ask => "ask",
            ToolMode::Auto => "auto",
        }
    }
}

/// The agent's PII rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PiiSettings {
    pub mode: PiiMode,
    pub user_choosable: bool,
    pub terms: Vec<String>,
}

impl PiiSettings {
    /// The values an app may send in `X-Service-PII-Mode`.
    pub fn choosable_modes(&self) -> Vec<&'static str> {
        if self.user_choosable {
            vec![
                PiiMode::Redact.as_str(),
                PiiMode::TokenizeReversible.as_str(),
            ]
        } else {
            Vec::new()
        }
    }
}

/// A validated agent.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    pub address: AgentAddress,
    pub name: String,
    pub model: String,
    pub default_tool_mode: ToolMode,
    pub tool_contract: Vec<String>,
    pub pii: PiiSettings,
    pub allow_local_mcp: bool,
    pub instructions: Option<String>,
    /// Lower-case e-mails; `None` lets every user sign in.
    pub allowed_users: Option<Vec<String>>,
    pub created_at: i64,
    pub updated_at: i64,
    pub limits: crate::limits::Limits,
    /// The agent's `mcp` grant (`None`: no MCP access).
    pub mcp: Option<crate::users::mcp_grant::McpGrant>,
}

impl Agent {
    pub fn allows_user(&self, email: &str) -> bool {
        self.allowed_users
            .as_ref()
            .is_none_or(|list| list.iter().any(|e| e.eq_ignore_ascii_case(email)))
    }

    /// The admin view: the create body with every field filled.
    pub fn view(&self) -> serde_json::Value {
        json!({
            "address": self.address.as_str(),
            "name": self.name,
            "model": self.model,
            "default_tool_mode": self.default_tool_mode.as_str(),
            "tool_contract": self.tool_contract,
            "pii": {
                "mode": self.pii.mode.as_str(),
                "user_choosable": self.pii.user_choosable,
                "terms": self.pii.terms,
            },
            "allow_local_mcp": self.allow_local_mcp,
            "instructions": self.instructions,
            "allowed_users": self.allowed_users,
            "limits": self.limits,
            "mcp": self.mcp,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
        })
    }

    pub fn to_row(&self) -> AgentRow {
        AgentRow {
            address: self.address.as_str().to_string(),
            name: self.name.clone(),
            model: self.model.clone(),
            default_tool_mode: self.default_tool_mode.as_str().to_string(),
            // Serialising plain strings and a derived struct cannot fail.
            tool_contract: serde_json::to_string(&self.tool_contract).unwrap_or_default(),
            pii: serde_json::to_string(&self.pii).unwrap_or_default(),
            allow_local_mcp: crate::store::b(self.allow_local_mcp),
            instructions: self.instructions.clone(),
            allowed_users: self
                .allowed_users
                .as_ref()
                .map(|u| serde_json::to_string(u).unwrap_or_default()),
            created_at: self.created_at,
            updated_at: self.updated_at,
            limits: self.limits.to_db(),
            mcp: crate::users::mcp_grant::McpGrant::to_db(self.mcp.as_ref()),
        }
    }

    /// Reads a stored row; an error means the row was changed behind our back.
    pub fn from_row(row: AgentRow) -> Result<Agent, String> {
        let bad = |what: &str| format!("agent {} has an unreadable {what}", row.address);
        Ok(Agent {
            address: AgentAddress::parse(&row.address).ok_or_else(|| bad("address"))?,
            default_tool_mode: ToolMode::parse(&row.default_tool_mode)
                .ok_or_else(|| bad("default_tool_mode"))?,
            tool_contract: serde_json::from_str(&row.tool_contract)
                .map_err(|_| bad("tool_contract"))?,
            pii: serde_json::from_str(&row.pii).map_err(|_| bad("pii"))?,
            allow_local_mcp: row.allow_local_mcp != 0,
            allowed_users: match &row.allowed_users {
                None => None,
                Some(s) => Some(serde_json::from_str(s).map_err(|_| bad("allowed_users"))?),
            },
            name: row.name,
            model: row.model,
            instructions: row.instructions,
            created_at: row.created_at,
            updated_at: row.updated_at,
            mcp: crate::users::mcp_grant::McpGrant::from_db_or_closed(
                row.mcp.as_deref(),
                &row.address,
            ),
            limits: crate::limits::Limits::from_db_or_closed(row.limits.as_deref(), &row.address),
        })
    }
}

/// A JSON field of a PATCH body: left out, sent as null, or sent with a value.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Patch<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Only called when the field is present; `#[serde(default)]` gives Absent.
        Option::<T>::deserialize(d).map(|o| o.map_or(Patch::Null, Patch::Value))
    }
}

/// `pii` as sent: every part optional (defaults on create, kept on PATCH).
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct PiiInput {
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub user_choosable: Option<bool>,
    #[serde(default)]
    pub terms: Option<Vec<String>>,
}

/// The body of `POST /api/admin/agents` (and one `[[agents]]` table of the config file).
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct NewAgent {
    pub address: String,
    pub name: String,
    pub model: String,
    #[serde(default)]
    pub default_tool_mode: Option<String>,
    #[serde(default)]
    pub tool_contract: Option<Vec<String>>,
    #[serde(default)]
    pub pii: Option<PiiInput>,
    #[serde(default)]
    pub allow_local_mcp: Option<bool>,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub allowed_users: Option<Vec<String>>,
    /// `{requests_per_minute, tokens_per_minute, tokens_per_day, max_parallel}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub limits: Option<serde_json::Value>,
    /// `{"servers": [...], "tools"?: {...}}`; null or left out: no MCP access.
    /// Checked against the configured servers by the caller
    /// (`crate::users::mcp_grant::McpGrant::parse`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub mcp: Option<serde_json::Value>,
}

/// The body of `PATCH /api/admin/agents/{address}`: any subset of the fields.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct AgentPatch {
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub name: Patch<String>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub model: Patch<String>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub default_tool_mode: Patch<String>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub tool_contract: Patch<Vec<String>>,
    #[serde(default)]
    #[schema(value_type = Option<PiiInput>)]
    pub pii: Patch<PiiInput>,
    #[serde(default)]
    #[schema(value_type = Option<bool>)]
    pub allow_local_mcp: Patch<bool>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub instructions: Patch<String>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub allowed_users: Patch<Vec<String>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub limits: Patch<serde_json::Value>,
    /// Checked and applied by the caller, like `NewAgent::mcp`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub mcp: Patch<serde_json::Value>,
}

fn parse_name(raw: &str) -> Result<String, Error> {
    let name = raw.trim();
    let n = name.chars().count();
    if n == 0 || n > MAX_NAME_LEN || name.chars().any(char::is_control) {
        return Err(Error::validation(
            "name",
            format!("'name' must be 1 to {MAX_NAME_LEN} characters, without control characters."),
        ));
    }
    Ok(name.to_string())
}

/// The agent's model must be a chat model of the catalog.
pub fn check_model(catalog: &CatalogSnapshot, id: &str) -> Result<String, Error> {
    let model = catalog.model(id).ok_or_else(|| {
        Error::validation(
            "model",
            format!("There is no model '{id}'; GET /api/admin/models lists them."),
        )
    })?;
    if model.kind != ModelKind::Chat {
        return Err(Error::bad_request(
            "model_kind_mismatch",
            format!(
                "The model '{id}' {}; an agent needs a chat model.",
                model.kind.advice()
            ),
        )
        .with_param("model"));
    }
    Ok(model.id.clone())
}

fn parse_tool_mode(raw: &str) -> Result<ToolMode, Error> {
    ToolMode::parse(raw).ok_or_else(|| {
        Error::validation(
            "default_tool_mode",
            "'default_tool_mode' must be one of off, read_only, ask, auto.",
        )
    })
}

/// Tool names, duplicates dropped (first one kept).
fn parse_contract(raw: &[String]) -> Result<Vec<String>, Error> {
    if raw.len() > MAX_CONTRACT_TOOLS {
        return Err(Error::validation(
            "tool_contract",
            format!("'tool_contract' may list at most {MAX_CONTRACT_TOOLS} tools."),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let name = ToolName::parse(t).ok_or_else(|| {
            Error::validation(
                "tool_contract",
                format!("'tool_contract' entry {i} must be 1 to {MAX_TOOL_NAME_LEN} characters of A-Z a-z 0-9 _ -."),
            )
        })?;
        if !out.iter().any(|o| o == name.as_str()) {
            out.push(name.0);
        }
    }
    Ok(out)
}

/// Applies `input` over `base` and checks the terms compile into a scanner.
fn parse_pii(base: &PiiSettings, input: &PiiInput) -> Result<PiiSettings, Error> {
    let mode = match input.mode.as_deref() {
        None => base.mode,
        Some(m) => m.parse::<PiiMode>().map_err(|_| {
            Error::validation(
                "pii.mode",
                "'pii.mode' must be one of off, redact, tokenize_reversible.",
            )
        })?,
    };
    let terms: Vec<String> = match &input.terms {
        None => base.terms.clone(),
        Some(t) => t
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    };
    // The scanner's own limits decide what a usable term list is.
    Scanner::new(&terms)
        .map_err(|e| Error::validation("pii.terms", format!("'pii.terms': {e}.")))?;
    Ok(PiiSettings {
        mode,
        user_choosable: input.user_choosable.unwrap_or(base.user_choosable),
        terms,
    })
}

fn parse_instructions(raw: &str) -> Result<String, Error> {
    if raw.chars().count() > MAX_INSTRUCTIONS_CHARS {
        return Err(Error::validation(
            "instructions",
            format!("'instructions' may have at most {MAX_INSTRUCTIONS_CHARS} characters."),
        ));
    }
    Ok(raw.to_string())
}

/// E-mails, lower-cased, duplicates dropped.
fn parse_allowed_users(raw: &[String]) -> Result<Vec<String>, Error> {
    if raw.len() > MAX_ALLOWED_USERS {
        return Err(Error::validation(
            "allowed_users",
            format!("'allowed_users' may list at most {MAX_ALLOWED_USERS} e-mails."),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for (i, e) in raw.iter().enumerate() {
        let email = crate::users::Email::parse(e)
            .map(crate::users::Email::into_string)
            .map_err(|_| {
                Error::validation(
                    "allowed_users",
                    format!("'allowed_users' entry {i} is not an e-mail address."),
                )
            })?;
        if !out.contains(&email) {
            out.push(email);
        }
    }
    Ok(out)
}

fn null_refused(field: &str) -> Error {
    Error::validation(field, format!("'{field}' cannot be null."))
}

impl NewAgent {
    pub fn validate(&self, catalog: &CatalogSnapshot, now: i64) -> Result<Agent, Error> {
        Ok(Agent {
            address: AgentAddress::parse_field("address", &self.address)?,
            name: parse_name(&self.name)?,
            model: check_model(catalog, &self.model)?,
            default_tool_mode: match &self.default_tool_mode {
                None => ToolMode::default(),
                Some(m) => parse_tool_mode(m)?,
            },
            tool_contract: parse_contract(self.tool_contract.as_deref().unwrap_or_default())?,
            pii: parse_pii(
                &PiiSettings::default(),
                self.pii.as_ref().unwrap_or(&PiiInput::default()),
            )?,
            allow_local_mcp: self.allow_local_mcp.unwrap_or(false),
            instructions: self
                .instructions
                .as_deref()
                .map(parse_instructions)
                .transpose()?,
            allowed_users: self
                .allowed_users
                .as_deref()
                .map(parse_allowed_users)
                .transpose()?,
            created_at: now,
            updated_at: now,
            limits: match &self.limits {
                None => crate::limits::Limits::default(),
                Some(v) => crate::limits::Limits::from_json(v)?,
            },
            mcp: None,
        })
    }
}

impl AgentPatch {
    /// The agent with this patch applied; `agent` itself is left as it was.
    pub fn apply(
        &self,
        agent: &Agent,
        catalog: &CatalogSnapshot,
        now: i64,
    ) -> Result<Agent, Error> {
        let mut a = agent.clone();
        match &self.name {
            Patch::Absent => {}
            Patch::Null => return Err(null_refused("name")),
            Patch::Value(v) => a.name = parse_name(v)?,
        }
        match &self.model {
            Patch::Absent => {}
            Patch::Null => return Err(null_refused("model")),
            Patch::Value(v) => a.model = check_model(catalog, v)?,
        }
        match &self.default_tool_mode {
            Patch::Absent => {}
            Patch::Null => return Err(null_refused("default_tool_mode")),
            Patch::Value(v) => a.default_tool_mode = parse_tool_mode(v)?,
        }
        match &self.tool_contract {
            Patch::Absent => {}
            Patch::Null => return Err(null_refused("tool_contract")),
            Patch::Value(v) => a.tool_contract = parse_contract(v)?,
        }
        match &self.pii {
            Patch::Absent => {}
            Patch::Null => return Err(null_refused("pii")),
            Patch::Value(v) => a.pii = parse_pii(&agent.pii, v)?,
        }
        match &self.allow_local_mcp {
            Patch::Absent => {}
            Patch::Null => return Err(null_refused("allow_local_mcp")),
            Patch::Value(v) => a.allow_local_mcp = *v,
        }
        match &self.instructions {
            Patch::Absent => {}
            Patch::Null => a.instructions = None,
            Patch::Value(v) => a.instructions = Some(parse_instructions(v)?),
        }
        match &self.allowed_users {
            Patch::Absent => {}
            Patch::Null => a.allowed_users = None,
            Patch::Value(v) => a.allowed_users = Some(parse_allowed_users(v)?),
        }
        match &self.limits {
            Patch::Absent => {}
            Patch::Null => a.limits = crate::limits::Limits::default(),
            Patch::Value(v) => a.limits = crate::limits::Limits::from_json(v)?,
        }
        a.updated_at = now;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::{ModelRow, ProviderRow};

    fn catalog() -> CatalogSnapshot {
        let p = ProviderRow {
            name: "p".into(),
            kind: "openai".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: None,
            timeout_s: 5,
            created_at: 0,
            responses: "bridge".into(),
            anthropic_version: None,
            beta_headers: None,
        };
        let m = |id: &str, kind: &str| ModelRow {
            id: id.into(),
            kind: kind.into(),
            provider: "p".into(),
            upstream_model: "u".into(),
            created_at: 0,
            routing: "weighted".into(),
            fallbacks: None,
            max_attempts: 3,
            aliases: None,
            max_tokens_default: 4096,
        };
        CatalogSnapshot::build(
            vec![p],
            vec![
                m("chat-1", "chat"),
                m("emb-1", "embeddings"),
                m("rr-1", "scoring"),
            ],
            vec![],
            &crate::models::RoutingState::new(std::time::Duration::ZERO),
        )
    }

    fn minimal() -> NewAgent {
        serde_json::from_value(json!({"address": "a", "name": "A", "model": "chat-1"}))
            .expect("parses")
    }

    #[test]
    fn address_accepts_64_allowed_characters_and_refuses_65_or_others() {
        assert!(AgentAddress::parse(&"a".repeat(64)).is_some());
        assert!(AgentAddress::parse(&"a".repeat(65)).is_none());
        assert!(AgentAddress::parse("support@acme.example-1_x").is_some());
        for bad in ["", "Upper", "with space", "slash/x", "ü", "a:b"] {
            assert!(AgentAddress::parse(bad).is_none(), "{bad}");
        }
        let e = AgentAddress::parse_field("agent", "X").expect_err("refused");
        assert_eq!(
            (e.code.as_ref(), e.param.as_deref()),
            ("validation_error", Some("agent"))
        );
    }

    #[test]
    fn tool_names_are_1_to_64_of_letters_digits_underscore_dash() {
        assert!(ToolName::parse(&"T".repeat(64)).is_some());
        assert!(ToolName::parse(&"T".repeat(65)).is_none());
        assert!(ToolName::parse("get_Order-2").is_some());
        for bad in ["", "a.b", "a b", "é"] {
            assert!(ToolName::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn defaults_fill_every_field() {
        let a = minimal().validate(&catalog(), 5).expect("valid");
        assert_eq!(a.default_tool_mode, ToolMode::Ask);
        assert!(a.tool_contract.is_empty());
        assert_eq!(a.pii, PiiSettings::default());
        assert!(!a.allow_local_mcp);
        assert_eq!(a.instructions, None);
        assert_eq!(a.allowed_users, None);
        let v = a.view();
        assert_eq!(
            v["pii"],
            json!({"mode": "off", "user_choosable": false, "terms": []})
        );
        assert_eq!(v["default_tool_mode"], "ask");
    }

    #[test]
    fn model_must_exist_and_be_a_chat_model() {
        let c = catalog();
        assert_eq!(check_model(&c, "chat-1").ok().as_deref(), Some("chat-1"));
        let e = check_model(&c, "nope").expect_err("unknown");
        assert_eq!(
            (e.code.as_ref(), e.param.as_deref()),
            ("validation_error", Some("model"))
        );
        let e = check_model(&c, "emb-1").expect_err("kind");
        assert_eq!(e.code, "model_kind_mismatch");
        assert!(
            e.message.contains("send it to /v1/embeddings"),
            "{}",
            e.message
        );
        let e = check_model(&c, "rr-1").expect_err("kind");
        assert!(e.message.contains("/v1/rerank"), "{}", e.message);
    }

    #[test]
    fn allowed_users_are_lower_cased_deduplicated_and_checked() {
        let mut n = minimal();
        n.allowed_users = Some(vec!["Ann@Example.com".into(), "ann@example.com".into()]);
        let a = n.validate(&catalog(), 0).expect("valid");
        assert_eq!(a.allowed_users, Some(vec!["ann@example.com".to_string()]));
        assert!(a.allows_user("ANN@example.com"));
        assert!(!a.allows_user("bob@example.com"));
        n.allowed_users = Some(vec!["not-an-email".into()]);
        let e = n.validate(&catalog(), 0).expect_err("refused");
        assert_eq!(e.param.as_deref(), Some("allowed_users"));
        assert!(minimal()
            .validate(&catalog(), 0)
            .expect("valid")
            .allows_user("x@y.z"));
    }

    #[test]
    fn bad_fields_name_themselves() {
        let c = catalog();
        let cases = [
            (
                json!({"default_tool_mode": "sometimes"}),
                "default_tool_mode",
            ),
            (json!({"tool_contract": ["ok", "not ok"]}), "tool_contract"),
            (json!({"pii": {"mode": "scramble"}}), "pii.mode"),
            (json!({"pii": {"terms": ["x".repeat(300)]}}), "pii.terms"),
            (json!({"name": ""}), "name"),
            (json!({"name": "x".repeat(201)}), "name"),
            (
                json!({"instructions": "x".repeat(MAX_INSTRUCTIONS_CHARS + 1)}),
                "instructions",
            ),
        ];
        for (extra, param) in cases {
            let mut v = json!({"address": "a", "name": "A", "model": "chat-1"});
            for (k, x) in extra.as_object().expect("object") {
                v[k] = x.clone();
            }
            let n: NewAgent = serde_json::from_value(v).expect("shape");
            let e = n.validate(&c, 0).expect_err(param);
            assert_eq!(e.param.as_deref(), Some(param));
            assert_eq!(e.code, "validation_error");
        }
    }

    #[test]
    fn patch_changes_only_what_it_names_and_merges_pii() {
        let c = catalog();
        let mut n = minimal();
        n.pii = Some(PiiInput {
            mode: Some("redact".into()),
            user_choosable: None,
            terms: Some(vec!["Acme".into()]),
        });
        n.instructions = Some("Be brief.".into());
        n.allowed_users = Some(vec!["a@b.co".into()]);
        let a = n.validate(&c, 1).expect("valid");
        let p: AgentPatch = serde_json::from_value(
            json!({"pii": {"user_choosable": true}, "instructions": null, "allowed_users": null, "name": "B"}),
        )
        .expect("shape");
        let b = p.apply(&a, &c, 2).expect("applies");
        assert_eq!(b.name, "B");
        assert_eq!(b.pii.mode, PiiMode::Redact);
        assert!(b.pii.user_choosable);
        assert_eq!(b.pii.terms, vec!["Acme".to_string()]);
        assert_eq!(b.instructions, None);
        assert_eq!(b.allowed_users, None);
        assert_eq!((b.created_at, b.updated_at), (1, 2));
        assert_eq!(b.model, a.model);
        let p: AgentPatch = serde_json::from_value(json!({"model": null})).expect("shape");
        assert_eq!(
            p.apply(&a, &c, 3).expect_err("null").param.as_deref(),
            Some("model")
        );
    }

    #[test]
    fn rows_round_trip() {
        let mut n = minimal();
        n.tool_contract = Some(vec!["a".into(), "b".into(), "a".into()]);
        n.allowed_users = Some(vec![]);
        let a = n.validate(&catalog(), 7).expect("valid");
        assert_eq!(a.tool_contract, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(Agent::from_row(a.to_row()), Ok(a));
    }

    #[test]
    fn pii_modes_are_offered_only_when_choosable() {
        let mut p = PiiSettings::default();
        assert!(p.choosable_modes().is_empty());
        p.user_choosable = true;
        assert_eq!(p.choosable_modes(), vec!["redact", "tokenize_reversible"]);
    }
}
