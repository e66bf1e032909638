//! `/openapi.json` against the contract ("Operations" → "OpenAPI"): every
//! route with its method, parameters where they are, the bearer scheme on
//! every route that needs a credential, a schema for every JSON body.
//! (Validation as OpenAPI 3.1 and of real answers against the schemas:
//! tests/python/test_openapi.py.)

use crate::common;

use std::collections::BTreeSet;

use common::models::env;
use common::spawn_app;
use serde_json::Value;

/// Every route of the contract, as (method, path template). A route added to
/// the server must be added here (and to the contract), documented with
/// `#[utoipa::path]` and given its bodies in `src/http/openapi.rs`.
const CONTRACT_ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/api/version"),
    ("post", "/api/auth/jwt/login"),
    ("get", "/api/users/me"),
    ("post", "/api/api-keys"),
    ("get", "/api/api-keys"),
    ("patch", "/api/api-keys/{id}"),
    ("delete", "/api/api-keys/{id}"),
    ("get", "/api/api-keys/{id}/limits"),
    ("post", "/api/admin/users"),
    ("get", "/api/admin/users"),
    ("patch", "/api/admin/users/{id}"),
    ("get", "/api/admin/users/{id}/limits"),
    ("get", "/api/admin/agents/{address}/limits"),
    ("post", "/api/admin/providers"),
    ("get", "/api/admin/providers"),
    ("get", "/api/admin/providers/{name}"),
    ("delete", "/api/admin/providers/{name}"),
    ("patch", "/api/admin/providers/{name}"),
    ("post", "/api/admin/models"),
    ("get", "/api/admin/models"),
    ("get", "/api/admin/models/{id}"),
    ("patch", "/api/admin/models/{id}"),
    ("delete", "/api/admin/models/{id}"),
    ("post", "/api/admin/agents"),
    ("get", "/api/admin/agents"),
    ("get", "/api/admin/agents/{address}"),
    ("patch", "/api/admin/agents/{address}"),
    ("get", "/api/admin/agents/{address}/tools"),
    ("post", "/api/admin/agents/{address}/tools/{name}/accept"),
    ("post", "/api/admin/agents/{address}/tools/{name}/reject"),
    ("get", "/api/admin/agents/{address}/events"),
    ("get", "/api/admin/agents/{address}/approvals"),
    ("post", "/api/admin/agents/{address}/approvals/{id}"),
    ("get", "/api/admin/sign-ins"),
    ("delete", "/api/admin/sign-ins/{device_id}"),
    ("get", "/api/admin/usage"),
    ("get", "/api/admin/usage/records"),
    ("get", "/api/admin/prices"),
    ("get", "/api/admin/prices/{provider}/{upstream_model}"),
    ("put", "/api/admin/prices/{provider}/{upstream_model}"),
    ("delete", "/api/admin/prices/{provider}/{upstream_model}"),
    ("post", "/api/admin/sso"),
    ("get", "/api/admin/sso"),
    ("get", "/api/admin/sso/{name}"),
    ("patch", "/api/admin/sso/{name}"),
    ("delete", "/api/admin/sso/{name}"),
    ("post", "/api/admin/mcp-servers"),
    ("get", "/api/admin/mcp-servers"),
    ("get", "/api/admin/mcp-servers/{name}"),
    ("patch", "/api/admin/mcp-servers/{name}"),
    ("delete", "/api/admin/mcp-servers/{name}"),
    ("get", "/api/admin/mcp/calls"),
    ("get", "/api/auth/sso"),
    ("get", "/api/auth/sso/{name}/authorize"),
    ("get", "/api/auth/sso/{name}/callback"),
    ("post", "/api/auth/sso/token"),
    ("post", "/api/agent-tokens"),
    ("post", "/api/agent-tokens/refresh"),
    ("get", "/api/agent-tokens/mine"),
    ("delete", "/api/agent-tokens/{device_id}"),
    ("get", "/v1/agents/{agent}/profile"),
    ("put", "/v1/agents/{agent}/manifest"),
    ("post", "/v1/agents/{agent}/chat/completions"),
    ("post", "/v1/agents/{agent}/ag-ui"),
    ("post", "/v1/agents/{agent}/approvals/{id}"),
    ("post", "/v1/agents/{agent}/events"),
    ("get", "/v1/models"),
    ("post", "/v1/chat/completions"),
    ("post", "/v1/embeddings"),
    ("post", "/v1/rerank"),
    ("post", "/v1/responses"),
    ("get", "/v1/responses/{id}"),
    ("delete", "/v1/responses/{id}"),
    ("get", "/v1/responses/{id}/input_items"),
    ("post", "/v1/responses/{id}/cancel"),
    ("post", "/v1/agents/{agent}/responses"),
    ("post", "/v1/messages"),
    ("post", "/v1/messages/count_tokens"),
    ("post", "/v1/agents/{agent}/messages"),
    ("post", "/v1/agents/{agent}/messages/count_tokens"),
    ("post", "/v1/agents/{agent}/v1/messages"),
    ("post", "/v1/agents/{agent}/v1/messages/count_tokens"),
    ("post", "/mcp"),
    ("delete", "/mcp"),
    ("get", "/mcp"),
    ("post", "/mcp/{server}"),
    ("delete", "/mcp/{server}"),
    ("get", "/mcp/{server}"),
    ("get", "/api/admin/mcp-servers/{name}/tools"),
];

