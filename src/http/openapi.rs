//! `/openapi.json`: OpenAPI 3.1 of every route.
//!
//! The routes, their parameters and descriptions come from the `utoipa`
//! annotations on the handlers (registered with `routes!`, so the document
//! and the router cannot disagree on which routes exist). The bodies'
//! schemas (JSON Schema 2020-12) and who needs a credential are written
//! here, in one table, from the contract: most answers are built as JSON
//! values, not typed structs, so there is nothing to derive them from.
//! `tests/api/http/openapi.rs` checks that every route has its entry here, and
//! `tests/python/test_openapi.py` validates the document with
//! `openapi-spec-validator` and real requests and answers against it.

use serde_json::{json, Map, Value};

/// The name of the HTTP bearer scheme in `components.securitySchemes`.
pub const BEARER: &str = "bearer";

/// Routes that take no credential (`/metrics` takes an optional one).
pub const PUBLIC: [(&str, &str); 12] = [
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/api/version"),
    ("post", "/api/auth/jwt/login"),
    ("post", "/api/agent-tokens/refresh"),
    ("get", "/api/auth/sso"),
    ("get", "/api/auth/sso/{name}/authorize"),
    ("get", "/api/auth/sso/{name}/callback"),
    ("post", "/api/auth/sso/token"),
    // 405 whoever asks (no server-sent stream).
    ("get", "/mcp"),
    ("get", "/mcp/{server}"),
];

/// The HTTP methods an OpenAPI path item can hold.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn string() -> Value {
    json!({"type": "string"})
}

fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn int() -> Value {
    json!({"type": "integer"})
}

fn boolean() -> Value {
    json!({"type": "boolean"})
}

fn or_null(mut v: Value) -> Value {
    if let Some(t) = v.get("type").and_then(Value::as_str).map(str::to_string) {
        v["type"] = json!([t, "null"]);
        v
    } else {
        json!({"anyOf": [v, {"type": "null"}]})
    }
}

fn array(items: Value) -> Value {
    json!({"type": "array", "items": items})
}

fn strings() -> Value {
    array(string())
}

fn one_of(values: &[&str]) -> Value {
    json!({"type": "string", "enum": values})
}

/// An object with these properties, `required` of them always present.
/// Other properties are allowed: our bodies ignore unknown fields, OpenAI
/// bodies pass them on, and answers may grow.
fn object(required: &[&str], props: Value) -> Value {
    json!({"type": "object", "required": required, "properties": props})
}

fn limits_props() -> Value {
    let n = || or_null(json!({"type": "integer", "minimum": 1}));
    let budget = || or_null(crate::spend::amount::schema());
    json!({"requests_per_minute": n(), "tokens_per_minute": n(), "tokens_per_day": n(), "max_parallel": n(),
        "count_tokens_per_minute": n(), "mcp_calls_per_minute": n(),
        "budget_per_day": budget(), "budget_per_month": budget()})
}

fn pii_modes() -> Value {
    one_of(&["off", "redact", "tokenize_reversible"])
}

fn tool_modes() -> Value {
    one_of(&["off", "read_only", "ask", "auto"])
}

