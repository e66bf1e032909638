//! Cluster-wide limit counters, live servers, requests in flight, the
//! shared login throttle, and the `limits` columns. Plain data in and out:
//! the rules live in `crate::limits`.

use sqlx::FromRow;

use super::Store;

#[derive(Clone, Debug, PartialEq, Eq, FromRow)]
pub struct CounterRow {
    pub subject: String,
    pub metric: String,
    pub win: i64,
    pub n: i64,
}

/// One budget reservation made in the database
/// ([`Store::limit_reserve_budget`]).
pub struct BudgetReservation<'a> {
    pub subject: &'a str,
    /// The subject its open reservations are kept under in `limit_in_flight`.
    pub reserved_subject: &'a str,
    pub server_id: &'a str,
    /// The counters to read: from this second, day and month on.
    pub windows: (i64, i64, i64),
    /// Reservations of servers silent since before this are not counted.
    pub alive_since: i64,
    pub now: i64,
    /// This server's open reservations for the subject with this one.
    pub mine_after: i64,
}

/// Where a `limits` column lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitsOwner {
    ApiKey,
    User,
    Agent,
}

impl LimitsOwner {
    fn table_and_key(self) -> (&'static str, &'static str) {
        match self {
            LimitsOwner::ApiKey => ("api_keys", "id"),
            LimitsOwner::User => ("users", "id"),
            LimitsOwner::Agent => ("agents", "address"),
        }
    }
}

/// Subjects per `IN (...)` list: well under every driver's parameter limit.
const CHUNK: usize = 400;

fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// The stored `limits` JSON of a key, user or agent; `Ok(None)` for no
    /// limits, `Err(RowNotFound)` when the row does not exist.
    pub async fn limits_of(
        &self,
        owner: LimitsOwner,
        id: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        let (table, key) = owner.table_and_key();
        let row: Option<(Option<String>,)> =
            sqlx::query_as(&format!("SELECT limits FROM {table} WHERE {key} = $1"))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| r.0).ok_or(sqlx::Error::RowNotFound)
    }

    /// Sets (or with `None` clears) the `limits` of a key, user or agent;
    /// false when there is no such row.
    pub async fn set_limits(
        &self,
        owner: LimitsOwner,
        id: &str,
        limits: Option<&str>,
    ) -> Result<bool, sqlx::Error> {
        let (table, key) = owner.table_and_key();
        let done = sqlx::query(&format!("UPDATE {table} SET limits = $2 WHERE {key} = $1"))
            .bind(id)
            .bind(limits)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Sets (or clears) the limits of the caller's live key; returns its hash
    /// (to evict from caches), or None when the caller has no such key.
    pub async fn set_api_key_limits(
        &self,
        user_id: &str,
        id: &str,
        limits: Option<&str>,
    ) -> Result<Option<String>, sqlx::Error> {
        sqlx::query_scalar(
            "UPDATE api_keys SET limits = $3 WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL
             RETURNING key_hash",
        )
        .bind(id)
        .bind(user_id)
        .bind(limits)
        .fetch_optional(&self.pool)
        .await
    }

    /// The stored limits of the caller's live key: `None` when there is no
    /// such key, `Some(None)` when it has no limits.
    pub async fn api_key_limits(
        &self,
        user_id: &str,
        id: &str,
    ) -> Result<Option<Option<String>>, sqlx::Error> {
        let row: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT limits FROM api_keys WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL",
        )
        .bind(id)
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.0))
    }

    /// Adds `delta` to one counter; returns the counter's new total (every
    /// server's share).
    pub async fn limit_add(
        &self,
        subject: &str,
        metric: &str,
        win: i64,
        delta: i64,
    ) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar(
            "INSERT INTO limit_counters (subject, metric, win, n) VALUES ($1, $2, $3, $4)
             ON CONFLICT (subject, metric, win) DO UPDATE SET n = limit_counters.n + excluded.n
             RETURNING n",
        )
        .bind(subject)
        .bind(metric)
        .bind(win)
        .bind(delta)
        .fetch_one(&self.pool)
        .await
    }

    /// Reserves one request of `subject` in second `sec` if the requests
    /// counted from second `sec_from` on are below `limit`, one caller at a
    /// time across servers (the subject's lock row, win -1, is locked first).
    /// Returns whether it fitted and the subject's counters as they were
    /// before (per-second ones from `sec_from`, daily ones from `day_from`).
    pub async fn limit_reserve(
        &self,
        subject: &str,
        sec: i64,
        (sec_from, day_from, month_from): (i64, i64, i64),
        limit: i64,
    ) -> Result<(bool, Vec<CounterRow>), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO limit_counters (subject, metric, win, n) VALUES ($1, 'r', -1, 0)
             ON CONFLICT (subject, metric, win) DO UPDATE SET n = 0",
        )
        .bind(subject)
        .execute(&mut *tx)
        .await?;
        let rows = sqlx::query_as::<_, CounterRow>(
            "SELECT subject, metric, win, n FROM limit_counters
             WHERE subject = $1
               AND ((metric IN ('r', 't') AND win >= $2) OR (metric IN ('d', 'sd') AND win >= $3) OR (metric = 'sm' AND win >= $4))",
        )
        .bind(subject)
        .bind(sec_from)
        .bind(day_from)
        .bind(month_from)
        .fetch_all(&mut *tx)
        .await?;
        let used: i64 = rows.iter().filter(|r| r.metric == "r").map(|r| r.n).sum();
        let fits = used < limit;
        if fits {
            sqlx::query(
                "INSERT INTO limit_counters (subject, metric, win, n) VALUES ($1, 'r', $2, 1)
                 ON CONFLICT (subject, metric, win) DO UPDATE SET n = limit_counters.n + 1",
            )
            .bind(subject)
            .bind(sec)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok((fits, rows))
    }

    /// Adds to many counters in one transaction (one commit, so one disk
    /// flush on SQLite); `items` are (subject, metric, win, delta), written
    /// in sorted order so two servers never lock rows in opposite orders.
    /// Returns each counter's new total, in the order given.
    pub async fn limit_add_many(
        &self,
        items: &[(&str, &str, i64, i64)],
    ) -> Result<Vec<i64>, sqlx::Error> {
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by(|a, b| {
            let (x, y) = (&items[*a], &items[*b]);
            (x.0, x.1, x.2).cmp(&(y.0, y.1, y.2))
        });
        let mut totals = vec![0; items.len()];
        let mut tx = self.pool.begin().await?;
        for i in order {
            let (subject, metric, win, delta) = items[i];
            totals[i] = sqlx::query_scalar(
                "INSERT INTO limit_counters (subject, metric, win, n) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (subject, metric, win) DO UPDATE SET n = limit_counters.n + excluded.n
                 RETURNING n",
            )
            .bind(subject)
            .bind(metric)
            .bind(win)
            .bind(delta)
            .fetch_one(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(totals)
    }

    /// The counters of `subjects`: per-second ones ('r', 't') from second
    /// `sec_from` on, daily ones ('d' tokens, 'sd' spend) from day
    /// `day_from` on and monthly ones ('sm' spend) from month `month_from` on.
    pub async fn limit_counters_of(
        &self,
        subjects: &[String],
        sec_from: i64,
        day_from: i64,
        month_from: i64,
    ) -> Result<Vec<CounterRow>, sqlx::Error> {
        let mut out = Vec::new();
        for chunk in subjects.chunks(CHUNK) {
            let sql = format!(
                "SELECT subject, metric, win, n FROM limit_counters
                 WHERE subject IN ({})
                   AND ((metric IN ('r', 't') AND win >= $1) OR (metric IN ('d', 'sd') AND win >= $2)
                        OR (metric = 'sm' AND win >= $3))",
                placeholders(4, chunk.len())
            );
            let mut q = sqlx::query_as::<_, CounterRow>(&sql)
                .bind(sec_from)
                .bind(day_from)
                .bind(month_from);
            for s in chunk {
                q = q.bind(s);
            }
            out.extend(q.fetch_all(&self.pool).await?);
        }
        Ok(out)
    }

    /// Reserves nanos of a caller's budgets, one caller at a time across
    /// servers (the caller's lock row, metric 'b' win -1, is locked first):
    /// reads the caller's counters (the windows of `r.windows`), every
    /// other live server's open reservations, and asks `decide` (the day's
    /// and the month's spend in the database, the others' reservations)
    /// whether it fits; if so, writes this server's reservations as
    /// `r.mine_after`. Returns the decision, the counters and the others'
    /// reservations.
    pub async fn limit_reserve_budget(
        &self,
        r: BudgetReservation<'_>,
        decide: impl FnOnce(i64, i64, i64) -> bool,
    ) -> Result<(bool, Vec<CounterRow>, i64), sqlx::Error> {
        let (sec_from, day_from, month_from) = r.windows;
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO limit_counters (subject, metric, win, n) VALUES ($1, 'b', -1, 0)
             ON CONFLICT (subject, metric, win) DO UPDATE SET n = 0",
        )
        .bind(r.subject)
        .execute(&mut *tx)
        .await?;
        let rows = sqlx::query_as::<_, CounterRow>(
            "SELECT subject, metric, win, n FROM limit_counters
             WHERE subject = $1
               AND ((metric IN ('r', 't') AND win >= $2) OR (metric IN ('d', 'sd') AND win >= $3) OR (metric = 'sm' AND win >= $4))",
        )
        .bind(r.subject)
        .bind(sec_from)
        .bind(day_from)
        .bind(month_from)
        .fetch_all(&mut *tx)
        .await?;
        let elsewhere: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(SUM(n) AS BIGINT) FROM limit_in_flight
             WHERE subject = $1 AND server_id <> $2 AND updated_at >= $3 AND n > 0",
        )
        .bind(r.reserved_subject)
        .bind(r.server_id)
        .bind(r.alive_since)
        .fetch_one(&mut *tx)
        .await?;
        let elsewhere = elsewhere.unwrap_or(0);
        let sum = |metric: &str, from: i64| -> i64 {
            rows.iter()
                .filter(|c| c.metric == metric && c.win >= from)
                .map(|c| c.n)
                .sum()
        };
        let fits = decide(sum("sd", day_from), sum("sm", month_from), elsewhere);
        if fits {
            sqlx::query(
                "INSERT INTO limit_in_flight (subject, server_id, n, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (subject, server_id) DO UPDATE SET n = excluded.n, updated_at = excluded.updated_at",
            )
            .bind(r.reserved_subject)
            .bind(r.server_id)
            .bind(r.mine_after)
            .bind(r.now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok((fits, rows, elsewhere))
    }

    /// Marks this server alive; returns how many servers were seen since
    /// `alive_since` (this one included).
    pub async fn limit_heartbeat(
        &self,
        server_id: &str,
        now: i64,
        alive_since: i64,
    ) -> Result<i64, sqlx::Error> {
        sqlx::query(
            "INSERT INTO limit_servers (server_id, seen_at) VALUES ($1, $2)
             ON CONFLICT (server_id) DO UPDATE SET seen_at = excluded.seen_at",
        )
        .bind(server_id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        sqlx::query_scalar("SELECT COUNT(*) FROM limit_servers WHERE seen_at >= $1")
            .bind(alive_since)
            .fetch_one(&self.pool)
            .await
    }

    /// A server that stops cleanly leaves at once (its share goes to the others).
    pub async fn limit_server_gone(&self, server_id: &str) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM limit_servers WHERE server_id = $1")
            .bind(server_id)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM limit_in_flight WHERE server_id = $1")
            .bind(server_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Writes this server's requests in flight per subject.
    pub async fn limit_put_in_flight(
        &self,
        server_id: &str,
        rows: &[(String, i64)],
        now: i64,
    ) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        for (subject, n) in rows {
            sqlx::query(
                "INSERT INTO limit_in_flight (subject, server_id, n, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (subject, server_id) DO UPDATE SET n = excluded.n, updated_at = excluded.updated_at",
            )
            .bind(subject)
            .bind(server_id)
            .bind(*n)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    /// Requests in flight on the other servers, per subject, from rows
    /// written since `fresh_since` (a server that died stops counting).
    pub async fn limit_in_flight_elsewhere(
        &self,
        server_id: &str,
        subjects: &[String],
        fresh_since: i64,
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let mut out = Vec::new();
        for chunk in subjects.chunks(CHUNK) {
            let sql = format!(
                "SELECT subject, CAST(SUM(n) AS BIGINT) FROM limit_in_flight
                 WHERE server_id <> $1 AND updated_at >= $2 AND n > 0 AND subject IN ({})
                 GROUP BY subject",
                placeholders(3, chunk.len())
            );
            let mut q = sqlx::query_as::<_, (String, i64)>(&sql)
                .bind(server_id)
                .bind(fresh_since);
            for s in chunk {
                q = q.bind(s);
            }
            out.extend(q.fetch_all(&self.pool).await?);
        }
        Ok(out)
    }

    /// Drops counters no window can see any more, and rows of servers gone.
    pub async fn limit_cleanup(
        &self,
        sec_before: i64,
        day_before: i64,
        month_before: i64,
        stale_before: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM limit_counters WHERE metric IN ('r', 't') AND win < $1")
            .bind(sec_before)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM limit_counters WHERE metric IN ('d', 'sd') AND win < $1")
            .bind(day_before)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM limit_counters WHERE metric = 'sm' AND win < $1")
            .bind(month_before)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM limit_in_flight WHERE updated_at < $1")
            .bind(stale_before)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM limit_servers WHERE seen_at < $1")
            .bind(stale_before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Counts a login attempt before its password is checked, atomically
    /// across servers. `keys` are the throttle keys (account, address), each
    /// with failures older than `cutoff` forgotten. `decide` sees each key's
    /// `(count, oldest)` of counted failures and says whether the attempt may
    /// go on; if so it is recorded under every key, and the ids of its rows
    /// are returned (to remove should the password prove right).
    pub async fn login_attempt(
        &self,
        keys: &[String],
        cutoff: i64,
        now: i64,
        decide: impl FnOnce(&[(i64, Option<i64>)]) -> bool,
    ) -> Result<Result<Vec<String>, Vec<(i64, Option<i64>)>>, sqlx::Error> {
        let mut sorted: Vec<&String> = keys.iter().collect();
        sorted.sort();
        let mut tx = self.pool.begin().await?;
        // Lock each key's row first (sorted, so two attempts never wait on
        // each other in opposite orders); a concurrent attempt on the same
        // key waits here until this one has committed its count.
        for k in &sorted {
            sqlx::query(
                "INSERT INTO login_throttle_keys (key, touched_at) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET touched_at = excluded.touched_at",
            )
            .bind(*k)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let mut counts = Vec::with_capacity(keys.len());
        for k in keys {
            sqlx::query("DELETE FROM login_failures WHERE key = $1 AND at <= $2")
                .bind(k)
                .bind(cutoff)
                .execute(&mut *tx)
                .await?;
            let row: (i64, Option<i64>) =
                sqlx::query_as("SELECT COUNT(*), MIN(at) FROM login_failures WHERE key = $1")
                    .bind(k)
                    .fetch_one(&mut *tx)
                    .await?;
            counts.push(row);
        }
        if !decide(&counts) {
            tx.commit().await?;
            return Ok(Err(counts));
        }
        let mut ids = Vec::with_capacity(keys.len());
        for k in keys {
            let id = super::new_id();
            sqlx::query("INSERT INTO login_failures (id, key, at) VALUES ($1, $2, $3)")
                .bind(&id)
                .bind(k)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            ids.push(id);
        }
        tx.commit().await?;
        Ok(Ok(ids))
    }

    /// A login succeeded: its own rows were no failure, and the account's
    /// earlier failures are forgiven.
    pub async fn login_succeeded(
        &self,
        ids: &[String],
        account_key: &str,
    ) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        for id in ids {
            sqlx::query("DELETE FROM login_failures WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM login_failures WHERE key = $1")
            .bind(account_key)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// Forgets failures (and idle key rows) that no window can see.
    pub async fn login_cleanup(&self, cutoff: i64) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM login_failures WHERE at <= $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM login_throttle_keys WHERE touched_at <= $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