/// The routes the contract lists as taking no credential.
const CREDENTIAL_FREE: &[(&str, &str)] = &[
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
    ("get", "/mcp"),
    ("get", "/mcp/{server}"),
];

fn ops(doc: &Value) -> BTreeSet<(String, String)> {
    gatehouse::http::openapi::operations(doc)
        .into_iter()
        .collect()
}

fn path_params(path: &str) -> BTreeSet<String> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        .map(str::to_string)
        .collect()
}

/// Follows `$ref` into `components`.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("dangling $ref {r}")),
        None => v,
    }
}

#[tokio::test]
async fn openapi_lists_exactly_the_routes_of_the_contract_with_their_methods() {
    let app = spawn_app().await;
    let doc = app.openapi().await;
    let want: BTreeSet<(String, String)> = CONTRACT_ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let have = ops(&doc);
    let missing: Vec<_> = want.difference(&have).collect();
    let extra: Vec<_> = have.difference(&want).collect();
    assert!(
        missing.is_empty(),
        "routes of the contract missing: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "documented routes the contract lacks: {extra:?}"
    );
    assert!(doc["paths"].get("/openapi.json").is_none());
    let mut ids = BTreeSet::new();
    for (method, path) in &have {
        let id = doc["paths"][path][method]["operationId"].as_str().unwrap();
        assert!(
            ids.insert(id),
            "operationId {id} is not unique ({method} {path})"
        );
    }
}

/// Each documented route is one the server serves: a request with its method
/// reaches a handler, not the router's "no such route" or "wrong method".
#[tokio::test]
async fn every_documented_route_is_served_with_its_method() {
    let app = spawn_app().await;
    let doc = app.openapi().await;
    for (method, path) in ops(&doc) {
        let concrete = path_params(&path)
            .iter()
            .fold(path.clone(), |p, n| p.replace(&format!("{{{n}}}"), "x"));
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let resp = app
            .client
            .request(m, app.u(&concrete))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        let code = body
            .pointer("/detail/code")
            .or_else(|| body.pointer("/error/code"))
            .and_then(Value::as_str)
            .unwrap_or("");
        // GET on /mcp is served, by a 405 with `Allow: POST, DELETE` (no
        // server-sent stream): the router's 405 has no JSON-RPC body.
        let mcp_get = method == "get" && body["jsonrpc"] == "2.0";
        assert!(mcp_get || status != 405, "{method} {path}: {body}");
        assert!(
            !(status == 404 && code == "not_found"),
            "{method} {path} is documented but not served: {body}"
        );
    }
}

