//! The HTTP surface, by the steps a request takes: [`serve`] (connections),
//! [`edge`] (request id, access line, body limit, trace, error shape,
//! metrics), the router and its dispatch (here), [`extract`] (bodies and
//! credentials), [`routes`] (thin handlers calling the domain), with
//! [`admission`] (limits) and [`answers`] (relayed answers, routing headers)
//! shared by the model routes, and [`console`] (the web console).

pub mod admission;
pub mod answers;
pub mod console;
pub mod edge;
pub mod extract;
pub mod openapi;
pub mod routes;
pub mod serve;

use std::future::Future;

use axum::extract::Request;
use axum::middleware;
use axum::response::Response;
use axum::Router;
use futures_util::FutureExt;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::app::AppState;
use crate::error::{Error, ErrorKind};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gatehouse",
        description = "A gateway for language models: agent apps and OpenAI-compatible backends."
    ),
    components(schemas(crate::http::routes::users::LoginForm))
)]
pub struct ApiDoc;

/// Every route, registered through `OpenApiRouter` so `/openapi.json` is
/// generated from the same code that serves.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(routes::system::routes())
        .merge(routes::users::routes())
        .merge(routes::admin::routes())
        .merge(routes::admin_models::routes())
        .merge(routes::admin_mcp::routes())
        .merge(routes::usage::routes())
        .merge(routes::prices::routes())
        .merge(routes::v1::routes())
        .merge(routes::messages::routes())
        .merge(routes::agents::routes())
        .merge(routes::agent_data::routes())
        .merge(routes::agent_chat::routes())
        .merge(routes::responses::routes())
        .merge(routes::agui::routes())
        .merge(routes::agent_messages::routes())
        .merge(routes::signins::routes())
        .merge(routes::limits::routes())
        .merge(routes::mcp::routes())
        .merge(routes::sso::routes())
}

/// The document `/openapi.json` serves (see [`openapi`]).
pub fn openapi_document() -> serde_json::Value {
    let (_, mut api) = routes().split_for_parts();
    api.info.version = env!("CARGO_PKG_VERSION").to_string();
    let mut doc = serde_json::to_value(&api).unwrap_or_default();
    openapi::complete(&mut doc);
    doc
}

/// What each connection calls: the model routes dispatched by their exact
/// path before the router (its route lookup, boxed service clones and
/// middleware plumbing cost a chat request about 14 allocations and a few
/// µs; see bench/results/HISTORY.md), inside the same [`edge`]; every other
/// request goes through the router.
#[derive(Clone)]
pub struct Dispatch {
    router: Router,
    app: AppState,
}

impl Dispatch {
    pub fn new(app: AppState) -> Dispatch {
        Dispatch {
            router: router(app.clone()),
            app,
        }
    }

    pub fn call(&self, req: Request) -> impl Future<Output = Response> + Send + 'static {
        use futures_util::future::Either;
        match direct_route(&req) {
            Some((route, handler)) => {
                let app = self.app.clone();
                Either::Left(edge::edged(app.clone(), req, Some(route), move |req| {
                    handler(req, app)
                }))
            }
            None => Either::Right(
                tower::ServiceExt::oneshot(self.router.clone(), req)
                    .map(|r| r.unwrap_or_else(|never| match never {})),
            ),
        }
    }
}

/// A route's handler called without the router.
pub(crate) type Direct =
    fn(Request, AppState) -> std::pin::Pin<Box<dyn Future<Output = Response> + Send>>;

/// The route template and handler of a request [`Dispatch`] serves itself.
/// Only exact paths and `POST`: anything else (another method, a trailing
/// slash) goes to the router, which answers it as before.
fn direct_route(req: &Request) -> Option<(&'static str, Direct)> {
    if req.method() != axum::http::Method::POST {
        return None;
    }
    routes::v1::direct_route(req.uri().path())
        .or_else(|| routes::messages::direct_route(req.uri().path()))
        .or_else(|| routes::responses::direct_route(req))
        .or_else(|| routes::agent_chat::direct_route(req))
}

pub fn router(state: AppState) -> Router {
    let (router, _) = routes().split_for_parts();
    let api = std::sync::Arc::new(openapi_document());
    router
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let api = std::sync::Arc::clone(&api);
                async move { axum::Json(api.as_ref().clone()) }
            }),
        )
        .merge(console::router())
        .fallback(|| async { Error::not_found("not_found", "There is no such route.") })
        .method_not_allowed_fallback(|| async {
            Error::new(
                ErrorKind::MethodNotAllowed,
                "method_not_allowed",
                "This route does not take that method.",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), edge::edge))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template of the route `Dispatch` serves itself, or `None` for the router.
    fn direct(method: &str, path: &str) -> Option<&'static str> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .expect("a request");
        direct_route(&req).map(|(route, _)| route)
    }

    #[test]
    fn model_and_agent_chat_routes_skip_the_router_and_their_near_misses_do_not() {
        for path in [
            "/v1/chat/completions",
            "/v1/embeddings",
            "/v1/rerank",
            "/v1/messages",
            "/v1/messages/count_tokens",
        ] {
            assert_eq!(direct("POST", path), Some(path));
        }
        assert_eq!(
            direct("POST", "/v1/messages?beta=true"),
            Some("/v1/messages")
        );
        let agent = "/v1/agents/{agent}/chat/completions";
        assert_eq!(
            direct("POST", "/v1/agents/bot@acme/chat/completions"),
            Some(agent)
        );
        assert_eq!(
            direct("POST", "/v1/agents/bot%40acme/chat/completions"),
            Some(agent)
        );
        for (method, path) in [
            ("GET", "/v1/chat/completions"),
            ("PUT", "/v1/embeddings"),
            ("POST", "/v1/chat/completions/"),
            ("POST", "/v1/chat/completion"),
            ("POST", "/v1/rerank/x"),
            ("GET", "/v1/messages"),
            ("POST", "/v1/messages/"),
            ("POST", "/v1/models"),
            ("GET", "/v1/agents/bot@acme/chat/completions"),
            ("POST", "/v1/agents/bot@acme/chat/completions/"),
            ("POST", "/v1/agents/bot@acme/manifest"),
            ("POST", "/v1/agents//chat/completions"),
            ("POST", "/v1/agents/a/b/chat/completions"),
            ("POST", "/v1/agents/%FF/chat/completions"),
        ] {
            assert_eq!(direct(method, path), None, "{method} {path}");
        }
    }
}
