//! Results computed once per key for the client's lifetime, with concurrent callers for one key
//! sharing a single computation (so two policies on one repository cause one tag-list request,
//! not two racing ones).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

pub(crate) struct Memo<K, V> {
    cells: Mutex<HashMap<K, Arc<OnceCell<V>>>>,
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Memo {
            cells: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> Memo<K, V> {
    /// The value for `key`, computing it with `init` if no caller has yet. Errors are values
    /// here too: a repository that failed once is not asked again within the client's lifetime.
    pub(crate) async fn get_or_init<F, Fut>(&self, key: K, init: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        // The std lock is held only to find the cell, never across an await.
        let cell = self
            .cells
            .lock()
            .expect("memo lock poisoned")
            .entry(key)
            .or_default()
            .clone();
        cell.get_or_init(init).await.clone()
    }

    /// Forgets every result, so the next caller computes it again.
    pub(crate) fn clear(&self) {
        self.cells.lock().expect("memo lock poisoned").clear();
    }

    /// Forgets the results of the keys `forget` names, so their next caller computes them again.
    pub(crate) fn forget(&self, forget: impl Fn(&K) -> bool) {
        self.cells
            .lock()
            .expect("memo lock poisoned")
            .retain(|key, _| !forget(key));
    }

    /// Keeps only the results `keep` accepts. A computation still running is forgotten too;
    /// the callers already waiting on it still get its result.
    pub(crate) fn retain(&self, keep: impl Fn(&V) -> bool) {
        self.cells
            .lock()
            .expect("memo lock poisoned")
            .retain(|_, cell| cell.get().is_some_and(&keep));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn concurrent_callers_share_one_computation() {
        let memo: Memo<&str, u32> = Memo::default();
        let runs = AtomicUsize::new(0);
        let slow = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            7
        };
        let (a, b, c) = tokio::join!(
            memo.get_or_init("shop/api", slow),
            memo.get_or_init("shop/api", slow),
            memo.get_or_init("shop/web", slow),
        );
        assert_eq!((a, b, c), (7, 7, 7));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per distinct key");
    }

    #[tokio::test]
    async fn forgotten_results_are_computed_again() {
        let memo: Memo<&str, Result<u32, ()>> = Memo::default();
        let runs = AtomicUsize::new(0);
        let count = |v: Result<u32, ()>| {
            let runs = &runs;
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                v
            }
        };
        memo.get_or_init("ok", || count(Ok(1))).await.unwrap();
        memo.get_or_init("failed", || count(Err(())))
            .await
            .unwrap_err();
        memo.retain(Result::is_ok);
        memo.get_or_init("ok", || count(Ok(1))).await.unwrap();
        memo.get_or_init("failed", || count(Ok(2))).await.unwrap();
        assert_eq!(
            runs.load(Ordering::SeqCst),
            3,
            "only the failure was asked again"
        );
        memo.clear();
        memo.get_or_init("ok", || count(Ok(1))).await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 4);
        memo.get_or_init("kept", || count(Ok(3))).await.unwrap();
        memo.forget(|k| *k == "ok");
        memo.get_or_init("kept", || count(Ok(3))).await.unwrap();
        memo.get_or_init("ok", || count(Ok(1))).await.unwrap();
        assert_eq!(
            runs.load(Ordering::SeqCst),
            6,
            "only the forgotten key was asked again"
        );
    }
}