/// A route registered outside `routes!` would be served but not documented.
#[test]
fn api_routes_are_registered_only_through_documented_handlers() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let plain = text.matches(".route(").count();
        // src/http/mod.rs serves /openapi.json itself (not a route of the document).
        let allowed = usize::from(path.ends_with("mod.rs"));
        assert!(
            plain <= allowed,
            "{} registers a route with .route(): use #[utoipa::path] and routes!",
            path.display()
        );
    }
}

#[tokio::test]
async fn query_parameters_are_in_query_and_path_parameters_in_path() {
    let app = spawn_app().await;
    let doc = app.openapi().await;
    for (method, path) in ops(&doc) {
        let op = &doc["paths"][&path][&method];
        let params: Vec<&Value> = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| resolve(&doc, p))
            .collect();
        let declared_in_path: BTreeSet<String> = params
            .iter()
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(declared_in_path, path_params(&path), "{method} {path}");
        for p in &params {
            let place = p["in"].as_str().unwrap();
            assert!(
                ["path", "query", "header"].contains(&place),
                "{method} {path}: {p}"
            );
            if place == "path" {
                assert_eq!(p["required"], true, "{method} {path}: {p}");
            }
        }
    }
    let usage = &doc["paths"]["/api/admin/usage"]["get"]["parameters"];
    let names: BTreeSet<(&str, &str)> = usage
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["in"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([("from", "query"), ("to", "query"), ("group_by", "query")])
    );
    let signins = &doc["paths"]["/api/admin/sign-ins"]["get"]["parameters"];
    assert!(signins
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["in"] == "query"));
}

#[tokio::test]
async fn every_route_needing_a_credential_names_the_bearer_scheme_and_the_others_do_not() {
    let app = spawn_app().await;
    let doc = app.openapi().await;
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    let bearer: Vec<&String> = schemes
        .iter()
        .filter(|(_, s)| s["type"] == "http" && s["scheme"] == "bearer")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(bearer.len(), 1, "{schemes:?}");
    let name = bearer[0];
    for (method, path) in ops(&doc) {
        let op = &doc["paths"][&path][&method];
        let alternatives: Vec<&Value> = op
            .get("security")
            .or_else(|| doc.get("security"))
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let optional = alternatives.is_empty()
            || alternatives
                .iter()
                .any(|a| a.as_object().is_some_and(|o| o.is_empty()));
        let names_bearer = alternatives.iter().any(|a| a.get(name.as_str()).is_some());
        if CREDENTIAL_FREE.contains(&(method.as_str(), path.as_str())) {
            assert!(optional, "{method} {path} must not require a credential");
        } else {
            assert!(
                names_bearer && !optional,
                "{method} {path} must require the bearer scheme"
            );
        }
    }
}

