//! Cache invalidation across servers. On PostgreSQL every invalidation is
//! sent with NOTIFY and applied by each server's listener; SQLite has one
//! server, so there is nobody to tell.

use crate::runtime::Invalidation;
use crate::store::{Backend, Store};

pub const CHANNEL: &str = "gatehouse_invalidate";

pub fn encode(inv: &Invalidation) -> String {
    match inv {
        Invalidation::User(id) => format!("user:{id}"),
        Invalidation::ApiKey(h) => format!("key:{h}"),
        Invalidation::SignIn(d) => format!("signin:{d}"),
        Invalidation::Agent(a) => format!("agent:{a}"),
        Invalidation::Manifest(k) => format!("manifest:{k}"),
        Invalidation::Tools(a) => format!("tools:{a}"),
        Invalidation::Catalog => "catalog".to_string(),
        Invalidation::McpServers => "mcp_servers".to_string(),
    }
}

pub fn decode(s: &str) -> Option<Invalidation> {
    let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
    match kind {
        "user" => Some(Invalidation::User(rest.to_string())),
        "key" => Some(Invalidation::ApiKey(rest.to_string())),
        "signin" => Some(Invalidation::SignIn(rest.to_string())),
        "agent" => Some(Invalidation::Agent(rest.to_string())),
        "manifest" => Some(Invalidation::Manifest(rest.to_string())),
        "tools" => Some(Invalidation::Tools(rest.to_string())),
        "catalog" => Some(Invalidation::Catalog),
        "mcp_servers" => Some(Invalidation::McpServers),
        _ => None,
    }
}

pub async fn publish(store: &Store, inv: &Invalidation) {
    if store.backend != Backend::Postgres {
        return;
    }
    if let Err(e) = sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(encode(inv))
        .execute(&store.pool)
        .await
    {
        tracing::warn!(error = %e, "could not publish a cache invalidation; other servers rely on their cache lifetime");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidations_round_trip_through_their_text_form() {
        for inv in [
            Invalidation::User("u1".into()),
            Invalidation::ApiKey("abc".into()),
            Invalidation::SignIn("d1".into()),
            Invalidation::Agent("support@acme".into()),
            Invalidation::Manifest("a|d".into()),
            Invalidation::Tools("a".into()),
            Invalidation::Catalog,
            Invalidation::McpServers,
        ] {
            assert_eq!(
                encode(&decode(&encode(&inv)).expect("decodes")),
                encode(&inv)
            );
        }
    }
}
