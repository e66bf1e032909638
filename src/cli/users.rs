//! `gatehouse users create|list|set-password|disable`.

use clap::Subcommand;
use serde_json::json;

use super::{auth_for, open_store, print_json, read_password_stdin, CliError, CliResult};
use crate::auth::accounts::{self, UserChange};
use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create a user; prints {"id","email","is_admin"}.
    Create {
        /// The user's e-mail address (their login name).
        #[arg(long)]
        email: String,
        /// Make the user an administrator.
        #[arg(long)]
        admin: bool,
        /// Read the password from the first line of standard input (required:
        /// a password on the command line would show in the process list).
        #[arg(long)]
        password_stdin: bool,
    },
    /// List the users (no password data).
    List,
    /// Set a user's password (read from standard input).
    SetPassword {
        #[arg(long)]
        email: String,
        /// Read the password from the first line of standard input (required).
        #[arg(long)]
        password_stdin: bool,
    },
    /// Disable a user: their logins, API keys and agent sign-ins stop working.
    Disable {
        #[arg(long)]
        email: String,
    },
}

fn password_from_stdin(flag: bool) -> CliResult<String> {
    if !flag {
        return Err(CliError::usage(
            "the password is read from standard input: add --password-stdin",
        ));
    }
    read_password_stdin()
}

pub async fn run(cmd: UsersCommand, settings: &Settings) -> CliResult {
    match cmd {
        UsersCommand::Create {
            email,
            admin,
            password_stdin,
        } => {
            // Bad input is refused before the database is touched.
            let password = password_from_stdin(password_stdin)?;
            crate::users::Email::parse(&email)?;
            crate::auth::passwords::check_password_rules(&password).map_err(CliError::usage)?;
            let store = open_store(settings).await?;
            let u = accounts::create_user(&store, &email, password, admin).await?;
            print_json(&json!({"id": u.id, "email": u.email, "is_admin": u.admin()}))
        }
        UsersCommand::List => {
            let store = open_store(settings).await?;
            let users = store.list_users().await?;
            print_json(&json!(users
                .iter()
                .map(accounts::user_json)
                .collect::<Vec<_>>()))
        }
        UsersCommand::SetPassword {
            email,
            password_stdin,
        } => {
            let password = password_from_stdin(password_stdin)?;
            crate::users::Email::parse(&email)?;
            crate::auth::passwords::check_password_rules(&password).map_err(CliError::usage)?;
            let store = open_store(settings).await?;
            // Also ends the user's sign-ins and earlier login tokens.
            let user =
                accounts::set_password(&auth_for(&store, settings), &email, password).await?;
            print_json(&accounts::user_json(&user))
        }
        UsersCommand::Disable { email } => {
            crate::users::Email::parse(&email)?;
            let store = open_store(settings).await?;
            let user = accounts::user_by_email(&store, &email).await?;
            let change = UserChange {
                is_active: Some(false),
                ..UserChange::default()
            };
            let user = accounts::update_user(&auth_for(&store, settings), &user.id, change).await?;
            print_json(&accounts::user_json(&user))
        }
    }
}
