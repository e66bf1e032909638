//! Request extractors: bodies read under the route's size limit and parsed
//! into typed values with clear errors, and the three kinds of credential.

pub mod agent;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use bytes::{Bytes, BytesMut};
use http_body::Body as _;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;

use crate::app::AppState;
use crate::auth::tokens::{self, TokenError};
use crate::auth::KeyInfo;
use crate::error::{Error, Result};
use crate::http::edge::access::AccessNote;
use crate::users::UserInfo;

/// The body limit of the matched route group, set by `body_limits`.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit {
    pub bytes: usize,
    pub code: &'static str,
    /// How long the body may take to arrive (`GATEHOUSE_BODY_TIMEOUT_S`).
    pub timeout: std::time::Duration,
}

pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A refused body is read and dropped up to this many times its limit in
/// all (contract, "Mends (round 3)"): a client that sends its whole body
/// before reading gets the 413, and the connection serves on. A longer body
/// is not read; the connection closes after the answer, lingering (see
/// `http::serve`).
const DISCARD_UP_TO: usize = 4;

/// The request's body, under the route's [`BodyLimit`]: 413 past the limit
/// (by `Content-Length` or as it arrives), 408 when it is late.
pub async fn read_body(req: Request) -> Result<Bytes> {
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .copied()
        .unwrap_or(BodyLimit {
            bytes: 1024 * 1024,
            code: "payload_too_large",
            timeout: DEFAULT_BODY_TIMEOUT,
        });
    let deadline = tokio::time::Instant::now() + limit.timeout;
    let too_large = || {
        Error::new(
            crate::error::ErrorKind::TooLarge,
            limit.code,
            format!(
                "The request body is larger than the limit of {} bytes.",
                limit.bytes
            ),
        )
    };
    let discard_up_to = limit.bytes.saturating_mul(DISCARD_UP_TO);
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut body = req.into_body();
    if let Some(len) = declared {
        if len > limit.bytes {
            if len <= discard_up_to {
                discard(&mut body, discard_up_to, deadline).await;
            }
            return Err(too_large());
        }
    }
    let collected = {
        let mut collect = std::pin::pin!(collect_within(&mut body, limit.bytes));
        // A body that came with its head needs no timer; one still arriving
        // gets one, counted from when reading began.
        match futures_util::FutureExt::now_or_never(collect.as_mut()) {
            Some(r) => r,
            None => tokio::time::timeout_at(deadline, collect)
                .await
                .map_err(|_| {
                    Error::new(
                        crate::error::ErrorKind::Timeout,
                        "request_timeout",
                        format!(
                            "The request body did not arrive within {} seconds.",
                            limit.timeout.as_secs()
                        ),
                    )
                })?,
        }
    };
    match collected {
        Ok(Within::Whole(bytes)) => Ok(bytes),
        Ok(Within::Over(seen)) => {
            discard(&mut body, discard_up_to.saturating_sub(seen), deadline).await;
            Err(too_large())
        }
        Err(_) => Err(Error::validation(
            "body",
            "The request body could not be read.",
        )),
    }
}

/// What [`collect_within`] read.
enum Within {
    Whole(Bytes),
    /// More than the limit arrived: this many bytes so far.
    Over(usize),
}

/// The body's bytes, or [`Within::Over`] as soon as more than `limit`
/// arrived. A body in one piece is handed on without a copy; one in several
/// is copied once into a buffer of its announced size.
async fn collect_within(body: &mut Body, limit: usize) -> std::result::Result<Within, axum::Error> {
    let mut first = Bytes::new();
    let mut more: Option<BytesMut> = None;
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        // Trailers carry no body bytes.
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        seen += data.len();
        if seen > limit {
            return Ok(Within::Over(seen));
        }
        if let Some(buf) = more.as_mut() {
            buf.extend_from_slice(&data);
        } else if first.is_empty() {
            first = data;
        } else {
            let hint = body.size_hint().upper().unwrap_or(0);
            let room = usize::try_from(hint).unwrap_or(limit).min(limit - seen);
            let mut buf = BytesMut::with_capacity(seen + room);
            buf.extend_from_slice(&first);
            buf.extend_from_slice(&data);
            more = Some(buf);
        }
    }
    Ok(Within::Whole(match more {
        Some(buf) => buf.freeze(),
        None => first,
    }))
}

/// Reads and drops the rest of a refused body, if it ends within `up_to`
/// more bytes and by `deadline`; else stops there (the connection then
/// closes after the answer).
async fn discard(body: &mut Body, up_to: usize, deadline: tokio::time::Instant) {
    let mut left = up_to;
    let _ = tokio::time::timeout_at(deadline, async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                match left.checked_sub(data.len()) {
                    Some(l) => left = l,
                    None => return,
                }
            }
        }
    })
    .await;
}

