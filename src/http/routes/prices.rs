//! `/api/admin/prices`: versioned prices per (provider, upstream model)
//! (docs/spend.md). The upstream model is the rest of the path and may hold
//! `/`. A change reaches every server through the catalog invalidation.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::{App, AppState};
use crate::error::{Error, Result};
use crate::http::extract::{AdminUser, ApiJson};
use crate::runtime::Invalidation;
use crate::spend::price::{check_pair, Price, PriceSpec};
use crate::spend::store::PriceSet;

/// Where one pair's price lives: the upstream model is a catch-all.
const PAIR_PATH: &str = "/api/admin/prices/{provider}/{*upstream_model}";

pub fn routes() -> OpenApiRouter<AppState> {
    // Documented with `{upstream_model}`, served with a catch-all (it may
    // hold `/`): the OpenAPI paths are added by hand.
    let (_, paths, _) = routes!(get_price, put_price, delete_price);
    let mut router = OpenApiRouter::new().routes(routes!(list_prices)).route(
        PAIR_PATH,
        get(get_price).put(put_price).delete(delete_price),
    );
    router.get_openapi_mut().paths.paths.extend(paths.paths);
    router
}

fn not_found() -> Error {
    Error::not_found(
        "price_not_found",
        "This provider and upstream model have no current price.",
    )
}

/// Sets a pair's price as PUT does (the rules of the API, TOML and console):
/// a new version unless equal to the current one. The provider must exist.
pub(crate) async fn set_price(
    app: &App,
    provider: &str,
    upstream_model: &str,
    body: &Value,
) -> Result<Price> {
    check_pair(provider, upstream_model)?;
    let spec = PriceSpec::from_json(body)?;
    if !app
        .store
        .list_providers()
        .await?
        .iter()
        .any(|p| p.name == provider)
    {
        return Err(Error::not_found(
            "provider_not_found",
            format!("There is no provider named '{provider}'."),
        ));
    }
    match app.store.put_price(provider, upstream_model, &spec).await? {
        PriceSet::Unchanged(p) => Ok(p),
        PriceSet::Created(p) => {
            app.invalidate(Invalidation::Catalog).await;
            Ok(p)
        }
    }
}

/// Ends a pair's current price now.
pub(crate) async fn end_price(app: &App, provider: &str, upstream_model: &str) -> Result<()> {
    if !app.store.end_price(provider, upstream_model).await? {
        return Err(not_found());
    }
    app.invalidate(Invalidation::Catalog).await;
    Ok(())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct PricesQuery {
    /// `true`: every version, ended ones included.
    history: Option<String>,
    /// Only this provider's prices.
    provider: Option<String>,
}

/// Current prices by provider and upstream model (`?history=true`: every version, by start).
#[utoipa::path(get, path = "/api/admin/prices", tag = "admin", params(PricesQuery),
    responses((status = 200, description = "`[{version, provider, upstream_model, currency, input, output, cache_read, cache_write, reasoning, request, tiers, effective_from, effective_to}]`"),
              (status = 400, description = "validation_error"),
              (status = 403, description = "forbidden")))]
async fn list_prices(
    State(app): State<AppState>,
    _admin: AdminUser,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<Value>>> {
    let q: PricesQuery = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|_| Error::validation("query", "The query string could not be read."))?;
    let history = match q.history.as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(Error::validation(
                "history",
                "'history' must be true or false.",
            ))
        }
    };
    let provider = q.provider.filter(|p| !p.is_empty());
    let currency = app.prices().currency;
    let list = app.store.list_prices(history, provider.as_deref()).await?;
    Ok(Json(list.iter().map(|p| p.view(currency)).collect()))
}

/// The current price of a pair.
#[utoipa::path(get, path = "/api/admin/prices/{provider}/{upstream_model}", tag = "admin",
    params(("provider" = String, Path, description = "The provider's name"),
           ("upstream_model" = String, Path, description = "The model name the provider is sent; the rest of the path, may hold `/`")),
    responses((status = 200, description = "The price object"),
              (status = 403, description = "forbidden"),
              (status = 404, description = "price_not_found")))]
async fn get_price(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path((provider, upstream_model)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let p = app
        .store
        .current_price(&provider, &upstream_model)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(p.view(app.prices().currency)))
}

/// Set a pair's price: amounts are strings, rates per 1,000,000 tokens. An equal body makes no new version.
#[utoipa::path(put, path = "/api/admin/prices/{provider}/{upstream_model}", tag = "admin",
    params(("provider" = String, Path, description = "The provider's name"),
           ("upstream_model" = String, Path, description = "The model name the provider is sent; the rest of the path, may hold `/`")),
    request_body(content = Object, description = "`{input, output, cache_read?, cache_write?, reasoning?, request?, tiers?: [{above_prompt_tokens, input, output, cache_read?, cache_write?, reasoning?}]}`"),
    responses((status = 200, description = "The current version"),
              (status = 400, description = "validation_error (the message names the field)"),
              (status = 403, description = "forbidden"),
              (status = 404, description = "provider_not_found")))]
async fn put_price(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path((provider, upstream_model)): Path<(String, String)>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<Value>> {
    let p = set_price(&app, &provider, &upstream_model, &body).await?;
    Ok(Json(p.view(app.prices().currency)))
}

/// End a pair's current price now: later requests for it are unpriced.
#[utoipa::path(delete, path = "/api/admin/prices/{provider}/{upstream_model}", tag = "admin",
    params(("provider" = String, Path, description = "The provider's name"),
           ("upstream_model" = String, Path, description = "The model name the provider is sent; the rest of the path, may hold `/`")),
    responses((status = 204, description = "Ended"),
              (status = 403, description = "forbidden"),
              (status = 404, description = "price_not_found")))]
async fn delete_price(
    State(app): State<AppState>,
    _admin: AdminUser,
    Path((provider, upstream_model)): Path<(String, String)>,
) -> Result<Response> {
    end_price(&app, &provider, &upstream_model).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