/// The named schemas, from the contract's field lists.
fn schemas() -> Map<String, Value> {
    let usage = object(
        &["prompt_tokens", "total_tokens"],
        json!({"prompt_tokens": int(), "total_tokens": int()}),
    );
    let message = object(
        &["role"],
        json!({"role": string(), "content": {"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "null"}]},
               "name": string(), "tool_calls": array(json!({"type": "object"})), "tool_call_id": string()}),
    );
    let tool = object(
        &["type", "function"],
        json!({"type": string(), "function": object(&["name"], json!({"name": string(), "description": string(), "parameters": {"type": "object"}}))}),
    );
    let approval = object(
        &[
            "id",
            "tool_call_id",
            "tool",
            "arguments",
            "status",
            "expires_at",
        ],
        json!({"id": string(), "source": one_of(&["chat", "mcp"]), "server": or_null(string()),
               "tool_call_id": or_null(string()), "tool": string(), "arguments": string(),
               "status": one_of(&["pending", "approved", "denied", "expired"]), "expires_at": time(),
               "created_at": time(), "decided_at": or_null(time()), "used_at": or_null(time()), "reason": string(),
               "device_id": string(), "conversation_id": or_null(string())}),
    );
    let sign_in = object(
        &[
            "device_id",
            "device_label",
            "agent",
            "created_at",
            "last_used_at",
            "expires_at",
        ],
        json!({"device_id": string(), "device_label": string(), "agent": string(), "created_at": time(),
               "last_used_at": or_null(time()), "expires_at": time()}),
    );
    let mut admin_sign_in = sign_in.clone();
    admin_sign_in["required"] = json!([
        "device_id",
        "device_label",
        "agent",
        "created_at",
        "last_used_at",
        "expires_at",
        "user"
    ]);
    admin_sign_in["properties"]["user"] = string();
    admin_sign_in["properties"]["user_id"] = string();
    admin_sign_in["properties"]["ended_at"] = or_null(time());
    admin_sign_in["properties"]["end_reason"] = or_null(string());
    let login_token = object(
        &["access_token", "token_type", "expires_in"],
        json!({"access_token": string(), "token_type": one_of(&["bearer"]), "expires_in": int()}),
    );
    let agent_tokens = object(
        &[
            "access_token",
            "token_type",
            "expires_in",
            "refresh_token",
            "refresh_expires_in",
            "device_id",
            "agent",
        ],
        json!({"access_token": string(), "token_type": one_of(&["bearer"]), "expires_in": int(),
               "refresh_token": {"type": "string", "pattern": "^gtr_"}, "refresh_expires_in": int(),
               "device_id": string(), "agent": string()}),
    );
    let target = object(
        &["provider", "upstream_model"],
        json!({"provider": string(), "upstream_model": string(), "weight": {"type": "integer", "minimum": 1}}),
    );
    let target_state = object(
        &[
            "provider",
            "upstream_model",
            "weight",
            "healthy",
            "in_flight",
            "failures",
            "resting_until",
        ],
        json!({"provider": string(), "upstream_model": string(), "weight": int(), "healthy": boolean(),
               "in_flight": int(), "failures": int(), "resting_until": or_null(time())}),
    );
    let model_kind = one_of(&["chat", "embeddings", "scoring"]);
    let model_props = json!({
        "id": string(), "kind": model_kind, "provider": string(), "upstream_model": string(),
        "targets": array(r("Target")), "routing": one_of(&["weighted", "least_busy"]),
        "fallbacks": strings(), "max_attempts": {"type": "integer", "minimum": 1},
        "aliases": {"type": "array", "maxItems": 32,
            "items": {"type": "string", "minLength": 1, "maxLength": 256}},
        "max_tokens_default": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
    });
    let pii = json!({"type": "object", "properties": {"mode": pii_modes(), "user_choosable": boolean(), "terms": strings()}});
    let agent_props = json!({
        "address": {"type": "string", "pattern": "^[a-z0-9._@-]{1,64}$"}, "name": string(), "model": string(),
        "default_tool_mode": tool_modes(), "tool_contract": strings(), "pii": pii,
        "allow_local_mcp": boolean(), "instructions": or_null(string()), "allowed_users": or_null(strings()),
        "limits": r("Limits"), "mcp": or_null(r("McpGrant")),
    });
    let mut agent = object(
        &[
            "address",
            "name",
            "model",
            "default_tool_mode",
            "tool_contract",
            "pii",
            "allow_local_mcp",
            "instructions",
            "allowed_users",
        ],
        agent_props.clone(),
    );
    agent["properties"]["created_at"] = time();
    agent["properties"]["updated_at"] = time();
    let mut agent_patch = json!({"type": "object", "properties": agent_props.clone()});
    if let Some(p) = agent_patch["properties"].as_object_mut() {
        p.remove("address");
    }
    let provider_props = json!({
        "name": string(), "type": one_of(&["openai", "anthropic", "tei", "cohere"]), "base_url": string(),
        "timeout_s": {"type": "integer", "minimum": 1},
        // anthropic providers only.
        "anthropic_version": string(),
        "beta_headers": {"oneOf": [one_of(&["forward", "drop"]), strings()]},
        // openai providers only.
        "responses": one_of(&["bridge", "native"]),
    });
    let mut provider_patch = json!({"type": "object", "description": "Any fields of a provider but name and type.",
        "properties": provider_props.clone()});
    if let Some(p) = provider_patch["properties"].as_object_mut() {
        p.remove("name");
        p.remove("type");
        p.insert("api_key".into(), or_null(string()));
    }
    let mut new_provider = object(&["name", "type", "base_url"], provider_props.clone());
    new_provider["properties"]["api_key"] = or_null(string());
    let mut provider = object(&["name", "type", "base_url"], provider_props);
    provider["properties"]["has_api_key"] = boolean();
    provider["properties"]["created_at"] = time();
    let sso_props = json!({
        "name": {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$"}, "issuer": string(), "client_id": string(),
        "display_name": string(), "scopes": strings(), "allowed_domains": strings(),
        "admin_group": or_null(string()), "groups_claim": string(), "create_users": boolean(),
        "app_redirect_uris": strings(),
    });
    let mut new_sso = object(
        &["name", "issuer", "client_id", "client_secret"],
        sso_props.clone(),
    );
    new_sso["properties"]["client_secret"] = string();
    let mut sso_patch = json!({"type": "object", "properties": sso_props.clone()});
    sso_patch["properties"]["client_secret"] = string();
    if let Some(p) = sso_patch["properties"].as_object_mut() {
        p.remove("name");
    }
    let mut sso = object(&["name", "issuer", "client_id", "display_name"], sso_props);
    sso["properties"]["redirect_uri"] = string();
    // Never shown again once set.
    sso["not"] = json!({"required": ["client_secret"]});
    let key_props = json!({
        "id": string(), "name": string(), "created_at": time(), "expires_at": or_null(time()),
        "models": or_null(strings()), "last_used_at": or_null(time()), "limits": r("Limits"),
        "mcp": or_null(r("McpGrant")),
    });
    let mut api_key = object(
        &["id", "name", "created_at", "expires_at", "models"],
        key_props.clone(),
    );
    api_key["not"] = json!({"required": ["key"]});
    let mut new_api_key = object(
        &["id", "name", "key", "created_at", "expires_at", "models"],
        key_props,
    );
    new_api_key["properties"]["key"] = json!({"type": "string", "pattern": "^gtk_"});
    let user = object(
        &["id", "email", "is_admin"],
        json!({"id": string(), "email": string(), "is_admin": boolean(), "is_active": boolean(),
               "created_at": time(), "limits": r("Limits"), "mcp": or_null(r("McpGrant"))}),
    );
    let event_in = object(
        &["type"],
        json!({"id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
               "type": {"type": "string", "minLength": 1, "maxLength": 64}, "time": string(),
               "conversation_id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
               "turn_id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
               "data": {"type": "object"}}),
    );
    let event_out = object(
        &[
            "id",
            "type",
            "time",
            "conversation_id",
            "turn_id",
            "data",
            "device_id",
            "received_at",
        ],
        json!({"cursor": or_null(string()), "id": or_null(string()), "type": string(), "time": or_null(string()),
               "conversation_id": or_null(string()), "turn_id": or_null(string()),
               "data": or_null(json!({"type": "object"})), "device_id": string(), "user_id": string(),
               "received_at": time()}),
    );
    let manifest_tool = object(
        &["name", "class"],
        json!({"name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}, "description": {"type": "string", "maxLength": 4000},
               "parameters": {"type": "object"}, "class": one_of(&["read", "write", "execute"])}),
    );
    let agent_tool = object(
        &["name", "class", "description", "status", "first_seen_at"],
        json!({"name": string(), "source": one_of(&["device", "mcp"]), "server": or_null(string()),
               "class": one_of(&["read", "write", "execute"]), "description": or_null(string()),
               "status": one_of(&["contract", "accepted", "held", "rejected"]), "first_seen_at": or_null(time())}),
    );
    let amount = crate::spend::amount::schema;
    let used = object(
        &[
            "requests_this_minute",
            "tokens_this_minute",
            "tokens_today",
            "in_flight",
            "spend_today",
            "spend_this_month",
            "reserved",
        ],
        json!({"requests_this_minute": int(), "tokens_this_minute": int(), "tokens_today": int(), "in_flight": int(),
            "spend_today": amount(), "spend_this_month": amount(), "reserved": amount()}),
    );
    let error_detail = object(
        &["code", "message"],
        json!({"code": string(), "message": string()}),
    );
    let openai_error = object(
        &["type", "message", "code"],
        json!({"message": string(), "type": string(), "param": or_null(string()), "code": string()}),
    );
    let s: Vec<(&str, Value)> = vec![
        (
            "Error",
            object(&["detail"], json!({"detail": error_detail})),
        ),
        (
            "OpenAIError",
            object(&["error"], json!({"error": openai_error})),
        ),
        (
            "Limits",
            json!({"type": "object", "description": "Positive integers, and budgets as amounts (0.000000001 to 1000000000); absent or null: no limit.", "properties": limits_props()}),
        ),
        (
            "LimitsUsage",
            object(
                &["limits", "used"],
                json!({"limits": r("Limits"), "used": used}),
            ),
        ),
        (
            "LoginForm",
            object(
                &["username", "password"],
                json!({
            "username": {"type": "string", "maxLength": 320, "description": "The user's e-mail address (case-insensitive)."},
            "password": {"type": "string", "maxLength": 1024}}),
            ),
        ),
        ("LoginToken", login_token),
        ("User", user),
        (
            "NewUser",
            object(
                &["email", "password"],
                json!({"email": string(), "password": string(), "is_admin": boolean()}),
            ),
        ),
        (
            "UserPatch",
            json!({"type": "object", "properties": {"is_active": boolean(), "is_admin": boolean(), "password": string(),
            "limits": or_null(r("Limits")), "mcp": or_null(r("McpGrant"))}}),
        ),
        (
            "NewApiKey",
            object(
                &["name"],
                json!({"name": string(), "expires_at": or_null(time()),
            "models": or_null(strings()), "limits": or_null(r("Limits")), "mcp": or_null(r("McpGrant"))}),
            ),
        ),
        (
            "ApiKeyPatch",
            json!({"type": "object", "properties": {"limits": or_null(r("Limits")), "mcp": or_null(r("McpGrant"))}}),
        ),
        ("ApiKey", api_key),
        ("NewApiKeyAnswer", new_api_key),
        ("NewProvider", new_provider),
        ("ProviderPatch", provider_patch),
        ("Provider", provider),
        ("Target", target),
        ("TargetState", target_state),
        ("NewModel", object(&["id", "kind"], model_props.clone())),
        (
            "ModelPatch",
            json!({"type": "object", "properties": model_props.clone()}),
        ),
        (
            "Model",
            json!({
                "type": "object", "required": ["id", "kind", "targets"],
                "properties": {
                    "id": string(), "kind": one_of(&["chat", "embeddings", "scoring"]),
                    "provider": or_null(string()), "upstream_model": or_null(string()),
                    "targets": array(r("TargetState")), "routing": one_of(&["weighted", "least_busy"]),
                    "fallbacks": strings(), "max_attempts": int(), "created_at": time(),
                    "aliases": strings(), "max_tokens_default": int(),
                },
            }),
        ),
        (
            "NewAgent",
            object(&["address", "name", "model"], agent_props),
        ),
        ("AgentPatch", agent_patch),
        ("Agent", agent),
        ("AgentTool", agent_tool),
        ("Approval", approval),
        (
            "ApprovalAnswer",
            object(
                &["decision"],
                json!({"decision": one_of(&["approve", "deny"]), "reason": or_null(string())}),
            ),
        ),
        (
            "EventsPage",
            object(
                &["events", "next"],
                json!({"events": array(r("StoredEvent")), "next": or_null(string())}),
            ),
        ),
        ("StoredEvent", event_out),
        (
            "EventsRequest",
            object(
                &["events"],
                json!({"events": {"type": "array", "minItems": 1, "maxItems": 100, "items": event_in}}),
            ),
        ),
        (
            "EventsAccepted",
            object(
                &["accepted", "duplicates"],
                json!({"accepted": int(), "duplicates": int()}),
            ),
        ),
        (
            "Manifest",
            object(
                &["app_name", "app_version", "sdk", "tools"],
                json!({
                    "app_name": string(), "app_version": string(), "sdk": string(),
                    "tools": {"type": "array", "maxItems": 200, "items": manifest_tool},
                    "greeting": or_null(string()),
                    "context": or_null(json!({"type": "array", "maxItems": 100, "items": object(&["name"], json!({"name": string(), "value": {}}))})),
                }),
            ),
        ),
        (
            "ManifestResult",
            object(
                &["seen_before", "manifest_hash"],
                json!({"seen_before": boolean(),
            "manifest_hash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}}),
            ),
        ),
        (
            "Profile",
            object(
                &[
                    "address",
                    "name",
                    "model",
                    "default_tool_mode",
                    "tool_modes",
                    "pii",
                    "allow_local_mcp",
                    "tool_contract",
                    "user",
                    "device_id",
                    "device_label",
                ],
                json!({"address": string(), "name": string(), "model": string(), "default_tool_mode": tool_modes(),
                   "tool_modes": array(tool_modes()),
                   "pii": object(&["mode", "user_choosable", "modes"], json!({"mode": pii_modes(), "user_choosable": boolean(), "modes": array(one_of(&["redact", "tokenize_reversible"]))})),
                   "allow_local_mcp": boolean(), "tool_contract": strings(),
                   "user": object(&["id", "email"], json!({"id": string(), "email": string()})),
                   "device_id": string(), "device_label": string()}),
            ),
        ),
        (
            "SignInRequest",
            object(
                &["agent", "device_label"],
                json!({"agent": string(),
            "device_label": {"type": "string", "minLength": 1, "maxLength": 200}}),
            ),
        ),
        (
            "RefreshRequest",
            object(&["refresh_token"], json!({"refresh_token": string()})),
        ),
        ("AgentTokens", agent_tokens),
        ("SignIn", sign_in),
        ("AdminSignIn", admin_sign_in),
        (
            "UsageRow",
            object(
                &[
                    "key",
                    "requests",
                    "prompt_tokens",
                    "completion_tokens",
                    "errors",
                    "cost",
                    "currency",
                    "unpriced_requests",
                ],
                json!({
            "key": or_null(string()), "requests": int(), "prompt_tokens": int(), "completion_tokens": int(), "errors": int(),
            "cost": crate::spend::amount::schema(), "currency": string(), "unpriced_requests": int()}),
            ),
        ),
        ("PriceBody", crate::spend::price::body_schema()),
        ("Price", crate::spend::price::schema()),
        ("UsageRecord", crate::spend::cost::record_schema()),
        ("NewSsoProvider", new_sso),
        ("SsoProviderPatch", sso_patch),
        ("SsoProvider", sso),
        (
            "SsoPublic",
            object(
                &["name", "display_name"],
                json!({"name": string(), "display_name": string()}),
            ),
        ),
        (
            "SsoToken",
            object(
                &["code", "code_verifier", "redirect_uri"],
                json!({"code": string(), "code_verifier": string(), "redirect_uri": string()}),
            ),
        ),
        (
            "ModelList",
            object(
                &["object", "data"],
                json!({"object": one_of(&["list"]), "data": array(object(
            &["id", "object", "created", "owned_by", "kind"],
            json!({"id": string(), "object": one_of(&["model"]), "created": int(), "owned_by": or_null(string()),
                   "kind": one_of(&["chat", "embeddings", "scoring"])})))}),
            ),
        ),
        (
            "MessagesRequest",
            json!({
                "type": "object", "required": ["model", "messages"],
                "description": "Anthropic's Messages body. `max_tokens` is required on /messages (not read by count_tokens); to an OpenAI upstream the members chat has no place for are dropped.",
                "properties": {"model": string(), "max_tokens": {"type": "integer", "minimum": 1},
                    "messages": {"type": "array", "minItems": 1, "items": object(&["role", "content"], json!({
                        "role": one_of(&["user", "assistant"]),
                        "content": {"anyOf": [{"type": "string"}, array(object(&["type"], json!({"type": string()})))]}}))},
                    "system": {"anyOf": [{"type": "string"}, array(object(&["type", "text"], json!({"type": one_of(&["text"]), "text": string()})))]},
                    "stream": boolean(), "tools": array(object(&["name"], json!({"name": string(), "description": string(), "input_schema": {"type": "object"}}))),
                    "tool_choice": {"type": "object"}},
            }),
        ),
        (
            "Message",
            json!({
                "type": "object", "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
                "properties": {"id": string(), "type": one_of(&["message"]), "role": one_of(&["assistant"]), "model": string(),
                    "content": array(object(&["type"], json!({"type": one_of(&["text", "tool_use", "thinking"])}))),
                    "stop_reason": or_null(string()), "stop_sequence": or_null(string()),
                    "usage": object(&["input_tokens", "output_tokens"], json!({"input_tokens": int(), "output_tokens": int(),
                        "cache_read_input_tokens": int(), "cache_creation_input_tokens": int()})),
                    "approvals": array(r("Approval"))},
            }),
        ),
        (
            "InputTokens",
            object(
                &["input_tokens"],
                json!({"input_tokens": {"type": "integer", "minimum": 1}}),
            ),
        ),
        ("ChatMessage", message),
        ("ChatTool", tool),
        (
            "RunAgentInput",
            json!({
                "type": "object", "required": ["threadId", "runId", "messages"],
                "description": "AG-UI's RunAgentInput (@ag-ui/core 1.0.0); unknown members are ignored. `threadId` is the conversation, `runId` the turn; `state` and `forwardedProps` are not sent upstream.",
                "properties": {
                    "threadId": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
                    "runId": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
                    "parentRunId": string(), "protocolVersion": string(), "state": {},
                    "messages": array(object(&["id", "role"], json!({"id": string(),
                        "role": one_of(&["developer", "system", "assistant", "user", "tool", "activity", "reasoning"]),
                        "content": {}, "toolCalls": array(object(&["id", "type", "function"], json!({"id": string(), "type": one_of(&["function"]),
                            "function": object(&["name", "arguments"], json!({"name": string(), "arguments": string()}))}))),
                        "toolCallId": string()}))),
                    "tools": array(object(&["name", "description"], json!({"name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                        "description": string(), "parameters": {}}))),
                    "context": array(object(&["description", "value"], json!({"description": string(), "value": string()}))),
                    "forwardedProps": {}},
            }),
        ),
        (
            "ChatCompletionRequest",
            json!({
                "type": "object", "required": ["messages"],
                "description": "The OpenAI chat completion body; fields the gateway does not know go to the upstream unchanged.",
                "properties": {"model": string(), "messages": {"type": "array", "minItems": 1, "items": r("ChatMessage")},
                    "stream": boolean(), "stream_options": {"type": "object"}, "tools": array(r("ChatTool")),
                    "tool_choice": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
            }),
        ),
        (
            "ChatCompletion",
            json!({
                "type": "object", "required": ["choices", "model"],
                "properties": {"id": string(), "object": string(), "created": int(), "model": string(),
                    "choices": array(object(&["index"], json!({"index": int(), "message": r("ChatMessage"), "finish_reason": or_null(string())}))),
                    "usage": or_null(json!({"type": "object", "properties": {"prompt_tokens": int(), "completion_tokens": int(), "total_tokens": int()}})),
                    "approvals": array(r("Approval"))},
            }),
        ),
        (
            "ResponsesRequest",
            json!({
                "type": "object", "required": ["input"],
                "description": "The OpenAI Responses body (stateless: the whole conversation in `input`); see the contract's section for what the bridge reads, native providers get it unchanged but `model`.",
                "properties": {"model": string(), "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
                    "instructions": or_null(string()), "stream": or_null(boolean()), "tools": array(json!({"type": "object"})),
                    "tool_choice": {"anyOf": [{"type": "string"}, {"type": "object"}]}, "parallel_tool_calls": or_null(boolean()),
                    "max_output_tokens": or_null(json!({"type": "integer", "minimum": 1})), "temperature": or_null(json!({"type": "number"})),
                    "top_p": or_null(json!({"type": "number"})), "reasoning": or_null(json!({"type": "object"})),
                    "text": or_null(json!({"type": "object"})), "user": or_null(string()), "safety_identifier": or_null(string()),
                    "store": or_null(boolean())},
            }),
        ),
        (
            "Response",
            json!({
                "type": "object", "required": ["id", "object", "status", "model", "output"],
                "properties": {"id": string(), "object": one_of(&["response"]), "created_at": int(),
                    "status": one_of(&["completed", "incomplete", "failed", "in_progress"]), "model": string(),
                    "output": array(json!({"type": "object"})),
                    "usage": or_null(json!({"type": "object", "properties": {"input_tokens": int(), "output_tokens": int(), "total_tokens": int()}})),
                    "incomplete_details": or_null(json!({"type": "object"})), "error": or_null(json!({"type": "object"})),
                    "approvals": array(r("Approval"))},
            }),
        ),
        (
            "EmbeddingsRequest",
            json!({
                "type": "object", "required": ["model", "input"],
                "description": "Fields the gateway does not know go to the upstream unchanged.",
                "properties": {"model": string(),
                    "input": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}]},
                    "encoding_format": one_of(&["float", "base64"]), "dimensions": {"type": "integer", "minimum": 1}, "user": string()},
            }),
        ),
        (
            "Embeddings",
            object(
                &["object", "data", "model", "usage"],
                json!({
            "object": one_of(&["list"]), "model": string(), "usage": usage,
            "data": array(object(&["object", "index", "embedding"], json!({"object": one_of(&["embedding"]), "index": int(),
                "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string", "description": "base64 of little-endian float32"}]}})))}),
            ),
        ),
        (
            "RerankRequest",
            json!({
                "type": "object", "required": ["model", "query", "documents"],
                "description": "Fields the gateway does not know go to the upstream unchanged.",
                "properties": {"model": string(), "query": {"type": "string", "minLength": 1},
                    "documents": {"type": "array", "minItems": 1, "items": {"anyOf": [{"type": "string"}, object(&["text"], json!({"text": string()}))]}},
                    "top_n": {"type": "integer", "minimum": 1}, "return_documents": boolean()},
            }),
        ),
        (
            "Rerank",
            object(
                &["id", "model", "results", "usage", "meta"],
                json!({
            "id": string(), "model": string(),
            "usage": object(&["prompt_tokens", "completion_tokens", "total_tokens"],
                json!({"prompt_tokens": int(), "completion_tokens": int(), "total_tokens": int()})),
            "meta": object(&["api_version", "billed_units"], json!({
                "api_version": object(&["version"], json!({"version": string()})),
                "billed_units": object(&["search_units"], json!({"search_units": int()}))})),
            "results": array(object(&["index", "relevance_score"], json!({"index": int(), "relevance_score": {"type": "number"},
                "document": object(&["text"], json!({"text": string()}))})))}),
            ),
        ),
        ("Health", object(&["status"], json!({"status": string()}))),
        (
            "JsonRpcMessage",
            json!({"type": "object", "required": ["jsonrpc"],
                   "description": "One JSON-RPC 2.0 message of the Model Context Protocol: a request (id, method, params), a notification (method, params) or a response (id, result or error).",
                   "properties": {"jsonrpc": string(), "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
                                  "method": string(), "params": {"type": "object"}, "result": {"type": "object"},
                                  "error": object(&["code", "message"], json!({"code": int(), "message": string(), "data": {}}))}}),
        ),
        (
            "McpUpstreamTool",
            object(
                &[
                    "name",
                    "exposed_name",
                    "description",
                    "annotations",
                    "class",
                    "class_source",
                    "allowed",
                ],
                json!({"name": string(), "exposed_name": string(), "description": or_null(string()),
                       "annotations": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                       "class": {"type": "string", "enum": ["read", "write", "execute"]},
                       "class_source": {"type": "string", "enum": ["config", "annotations", "default"]},
                       "allowed": {"type": "boolean"}}),
            ),
        ),
        (
            "Ready",
            object(
                &["status"],
                json!({"status": string(), "database": string()}),
            ),
        ),
        (
            "Version",
            object(&["version"], json!({"version": string()})),
        ),
    ];
    s.into_iter()
        .chain(mcp_admin_schemas())
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// MCP servers, grants and the call audit (docs/mcp-admin.md).
fn mcp_admin_schemas() -> Vec<(&'static str, Value)> {
    let pattern = json!({"type": "string", "minLength": 1, "maxLength": 256});
    let classes =
        json!({"type": "object", "additionalProperties": one_of(&["read", "write", "execute"])});
    let props = json!({
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,31}$"},
        "url": {"type": "string", "maxLength": 2048},
        "transport": one_of(&["streamable_http"]),
        "timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600},
        "tools": {"type": "array", "maxItems": 100, "items": pattern.clone()},
        "tool_classes": classes,
    });
    let mut new_server = object(&["name", "url"], props.clone());
    new_server["properties"]["headers"] = json!({"type": "object", "maxProperties": 32,
        "description": "Header name -> value, sent upstream; sealed at rest and never shown.",
        "additionalProperties": {"type": "string", "maxLength": 8192}});
    let mut patch = json!({"type": "object", "description": "Any fields but name; headers replace them all.",
        "properties": new_server["properties"].clone()});
    if let Some(p) = patch["properties"].as_object_mut() {
        p.remove("name");
    }
    let mut server = object(
        &[
            "name",
            "url",
            "transport",
            "timeout_s",
            "tools",
            "tool_classes",
            "header_names",
            "source",
            "created_at",
        ],
        props,
    );
    server["properties"]["header_names"] = strings();
    server["properties"]["source"] = one_of(&["api", "config"]);
    server["properties"]["created_at"] = time();
    server["not"] = json!({"required": ["headers"]});
    let grant = json!({"type": "object", "required": ["servers"], "additionalProperties": false,
    "description": "Deny by default: null is no MCP access. Effective access is the intersection of the server's allow-list, the user's grant and the key's (or agent's) grant.",
    "properties": {
        "servers": {"type": "array", "items": string(), "description": "Server names, or [\"*\"] for every server"},
        "tools": {"type": "object", "additionalProperties": {"type": "array", "minItems": 1, "maxItems": 100, "items": pattern}},
    }});
    let s = || or_null(string());
    // An enum or null (`or_null` would keep the enum, which null is not in).
    let opt = |v: Value| json!({"anyOf": [v, {"type": "null"}]});
    let call = object(
        &[
            "id",
            "created_at",
            "server",
            "tool",
            "exposed_name",
            "decision",
            "outcome",
            "latency_ms",
            "arguments_sha256",
        ],
        json!({"id": string(), "created_at": time(), "request_id": s(), "user_id": s(), "user": s(),
               "api_key_id": s(), "agent": s(), "device_id": s(), "server": s(), "tool": string(),
               "exposed_name": string(), "class": opt(one_of(&["read", "write", "execute"])),
               "mode": opt(tool_modes()),
               "decision": one_of(&["allowed", "approved", "held", "denied", "rate_limited"]),
               "reason": opt(one_of(&["unknown_tool", "not_granted", "tool_mode", "tool_held", "approval_denied"])),
               "approval_id": s(),
               "outcome": opt(one_of(&["ok", "tool_error", "upstream_error", "unavailable", "timeout", "too_large"])),
               "latency_ms": int(), "arguments_sha256": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}}),
    );
    vec![
        ("NewMcpServer", new_server),
        ("McpServerPatch", patch),
        ("McpServer", server),
        ("McpGrant", grant),
        ("McpCall", call),
        (
            "McpCallsPage",
            object(
                &["calls", "next"],
                json!({"calls": array(r("McpCall")), "next": or_null(string())}),
            ),
        ),
    ]
}

/// What one operation takes and gives: request body (media type, schema)
/// and its success answer (status, media type, schema).
struct Bodies {
    request: Option<(&'static str, Value)>,
    answer: Option<(&'static str, &'static str, Value)>,
}

const JSON: &str = "application/json";

fn bodies(method: &str, path: &str) -> Option<Bodies> {
    let req = |s: &str| Some((JSON, r(s)));
    let ok = |s: &str| Some(("200", JSON, r(s)));
    let created = |s: &str| Some(("201", JSON, r(s)));
    let list = |s: &str| Some(("200", JSON, array(r(s))));
    let none = || Some(("204", "", Value::Null));
    let b = |request, answer| Some(Bodies { request, answer });
    match (method, path) {
        ("get", "/healthz") => b(None, ok("Health")),
        ("post", "/mcp") | ("post", "/mcp/{server}") => {
            b(req("JsonRpcMessage"), ok("JsonRpcMessage"))
        }
        ("delete", "/mcp") | ("delete", "/mcp/{server}") => b(None, none()),
        // Only 405: no success answer to describe.
        ("get", "/mcp") | ("get", "/mcp/{server}") => b(None, None),
        ("get", "/api/admin/mcp-servers/{name}/tools") => b(None, list("McpUpstreamTool")),
        ("get", "/readyz") => b(None, ok("Ready")),
        ("get", "/metrics") => b(None, Some(("200", "text/plain", string()))),
        ("get", "/api/version") => b(None, ok("Version")),
        ("post", "/api/auth/jwt/login") => b(
            Some(("application/x-www-form-urlencoded", r("LoginForm"))),
            ok("LoginToken"),
        ),
        ("get", "/api/users/me") => b(None, ok("User")),
        ("post", "/api/api-keys") => b(req("NewApiKey"), created("NewApiKeyAnswer")),
        ("get", "/api/api-keys") => b(None, list("ApiKey")),
        ("patch", "/api/api-keys/{id}") => b(req("ApiKeyPatch"), ok("ApiKey")),
        ("delete", "/api/api-keys/{id}") => b(None, none()),
        ("get", "/api/api-keys/{id}/limits") => b(None, ok("LimitsUsage")),
        ("post", "/api/admin/users") => b(req("NewUser"), created("User")),
        ("get", "/api/admin/users") => b(None, list("User")),
        ("patch", "/api/admin/users/{id}") => b(req("UserPatch"), ok("User")),
        ("get", "/api/admin/users/{id}/limits") => b(None, ok("LimitsUsage")),
        ("get", "/api/admin/agents/{address}/limits") => b(None, ok("LimitsUsage")),
        ("post", "/api/admin/providers") => b(req("NewProvider"), created("Provider")),
        ("get", "/api/admin/providers") => b(None, list("Provider")),
        ("get", "/api/admin/providers/{name}") => b(None, ok("Provider")),
        ("delete", "/api/admin/providers/{name}") => b(None, none()),
        ("patch", "/api/admin/providers/{name}") => b(req("ProviderPatch"), ok("Provider")),
        ("post", "/v1/responses") | ("post", "/v1/agents/{agent}/responses") => {
            b(req("ResponsesRequest"), ok("Response"))
        }
        // Nothing is stored: these answer 404 response_not_found only.
        ("get", "/v1/responses/{id}")
        | ("delete", "/v1/responses/{id}")
        | ("get", "/v1/responses/{id}/input_items")
        | ("post", "/v1/responses/{id}/cancel") => b(None, None),
        ("post", "/api/admin/models") => b(req("NewModel"), created("Model")),
        ("get", "/api/admin/models") => b(None, list("Model")),
        ("get", "/api/admin/models/{id}") => b(None, ok("Model")),
        ("patch", "/api/admin/models/{id}") => b(req("ModelPatch"), ok("Model")),
        ("delete", "/api/admin/models/{id}") => b(None, none()),
        ("post", "/api/admin/agents") => b(req("NewAgent"), created("Agent")),
        ("get", "/api/admin/agents") => b(None, list("Agent")),
        ("get", "/api/admin/agents/{address}") => b(None, ok("Agent")),
        ("patch", "/api/admin/agents/{address}") => b(req("AgentPatch"), ok("Agent")),
        ("get", "/api/admin/agents/{address}/tools") => b(None, list("AgentTool")),
        ("post", "/api/admin/agents/{address}/tools/{name}/accept")
        | ("post", "/api/admin/agents/{address}/tools/{name}/reject") => b(None, ok("AgentTool")),
        ("get", "/api/admin/agents/{address}/events") => b(None, ok("EventsPage")),
        ("get", "/api/admin/agents/{address}/approvals") => b(None, list("Approval")),
        ("post", "/api/admin/agents/{address}/approvals/{id}") => {
            b(req("ApprovalAnswer"), ok("Approval"))
        }
        ("get", "/api/admin/sign-ins") => b(None, list("AdminSignIn")),
        ("delete", "/api/admin/sign-ins/{device_id}") => b(None, none()),
        ("get", "/api/admin/usage") => b(None, list("UsageRow")),
        ("get", "/api/admin/usage/records") => b(None, list("UsageRecord")),
        ("get", "/api/admin/prices") => b(None, list("Price")),
        ("get", "/api/admin/prices/{provider}/{upstream_model}") => b(None, ok("Price")),
        ("put", "/api/admin/prices/{provider}/{upstream_model}") => {
            b(req("PriceBody"), ok("Price"))
        }
        ("delete", "/api/admin/prices/{provider}/{upstream_model}") => b(None, none()),
        ("post", "/api/agent-tokens") => b(req("SignInRequest"), created("AgentTokens")),
        ("post", "/api/agent-tokens/refresh") => b(req("RefreshRequest"), ok("AgentTokens")),
        ("get", "/api/agent-tokens/mine") => b(None, list("SignIn")),
        ("delete", "/api/agent-tokens/{device_id}") => b(None, none()),
        ("get", "/v1/agents/{agent}/profile") => b(None, ok("Profile")),
        ("put", "/v1/agents/{agent}/manifest") => b(req("Manifest"), ok("ManifestResult")),
        ("post", "/v1/agents/{agent}/chat/completions") | ("post", "/v1/chat/completions") => {
            b(req("ChatCompletionRequest"), ok("ChatCompletion"))
        }
        ("post", "/v1/agents/{agent}/ag-ui") => b(
            req("RunAgentInput"),
            Some((
                "200",
                "text/event-stream",
                json!({"type": "string",
                "description": "AG-UI events, each one `data: {event}` message: RUN_STARTED first, RUN_FINISHED or RUN_ERROR last."}),
            )),
        ),
        ("post", "/v1/agents/{agent}/approvals/{id}") => b(req("ApprovalAnswer"), ok("Approval")),
        ("post", "/v1/agents/{agent}/events") => b(
            req("EventsRequest"),
            Some(("202", JSON, r("EventsAccepted"))),
        ),
        ("get", "/v1/models") => b(None, ok("ModelList")),
        ("post", "/v1/messages")
        | ("post", "/v1/agents/{agent}/messages")
        | ("post", "/v1/agents/{agent}/v1/messages") => b(req("MessagesRequest"), ok("Message")),
        ("post", "/v1/messages/count_tokens")
        | ("post", "/v1/agents/{agent}/messages/count_tokens")
        | ("post", "/v1/agents/{agent}/v1/messages/count_tokens") => {
            b(req("MessagesRequest"), ok("InputTokens"))
        }
        ("post", "/v1/embeddings") => b(req("EmbeddingsRequest"), ok("Embeddings")),
        ("post", "/v1/rerank") => b(req("RerankRequest"), ok("Rerank")),
        ("post", "/api/admin/sso") => b(req("NewSsoProvider"), created("SsoProvider")),
        ("get", "/api/admin/sso") => b(None, list("SsoProvider")),
        ("post", "/api/admin/mcp-servers") => b(req("NewMcpServer"), created("McpServer")),
        ("get", "/api/admin/mcp-servers") => b(None, list("McpServer")),
        ("get", "/api/admin/mcp-servers/{name}") => b(None, ok("McpServer")),
        ("patch", "/api/admin/mcp-servers/{name}") => b(req("McpServerPatch"), ok("McpServer")),
        ("delete", "/api/admin/mcp-servers/{name}") => b(None, none()),
        ("get", "/api/admin/mcp/calls") => b(None, ok("McpCallsPage")),
        ("get", "/api/admin/sso/{name}") => b(None, ok("SsoProvider")),
        ("patch", "/api/admin/sso/{name}") => b(req("SsoProviderPatch"), ok("SsoProvider")),
        ("delete", "/api/admin/sso/{name}") => b(None, none()),
        ("get", "/api/auth/sso") => b(None, list("SsoPublic")),
        ("get", "/api/auth/sso/{name}/authorize") => b(None, Some(("302", "", Value::Null))),
        ("get", "/api/auth/sso/{name}/callback") => b(None, Some(("200", "text/html", string()))),
        ("post", "/api/auth/sso/token") => b(req("SsoToken"), ok("LoginToken")),
        _ => None,
    }
}

/// The routes that have no entry in the body table (empty when complete).
pub fn undescribed(doc: &Value) -> Vec<String> {
    operations(doc)
        .into_iter()
        .filter(|(m, p)| bodies(m, p).is_none())
        .map(|(m, p)| format!("{} {p}", m.to_uppercase()))
        .collect()
}

/// Every (method, path) of a document.
pub fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut out = vec![];
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for m in METHODS {
            if item.get(m).is_some() {
                out.push((m.to_string(), path.clone()));
            }
        }
    }
    out
}

/// Error answers: the contract's shape by route family on every 4xx and
/// 5xx, and 401 on every route that needs a credential (403 on admin routes).
fn error_answers(op: &mut Value, path: &str, public: bool) {
    let shape = if path.starts_with("/v1/") {
        r("OpenAIError")
    } else if path == "/mcp" || path.starts_with("/mcp/") {
        // A JSON-RPC error body (contract, "Errors on /mcp").
        r("JsonRpcMessage")
    } else {
        r("Error")
    };
    if !public {
        let responses = &mut op["responses"];
        if responses.get("401").is_none() {
            responses["401"] = json!({"description": "invalid_token, token_expired, sign_in_ended or invalid_api_key: no valid credential"});
        }
        if path.starts_with("/api/admin/") && responses.get("403").is_none() {
            responses["403"] = json!({"description": "forbidden: not an admin"});
        }
    }
    for (status, resp) in op["responses"].as_object_mut().into_iter().flatten() {
        if (status.starts_with('4') || status.starts_with('5')) && resp.get("content").is_none() {
            resp["content"] = json!({JSON: {"schema": shape.clone()}});
        }
    }
}

/// Completes the document utoipa generated: schemas of bodies, security.
pub fn complete(doc: &mut Value) {
    doc["openapi"] = json!("3.1.0");
    doc["jsonSchemaDialect"] = json!("https://spec.openapis.org/oas/3.1/dialect/base");
    let components = &mut doc["components"];
    if !components.is_object() {
        *components = json!({});
    }
    components["securitySchemes"] = json!({BEARER: {
        "type": "http", "scheme": "bearer",
        "description": "`/api/...`: a login token; `/v1/agents/...`: an agent access token (login tokens also on `GET /api/agent-tokens/mine`); other `/v1/...`: an API key (`gtk_...`)."
    }});
    if !components["schemas"].is_object() {
        components["schemas"] = json!({});
    }
    if let Some(s) = components["schemas"].as_object_mut() {
        s.extend(schemas());
    }
    let mut ids = std::collections::HashSet::new();
    for (method, path) in operations(doc) {
        let op = &mut doc["paths"][&path][&method];
        // Handlers of different modules share names (`list_providers`):
        // operation ids must be unique, so a repeated one takes its tag.
        if let Some(id) = op["operationId"].as_str().map(str::to_string) {
            if !ids.insert(id.clone()) {
                let tag = op["tags"][0]
                    .as_str()
                    .unwrap_or(method.as_str())
                    .replace('-', "_");
                let unique = format!("{tag}_{id}");
                ids.insert(unique.clone());
                op["operationId"] = json!(unique);
            }
        }
        let public = PUBLIC.iter().any(|(m, p)| *m == method && *p == path);
        if let Some(o) = op.as_object_mut() {
            o.remove("security");
        }
        if !public {
            op["security"] = json!([{BEARER: []}]);
        } else if path == "/metrics" {
            // Its token is optional (GATEHOUSE_METRICS_TOKEN).
            op["security"] = json!([{}, {BEARER: []}]);
        }
        error_answers(op, &path, public);
        let Some(b) = bodies(&method, &path) else {
            continue;
        };
        if let Some((media, schema)) = b.request {
            op["requestBody"] = json!({"required": true, "content": {media: {"schema": schema}}});
        }
        if let Some((status, media, schema)) = b.answer {
            let resp = &mut op["responses"][status];
            if resp.get("description").is_none() {
                resp["description"] = json!("Success");
            }
            if media.is_empty() {
                if let Some(o) = resp.as_object_mut() {
                    o.remove("content");
                }
            } else {
                resp["content"] = json!({media: {"schema": schema}});
            }
            if path.ends_with("/chat/completions") {
                resp["content"]["text/event-stream"] = json!({"schema": {"type": "string",
                    "description": "With `stream: true`: `data: {chunk}` messages, then `data: [DONE]`."}});
            }
            if path.ends_with("/responses") {
                resp["content"]["text/event-stream"] = json!({"schema": {"type": "string",
                    "description": "With `stream: true`: `event: <type>` + `data: {type, sequence_number, ...}` messages, from `response.created` to exactly one of `response.completed`, `response.incomplete`, `response.failed`."}});
            }
        }
    }
}
