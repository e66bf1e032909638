use sqlx::FromRow;

use super::{b, new_id, now_ms, Store};

#[derive(Clone, Debug, FromRow)]
pub struct UserRow {
    pub id: String,
    pub email: String,
    pub password_hash: String,
    pub is_admin: i64,
    pub is_active: i64,
    pub created_at: i64,
    /// The `limits` object as JSON text; NULL for none.
    pub limits: Option<String>,
    /// Login tokens issued before this (Unix ms) are refused.
    pub tokens_valid_after: i64,
    /// The `mcp` grant as JSON text; NULL for no MCP access.
    pub mcp: Option<String>,
}

impl UserRow {
    pub fn admin(&self) -> bool {
        self.is_admin != 0
    }
    pub fn active(&self) -> bool {
        self.is_active != 0
    }
}

const COLS: &str =
    "id, email, password_hash, is_admin, is_active, created_at, tokens_valid_after, limits, mcp";

pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            d.is_unique_violation()
                || d.message().contains("UNIQUE")
                || d.message().contains("duplicate key")
        }
        _ => false,
    }
}

impl Store {
    /// Inserts a user; `Ok(None)` when the e-mail is taken.
    pub async fn create_user(
        &self,
        email: &str,
        hash: &str,
        is_admin: bool,
    ) -> Result<Option<UserRow>, sqlx::Error> {
        let now = now_ms();
        let row = UserRow {
            id: new_id(),
            email: email.to_string(),
            password_hash: hash.to_string(),
            is_admin: b(is_admin),
            is_active: 1,
            created_at: now,
            limits: None,
            tokens_valid_after: 0,
            mcp: None,
        };
        let res = sqlx::query(
            "INSERT INTO users (id, email, password_hash, is_admin, is_active, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 1, $5, $5)",
        )
        .bind(&row.id)
        .bind(&row.email)
        .bind(&row.password_hash)
        .bind(row.is_admin)
        .bind(now)
        .execute(&self.pool)
        .await;
        match res {
            Ok(_) => Ok(Some(row)),
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<UserRow>, sqlx::Error> {
        sqlx::query_as::<_, UserRow>(&format!("SELECT {COLS} FROM users WHERE email = $1"))
            .bind(email)
            .fetch_optional(&self.pool)
            .await
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<UserRow>, sqlx::Error> {
        sqlx::query_as::<_, UserRow>(&format!("SELECT {COLS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
    }

    pub async fn list_users(&self) -> Result<Vec<UserRow>, sqlx::Error> {
        sqlx::query_as::<_, UserRow>(&format!("SELECT {COLS} FROM users ORDER BY created_at, id"))
            .fetch_all(&self.pool)
            .await
    }

    pub async fn update_user(
        &self,
        id: &str,
        is_active: Option<bool>,
        is_admin: Option<bool>,
        password_hash: Option<&str>,
    ) -> Result<Option<UserRow>, sqlx::Error> {
        let n = sqlx::query(
            "UPDATE users SET
                is_active = COALESCE($2, is_active),
                is_admin = COALESCE($3, is_admin),
                password_hash = COALESCE($4, password_hash),
                tokens_valid_after = CASE WHEN $4 IS NULL THEN tokens_valid_after ELSE $5 END,
                updated_at = $5
             WHERE id = $1",
        )
        .bind(id)
        .bind(is_active.map(b))
        .bind(is_admin.map(b))
        .bind(password_hash)
        .bind(now_ms())
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 0 {
            return Ok(None);
        }
        self.user_by_id(id).await
    }
}

impl Store {
    pub async fn touch_sign_ins(&self, stamps: &[(String, i64)]) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        for (id, at) in stamps {
            sqlx::query("UPDATE sign_ins SET last_used_at = $2 WHERE device_id = $1")
                .bind(id)
                .bind(*at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }
}
