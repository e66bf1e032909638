//! A small concurrent cache of validated credentials. Entries live at most
//! `ttl` (the safety net); writes that revoke something evict at once. A
//! generation counter stops a fill that raced with an eviction from putting
//! a stale entry back.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

pub struct TtlCache<K, V> {
    map: DashMap<K, (Instant, V)>,
    ttl: Duration,
    generation: AtomicU64,
    max_entries: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration, max_entries: usize) -> Self {
        TtlCache {
            map: DashMap::new(),
            ttl,
            generation: AtomicU64::new(0),
            max_entries,
        }
    }

    pub fn get<Q>(&self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entry = self.map.get(k)?;
        if entry.0.elapsed() < self.ttl {
            Some(entry.1.clone())
        } else {
            drop(entry);
            self.map.remove(k);
            None
        }
    }

    /// The cached value, or what `load` finds, stored unless an eviction
    /// raced the load. `Ok(None)` from `load` is not cached, so something
    /// created a moment later is seen at once.
    /// The key is borrowed and copied only when a loaded value is kept.
    pub async fn get_or_load<Q, E, Fut>(
        &self,
        key: &Q,
        load: impl FnOnce() -> Fut,
    ) -> Result<Option<V>, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        Fut: std::future::Future<Output = Result<Option<V>, E>>,
    {
        if let Some(v) = self.get(key) {
            return Ok(Some(v));
        }
        let generation = self.generation();
        let Some(v) = load().await? else {
            return Ok(None);
        };
        self.insert(key.to_owned(), v.clone(), generation);
        Ok(Some(v))
    }

    /// Take before reading the database; pass to `insert`.
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn insert(&self, k: K, v: V, generation: u64) {
        if self.map.len() >= self.max_entries {
            // Bounded: drop everything rather than grow without limit; it refills.
            self.map.clear();
        }
        if self.generation.load(Ordering::Acquire) == generation {
            self.map.insert(k, (Instant::now(), v));
            // An eviction may have slipped in between the check and the insert.
            if self.generation.load(Ordering::Acquire) != generation {
                self.map.clear();
            }
        }
    }

    pub fn remove(&self, k: &K) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.map.remove(k);
    }

    pub fn remove_where(&self, f: impl Fn(&K, &V) -> bool) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.map.retain(|k, v| !f(k, &v.1));
    }

    pub fn clear(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_expires_after_ttl() {
        let c = TtlCache::new(Duration::from_millis(20), 10);
        c.insert(1, "a", c.generation());
        assert_eq!(c.get(&1), Some("a"));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(c.get(&1), None);
    }

    #[test]
    fn fill_that_raced_an_eviction_is_not_stored() {
        let c = TtlCache::new(Duration::from_secs(60), 10);
        let g = c.generation();
        c.remove(&1);
        c.insert(1, "stale", g);
        assert_eq!(c.get(&1), None);
    }

    #[tokio::test]
    async fn a_load_raced_by_an_eviction_is_returned_but_not_kept() {
        let c = TtlCache::new(Duration::from_secs(60), 10);
        let v = c
            .get_or_load(&1, || async {
                c.remove(&1);
                Ok::<_, ()>(Some("stale"))
            })
            .await;
        assert_eq!(v, Ok(Some("stale")));
        assert_eq!(c.get(&1), None);
    }

    #[tokio::test]
    async fn a_miss_is_not_cached_and_a_hit_is() {
        let c = TtlCache::new(Duration::from_secs(60), 10);
        assert_eq!(
            c.get_or_load(&1, || async { Ok::<_, ()>(None) }).await,
            Ok(None)
        );
        assert_eq!(
            c.get_or_load(&1, || async { Ok::<_, ()>(Some("new")) })
                .await,
            Ok(Some("new"))
        );
        // Now cached: the loader is not called again.
        assert_eq!(
            c.get_or_load(&1, || async { Err::<Option<&str>, ()>(()) })
                .await,
            Ok(Some("new"))
        );
    }
}