pub use crate::wire::json::parse_json;

pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Error;
    async fn from_request(req: Request, _state: &S) -> Result<Self> {
        let bytes = read_body(req).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// A form-encoded body (the login route).
pub struct ApiForm<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiForm<T> {
    type Rejection = Error;
    async fn from_request(req: Request, _state: &S) -> Result<Self> {
        let is_form = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("application/x-www-form-urlencoded")
            });
        if !is_form {
            return Err(Error::validation(
                "body",
                "Send a form-encoded body (Content-Type: application/x-www-form-urlencoded) with username and password.",
            ));
        }
        let bytes = read_body(req).await?;
        serde_urlencoded::from_bytes(&bytes)
            .map(ApiForm)
            .map_err(|e| Error::validation("body", format!("The form could not be read: {e}.")))
    }
}

pub fn bearer(parts: &Parts) -> Option<&str> {
    let v = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A user authenticated by a login token (`/api/...`).
pub struct LoginUser(pub Arc<UserInfo>);

pub async fn login_user(state: &AppState, token: &str) -> Result<Arc<UserInfo>> {
    if token.starts_with("gtk_") {
        return Err(Error::unauthorized(
            "invalid_token",
            "An API key cannot be used here; send a login token.",
        ));
    }
    let claims = state.auth.tokens.verify(token).map_err(|e| match e {
        TokenError::Expired => {
            Error::unauthorized("token_expired", "The token has expired; log in again.")
        }
        TokenError::Invalid => {
            Error::unauthorized("invalid_token", "The token is not valid; log in again.")
        }
    })?;
    if claims.typ != tokens::LOGIN {
        return Err(Error::unauthorized(
            "invalid_token",
            "An agent access token cannot be used here; send a login token.",
        ));
    }
    match state.user(&claims.sub).await? {
        Some(u) if u.is_active && claims.iat_ms >= u.tokens_valid_after => Ok(u),
        Some(u) if u.is_active => Err(Error::unauthorized(
            "invalid_token",
            "The password changed after this token was issued; log in again.",
        )),
        _ => Err(Error::unauthorized(
            "invalid_token",
            "The token's user is disabled or gone.",
        )),
    }
}

impl FromRequestParts<AppState> for LoginUser {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let token = bearer(parts).ok_or_else(|| {
            Error::unauthorized(
                "invalid_token",
                "Send the login token as Authorization: Bearer <token>.",
            )
        })?;
        let u = login_user(state, token).await?;
        AccessNote::note(&parts.extensions, |f| f.user_id = Some(u.id.clone()));
        Ok(LoginUser(u))
    }
}

/// An administrator, by login token.
pub struct AdminUser(pub Arc<UserInfo>);

impl FromRequestParts<AppState> for AdminUser {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let LoginUser(u) = LoginUser::from_request_parts(parts, state).await?;
        if !u.is_admin {
            return Err(Error::admin_only());
        }
        Ok(AdminUser(u))
    }
}

/// A backend authenticated by an API key (`/v1/models`, chat, embeddings, rerank).
pub struct ApiKeyAuth {
    pub key: Arc<KeyInfo>,
    pub user: Arc<UserInfo>,
}

impl ApiKeyAuth {
    pub fn check_model(&self, model: &str) -> Result<()> {
        if self.key.allows(model) {
            Ok(())
        } else {
            Err(Error::forbidden(
                "model_not_allowed",
                format!("This API key may not use the model '{model}'."),
            )
            .with_param("model"))
        }
    }
}

fn invalid_key(msg: &str) -> Error {
    Error::unauthorized("invalid_api_key", msg.to_string())
}

impl FromRequestParts<AppState> for ApiKeyAuth {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let token = bearer(parts)
            .ok_or_else(|| invalid_key("Send an API key as Authorization: Bearer <API_KEY>."))?;
        if !token.starts_with("gtk_") {
            return Err(invalid_key("The API key is not valid."));
        }
        let hash = crate::auth::sha256_hex(token);
        let key = state
            .auth
            .api_keys
            .get_or_load(hash.as_str(), || async {
                let row = state.store.api_key_by_hash(&hash).await?;
                Ok::<_, sqlx::Error>(
                    row.filter(|r| crate::auth::ct_eq(&r.key_hash, &hash))
                        .map(|r| Arc::new(KeyInfo::from_row(&r))),
                )
            })
            .await?
            .ok_or_else(|| invalid_key("The API key is not valid."))?;
        let now = crate::store::now_ms();
        if key.expires_at.is_some_and(|e| now >= e) {
            return Err(invalid_key("The API key has expired."));
        }
        let user = match state.user(&key.user_id).await? {
            Some(u) if u.is_active => u,
            _ => return Err(invalid_key("The API key's user is disabled.")),
        };
        state.auth.last_used.api_keys.insert(key.id.clone(), now);
        AccessNote::note(&parts.extensions, |f| {
            f.user_id = Some(user.id.clone());
            f.api_key_id = Some(key.id.clone());
        });
        Ok(ApiKeyAuth { key, user })
    }
}

