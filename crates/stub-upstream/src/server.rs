//! Accept loop, routing, script handling common to every route, and the
//! `/_stub/*` control API.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::conn::{Hold, StubListener};
use crate::reply::{error, error_typed, json_response, Flavor};
use crate::{sleep_or_shutdown, Recorded, Script, Shared, DEFAULT_SCRIPT, TEI_SCRIPT_KEY};

const MAX_BODY: usize = 256 * 1024 * 1024;

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let app = Router::new().fallback(handle).with_state(shared);
    let app = app.into_make_service_with_connect_info::<Hold>();
    let _ = axum::serve(StubListener(listener), app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Chat,
    Responses,
    Embeddings,
    OpenAiRerank,
    Models,
    TeiEmbed,
    TeiRerank,
    Health,
    CohereEmbed,
    CohereRerank,
}

impl Route {
    fn find(path: &str) -> Option<(Route, Method)> {
        Some(match path {
            "/v1/chat/completions" => (Route::Chat, Method::POST),
            "/v1/responses" => (Route::Responses, Method::POST),
            "/v1/embeddings" => (Route::Embeddings, Method::POST),
            "/v1/rerank" => (Route::OpenAiRerank, Method::POST),
            "/v1/models" => (Route::Models, Method::GET),
            "/embed" => (Route::TeiEmbed, Method::POST),
            "/rerank" => (Route::TeiRerank, Method::POST),
            "/health" => (Route::Health, Method::GET),
            "/v2/embed" => (Route::CohereEmbed, Method::POST),
            "/v2/rerank" => (Route::CohereRerank, Method::POST),
            _ => return None,
        })
    }

    fn flavor(self) -> Flavor {
        match self {
            Route::TeiEmbed | Route::TeiRerank | Route::Health => Flavor::Tei,
            Route::CohereEmbed | Route::CohereRerank => Flavor::Cohere,
            _ => Flavor::OpenAi,
        }
    }

    fn is_tei(self) -> bool {
        matches!(self, Route::TeiEmbed | Route::TeiRerank)
    }
}

/// The script key of a request: its body's `model`, or [`TEI_SCRIPT_KEY`] on
/// TEI routes.
pub(crate) fn script_key<'a>(path: &str, body: &'a Value) -> Option<&'a str> {
    match Route::find(path) {
        Some((r, _)) if r.is_tei() => Some(TEI_SCRIPT_KEY),
        _ => body.get("model").and_then(Value::as_str),
    }
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return error(
                Flavor::OpenAi,
                StatusCode::BAD_REQUEST,
                &format!("cannot read body: {e}"),
            )
        }
    };
    let path = parts.uri.path();
    if let Some(rest) = path.strip_prefix("/_stub/") {
        return control(&shared, &parts.method, rest, parts.uri.query(), &bytes);
    }
    // An OTLP/HTTP trace collector that accepts and drops (bench/run.sh BENCH_OTLP).
    if path == "/v1/traces" && parts.method == Method::POST {
        return Response::new(Body::empty());
    }
    shared.requests.fetch_add(1, Ordering::Relaxed);
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    if shared.record {
        let rec = Recorded {
            method: parts.method.as_str().to_string(),
            path: path.to_string(),
            query: parts.uri.query().map(str::to_string),
            headers: header_map(&parts.headers),
            body: body.clone(),
            raw_body: String::from_utf8_lossy(&bytes).into_owned(),
        };
        shared.recorded.lock().push(rec);
    }

    if let Some(route) = crate::messages::Route::find(path) {
        let hold = parts
            .extensions
            .get::<ConnectInfo<Hold>>()
            .map(|c| c.0.clone());
        return crate::messages::handle(&shared, route, &parts.method, &body, hold).await;
    }
    let Some((route, method)) = Route::find(path) else {
        return error(
            Flavor::OpenAi,
            StatusCode::NOT_FOUND,
            &format!("stub: no route for {path}"),
        );
    };
    let flavor = route.flavor();
    if parts.method != method {
        return error(
            flavor,
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("stub: {path} expects {method}"),
        );
    }
    match route {
        Route::Health => return Response::new(Body::empty()),
        Route::Models => return models(&shared),
        _ => {}
    }

    let key = if route.is_tei() {
        Some(TEI_SCRIPT_KEY)
    } else {
        body.get("model").and_then(Value::as_str)
    };
    let script_arc = shared.script_for(key);
    let script: &Script = script_arc.as_deref().unwrap_or(&DEFAULT_SCRIPT);

    if script.hang {
        let mut rx = shared.shutdown.clone();
        let _ = rx.wait_for(|stop| *stop).await;
        return error(
            flavor,
            StatusCode::SERVICE_UNAVAILABLE,
            "stub: shutting down",
        );
    }

    let streaming = matches!(route, Route::Chat | Route::Responses)
        && body.get("stream").and_then(Value::as_bool) == Some(true);
    let scripted_error = script.status.is_some();
    if script.delay_ms > 0
        && (!streaming || scripted_error)
        && !sleep_or_shutdown(&shared, script.delay_ms).await
    {
        return error(
            flavor,
            StatusCode::SERVICE_UNAVAILABLE,
            "stub: shutting down",
        );
    }
    if let Some(status) = script.status {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let msg = script.error_message.as_deref().unwrap_or("stub error");
        return error_typed(flavor, status, msg, "server_error");
    }
    if script.garbage && !streaming {
        return garbage();
    }
    if let (Some(text), false) = (&script.body, streaming) {
        return json_text(text.clone());
    }

    match route {
        Route::Chat => {
            let hold = parts
                .extensions
                .get::<ConnectInfo<Hold>>()
                .map(|c| c.0.clone());
            crate::chat::chat(&shared, &body, script, streaming, hold)
        }
        Route::Responses => crate::responses::responses(&shared, &body, script, streaming),
        Route::Embeddings => crate::retrieval::openai_embeddings(&shared, &body),
        Route::OpenAiRerank => crate::retrieval::openai_rerank(&shared, &body),
        Route::TeiEmbed => crate::retrieval::tei_embed(&body),
        Route::TeiRerank => crate::retrieval::tei_rerank(&body),
        Route::CohereEmbed => crate::retrieval::cohere_embed(&shared, &body),
        Route::CohereRerank => crate::retrieval::cohere_rerank(&shared, &body),
        Route::Health | Route::Models => unreachable!("answered above"),
    }
}

fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let v = String::from_utf8_lossy(value.as_bytes());
        out.entry(name.as_str().to_string())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert_with(|| v.into_owned());
    }
    out
}

fn models(shared: &Shared) -> Response {
    let mut names: Vec<String> = shared.scripts.read().keys().cloned().collect();
    names.sort();
    let data: Vec<Value> = names
        .iter()
        .map(|n| json!({"id": n, "object": "model", "created": 0, "owned_by": "stub"}))
        .collect();
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

fn garbage() -> Response {
    json_text("this is not json".into())
}

/// 200 with this text as an `application/json` body.
fn json_text(text: String) -> Response {
    let mut resp = Response::new(Body::from(text));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn control(
    shared: &Shared,
    method: &Method,
    rest: &str,
    query: Option<&str>,
    body: &[u8],
) -> Response {
    let bad = |msg: &str| error(Flavor::OpenAi, StatusCode::BAD_REQUEST, msg);
    match (method, rest) {
        (&Method::POST, "script") => {
            #[derive(serde::Deserialize)]
            struct SetScript {
                model: String,
                #[serde(default)]
                script: Option<Script>,
            }
            match serde_json::from_slice::<SetScript>(body) {
                Ok(s) => {
                    shared.set_script(&s.model, s.script);
                    json_response(StatusCode::OK, &json!({"ok": true}))
                }
                Err(e) => bad(&format!("bad script: {e}")),
            }
        }
        (&Method::DELETE, "scripts") => {
            shared.scripts.write().clear();
            json_response(StatusCode::OK, &json!({"ok": true}))
        }
        (&Method::GET, "requests") => {
            let model = query.and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix("model="))
                    .map(percent_decode)
            });
            let recorded = match model {
                Some(m) => shared.requests_for_model(&m),
                None => shared.recorded.lock().clone(),
            };
            json_response(StatusCode::OK, &recorded)
        }
        (&Method::DELETE, "requests") => {
            shared.recorded.lock().clear();
            json_response(StatusCode::OK, &json!({"ok": true}))
        }
        (&Method::GET, "stats") => json_response(StatusCode::OK, &shared.stats()),
        _ => error(
            Flavor::OpenAi,
            StatusCode::NOT_FOUND,
            &format!("stub: no control route {method} /_stub/{rest}"),
        ),
    }
}

/// Decode `%XX` escapes and `+` (query-string form).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_decode_handles_escapes_plus_and_stray_percent() {
        assert_eq!(percent_decode("a%2Fb+c"), "a/b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("x%4"), "x%4");
        assert_eq!(percent_decode("%e2%9c%93"), "\u{2713}");
    }
}