#[tokio::test]
async fn every_json_body_and_success_answer_has_a_schema_naming_the_contract_fields() {
    let app = spawn_app().await;
    let doc = app.openapi().await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(
        gatehouse::http::openapi::undescribed(&doc).is_empty(),
        "{:?}",
        gatehouse::http::openapi::undescribed(&doc)
    );
    for (method, path) in ops(&doc) {
        let op = &doc["paths"][&path][&method];
        if let Some(content) = op
            .pointer("/requestBody/content")
            .and_then(Value::as_object)
        {
            for (media, m) in content {
                assert!(m.get("schema").is_some(), "{method} {path} {media}");
            }
        }
        let responses = op["responses"].as_object().unwrap();
        // Gatehouse stores no responses: those routes only answer 404.
        // GET on /mcp answers only 405 (no server-sent stream).
        let never_succeeds = path.starts_with("/v1/responses/")
            || (method == "get" && (path == "/mcp" || path == "/mcp/{server}"));
        assert!(
            never_succeeds || responses.keys().any(|s| s.starts_with('2') || s == "302"),
            "{method} {path} has no success answer"
        );
        for (status, resp) in responses {
            if !status.starts_with('2') {
                continue;
            }
            for (media, m) in resp["content"].as_object().into_iter().flatten() {
                let schema = m
                    .get("schema")
                    .unwrap_or_else(|| panic!("{method} {path} {status} {media}"));
                resolve(&doc, schema);
            }
        }
    }
    // Spot checks of the contract's fields.
    let schema = |name: &str| doc["components"]["schemas"][name].clone();
    let required = |name: &str| -> BTreeSet<String> {
        schema(name)["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    for (name, fields) in [
        (
            "LoginToken",
            &["access_token", "token_type", "expires_in"][..],
        ),
        ("User", &["id", "email", "is_admin"]),
        (
            "NewApiKeyAnswer",
            &["id", "name", "key", "created_at", "expires_at", "models"],
        ),
        (
            "AgentTokens",
            &[
                "access_token",
                "token_type",
                "expires_in",
                "refresh_token",
                "refresh_expires_in",
                "device_id",
                "agent",
            ],
        ),
        ("ManifestResult", &["seen_before", "manifest_hash"]),
        ("EventsAccepted", &["accepted", "duplicates"]),
        ("Embeddings", &["object", "data", "model", "usage"]),
        ("Rerank", &["id", "model", "results", "usage", "meta"]),
        (
            "UsageRow",
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
        ),
        (
            "Price",
            &[
                "version",
                "provider",
                "upstream_model",
                "currency",
                "input",
                "output",
                "cache_read",
                "cache_write",
                "reasoning",
                "request",
                "tiers",
                "effective_from",
                "effective_to",
            ],
        ),
        (
            "UsageRecord",
            &[
                "request_id",
                "upstream_model",
                "cached_tokens",
                "cache_write_tokens",
                "reasoning_tokens",
                "cost",
                "cost_status",
                "price_version",
                "currency",
            ],
        ),
    ] {
        let have = required(name);
        for f in fields {
            assert!(have.contains(*f), "{name} lacks {f}");
        }
    }
    let login = &doc["paths"]["/api/auth/jwt/login"]["post"]["requestBody"]["content"];
    assert!(
        login.get("application/x-www-form-urlencoded").is_some(),
        "{login}"
    );
    assert!(login.get("application/json").is_none());
    let input = &schema("EmbeddingsRequest")["properties"]["input"]["anyOf"];
    assert_eq!(input[0]["type"], "string");
    assert_eq!(input[1]["type"], "array");
    let docs = &schema("RerankRequest")["properties"]["documents"]["items"]["anyOf"];
    assert_eq!(docs[0]["type"], "string");
    assert_eq!(docs[1]["required"][0], "text");
    for open in [
        "ChatCompletionRequest",
        "EmbeddingsRequest",
        "RerankRequest",
    ] {
        assert!(
            schema(open).get("additionalProperties").is_none(),
            "{open} must allow unknown fields"
        );
    }
}

#[tokio::test]
async fn openapi_document_is_3_1_and_lists_the_routes() {
    let app = spawn_app().await;
    let v = app.openapi().await;
    assert!(v["openapi"].as_str().unwrap().starts_with("3.1"));
    for p in [
        "/api/auth/jwt/login",
        "/api/api-keys",
        "/api/admin/users",
        "/api/admin/providers",
        "/v1/models",
    ] {
        assert!(v["paths"].get(p).is_some(), "missing {p}");
    }
}

#[tokio::test]
async fn openapi_lists_the_agent_and_sign_in_routes() {
    let app = spawn_app().await;
    let v = app.openapi().await;
    for p in [
        "/api/agent-tokens",
        "/api/agent-tokens/refresh",
        "/api/agent-tokens/mine",
        "/api/agent-tokens/{device_id}",
        "/api/admin/agents",
        "/api/admin/agents/{address}",
        "/api/admin/sign-ins",
        "/api/admin/sign-ins/{device_id}",
        "/v1/agents/{agent}/profile",
    ] {
        assert!(v["paths"].get(p).is_some(), "{p}");
    }
}

#[tokio::test]
async fn openapi_lists_the_model_routes_and_usage() {
    let env = env().await;
    let v = env.app.openapi().await;
    for p in [
        "/v1/chat/completions",
        "/v1/embeddings",
        "/v1/rerank",
        "/api/admin/usage",
    ] {
        assert!(v["paths"].get(p).is_some(), "missing {p}");
    }
}