/// The client's address for the login throttle (contract, "Hardening" →
/// "Login"): the connection's peer, unless that peer is a trusted proxy;
/// then the rightmost `X-Forwarded-For` address that is not a trusted proxy.
pub struct ClientAddr(pub std::net::IpAddr);

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip())
            .ok_or_else(|| Error::internal("no peer address on the request"))?;
        let forwarded = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok());
        Ok(ClientAddr(client_addr(
            peer,
            forwarded,
            &state.settings.trusted_proxies,
        )))
    }
}

/// See [`ClientAddr`]. `forwarded`: the `X-Forwarded-For` header values in
/// the order received (each a comma-separated list, nearest hop last).
pub fn client_addr<'a>(
    peer: std::net::IpAddr,
    forwarded: impl Iterator<Item = &'a str>,
    trusted: &[ipnet::IpNet],
) -> std::net::IpAddr {
    let is_trusted = |ip: &std::net::IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = forwarded.flat_map(|v| v.split(',')).collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let hop = hop.trim();
        let ip = hop
            .parse::<std::net::IpAddr>()
            .ok()
            .or_else(|| hop.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()));
        // An entry we cannot read ends the chain: trust stops at what we know.
        let Some(ip) = ip else { break };
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_util::StreamExt;

    use super::*;

    const LIMIT: usize = 1000;

    /// A request whose body comes in pieces of these sizes, optionally with
    /// a `Content-Length`; and a count of the bytes read from it.
    fn request(pieces: &[usize], declared: Option<usize>) -> (Request, Arc<AtomicUsize>) {
        let read = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&read);
        let chunks: Vec<usize> = pieces.to_vec();
        let stream = futures_util::stream::iter(chunks).map(move |n| {
            counted.fetch_add(n, Ordering::SeqCst);
            Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; n]))
        });
        let mut b = Request::builder().method("POST").uri("/v1/embeddings");
        if let Some(len) = declared {
            b = b.header("content-length", len);
        }
        let mut req = b.body(Body::from_stream(stream)).expect("a request");
        req.extensions_mut().insert(BodyLimit {
            bytes: LIMIT,
            code: "payload_too_large",
            timeout: DEFAULT_BODY_TIMEOUT,
        });
        (req, read)
    }

    #[tokio::test]
    async fn a_body_at_the_limit_in_pieces_is_read_whole() {
        let (req, _) = request(&[400, 1, 599], None);
        let bytes = read_body(req).await.map_err(|e| e.code).unwrap();
        assert_eq!(bytes.len(), LIMIT);
        let (req, _) = request(&[LIMIT], Some(LIMIT));
        assert_eq!(
            read_body(req).await.map_err(|e| e.code).unwrap().len(),
            LIMIT
        );
    }

    #[tokio::test]
    async fn a_body_one_byte_over_is_refused_and_read_to_its_end() {
        for declared in [None, Some(LIMIT + 1)] {
            let (req, read) = request(&[600, 401], declared);
            let e = read_body(req).await.unwrap_err();
            assert_eq!(e.status(), 413);
            assert_eq!(e.code, "payload_too_large");
            assert_eq!(read.load(Ordering::SeqCst), LIMIT + 1, "{declared:?}");
        }
    }

    #[tokio::test]
    async fn a_refused_body_is_read_up_to_four_times_the_limit_and_no_further() {
        // At 4x: read to its end, so the connection can serve on.
        let (req, read) = request(&[LIMIT; 4], None);
        assert_eq!(read_body(req).await.unwrap_err().status(), 413);
        assert_eq!(read.load(Ordering::SeqCst), 4 * LIMIT);
        // Past 4x as it arrives: reading stops at the piece that goes past.
        let (req, read) = request(&[LIMIT; 10], None);
        assert_eq!(read_body(req).await.unwrap_err().status(), 413);
        assert_eq!(read.load(Ordering::SeqCst), 5 * LIMIT);
        // Past 4x by its `Content-Length`: not read at all.
        let (req, read) = request(&[LIMIT; 5], Some(4 * LIMIT + 1));
        assert_eq!(read_body(req).await.unwrap_err().status(), 413);
        assert_eq!(read.load(Ordering::SeqCst), 0);
    }
}
