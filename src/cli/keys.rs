//! `gatehouse keys create|list`.

use clap::Subcommand;
use serde_json::json;

use super::{open_store, print_json, CliResult};
use crate::auth::accounts::{self, NewKey};
use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key for a user; prints the key (gtk_...) alone on one line.
    Create {
        /// The owner's e-mail address.
        #[arg(long)]
        user: String,
        /// A name to tell the key apart (1 to 200 characters).
        #[arg(long)]
        name: String,
        /// Comma-separated model ids the key may use (default: every model).
        #[arg(long)]
        models: Option<String>,
        /// When the key stops working, RFC 3339 (e.g. 2027-01-31T00:00:00Z).
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// List a user's keys, without secrets.
    List {
        /// The owner's e-mail address.
        #[arg(long)]
        user: String,
    },
}

pub async fn run(cmd: KeysCommand, settings: &Settings) -> CliResult {
    match cmd {
        KeysCommand::Create {
            user,
            name,
            models,
            expires_at,
        } => {
            let new = NewKey {
                name,
                expires_at,
                models: models.map(|m| m.split(',').map(|s| s.trim().to_string()).collect()),
                // Limits are set through the API (PATCH /api/api-keys/{id}).
                limits: crate::limits::Limits::default(),
                mcp: None,
            };
            // Bad input is refused before the database is touched.
            crate::users::Email::parse(&user)?;
            accounts::check_new_key(&new)?;
            let store = open_store(settings).await?;
            let owner = accounts::user_by_email(&store, &user).await?;
            let (_, secret) = accounts::create_key(&store, &owner.id, new).await?;
            println!("{secret}");
            Ok(())
        }
        KeysCommand::List { user } => {
            crate::users::Email::parse(&user)?;
            let store = open_store(settings).await?;
            let owner = accounts::user_by_email(&store, &user).await?;
            let keys = store.list_api_keys(&owner.id).await?;
            print_json(&json!(keys
                .iter()
                .map(|k| accounts::key_json(k, None))
                .collect::<Vec<_>>()))
        }
    }
}
